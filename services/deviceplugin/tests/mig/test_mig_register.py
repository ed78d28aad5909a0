"""Registration of MIG GPUs (``operatingmode: mig``) and of MPS GPUs, pure."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.gpu.mig.model import profile_core
from hami_deviceplugin.gpu.mig.tables import fake_capability
from hami_deviceplugin.node.register import device_infos, register_value
from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import MigProfileAllow, parse_device_config
from hami_protocol.config.node import NodeSettings
from hami_protocol.node.registry import MigPlacement, decode_node_devices

ALLOW = parse_device_config(DEFAULT_DEVICE_CONFIG_YAML).nvidia.mig_profile_allowlist
MIG = NodeSettings(operating_mode="mig", device_split_count=10, device_memory_scaling=2.0)
A100 = Gpu("GPU-a100", 0, "NVIDIA A100-SXM4-40GB", 40960, mig=fake_capability("A100-SXM4-40GB"))
A30 = Gpu("GPU-a30", 1, "NVIDIA A30", 24576, mig=fake_capability("A30"))
T4 = Gpu("GPU-t4", 2, "Tesla T4", 15360)


def test_a100_registers_the_allowed_profiles_with_nvml_facts() -> None:
    (info,) = device_infos([A100], MIG, mig_allowlist=ALLOW)
    assert (info.mode, info.count, info.devmem, info.devcore) == ("mig", 7, 40960, 100)
    assert [p.name for p in info.mig_profiles] == ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"]
    by_name = {p.name: p for p in info.mig_profiles}
    assert by_name["1g.5gb"].placements == tuple(MigPlacement(s, 1) for s in range(7))
    assert by_name["3g.20gb"].placements == (MigPlacement(0, 4), MigPlacement(4, 4))
    assert by_name["7g.40gb"].placements == (MigPlacement(0, 8),)
    # core = ceil(SMs * 100 / 108)
    assert [p.core for p in info.mig_profiles] == [13, 26, 39, 91]
    assert [p.slice_count for p in info.mig_profiles] == [1, 2, 3, 7]


def test_the_register_value_carries_mig_profiles_on_the_wire() -> None:
    value = register_value([A100, A30, T4], MIG, mig_allowlist=ALLOW)
    document = json.loads(value)
    assert [d["id"] for d in document] == ["GPU-a100", "GPU-a30"]  # T4: no MIG, not registered
    a30 = document[1]
    assert a30["mode"] == "mig"
    assert a30["count"] == 4
    assert [p["name"] for p in a30["migProfiles"]] == ["1g.6gb", "2g.12gb", "4g.24gb"]
    assert decode_node_devices(value)[0].mig_profiles[0].memory_mb == 4864


def test_a_gpu_whose_model_no_entry_allows_is_not_registered() -> None:
    only_a30 = (MigProfileAllow(models=("A30",), profiles=("1g.6gb",)),)
    infos = device_infos([A100, A30], MIG, mig_allowlist=only_a30)
    assert [i.id for i in infos] == ["GPU-a30"]
    assert infos[0].count == 4
    # an allowed name the GPU does not offer is skipped, and with none left the GPU is too
    typo = (MigProfileAllow(models=("A100",), profiles=("1g.6gb",)),)
    assert device_infos([A100], MIG, mig_allowlist=typo) == ()


def test_unhealthy_mig_gpu_registers_unhealthy() -> None:
    (info,) = device_infos([replace(A100, healthy=False)], MIG, mig_allowlist=ALLOW)
    assert info.health is False


@pytest.mark.parametrize("mode", ["mps", "hami-core"])
def test_mps_registers_as_hami_core_with_its_mode(mode: str) -> None:
    node = NodeSettings(operating_mode=mode, device_split_count=10)  # type: ignore[arg-type]
    (info,) = device_infos([A100], node, mig_allowlist=ALLOW)
    assert (info.mode, info.count, info.mig_profiles) == (mode, 10, ())


def test_profile_core_rounds_up() -> None:
    capability = fake_capability("H100-SXM5-80GB")
    assert capability is not None
    assert [profile_core(p, capability.full_sms) for p in capability.profiles] == [
        13,
        13,
        25,
        46,
        49,
        100,
    ]
