"""MIG through NVML's calls, against the MIG-modelling pynvml stand-in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hami_deviceplugin.errors import MigError
from hami_deviceplugin.gpu.mig.nvml_control import NvmlMigControl, read_capability
from hami_deviceplugin.gpu.mig.tables import fake_capability
from hami_deviceplugin.gpu.nvml_smoke import smoke
from hami_protocol.config.node import NodeSettings
from hami_protocol.node.registry import MigPlacement

from ..fake_pynvml import FakeGpu
from .fake_pynvml_mig import FakeMigNvml, MigGpu

A100 = fake_capability("A100-SXM4-40GB")
assert A100 is not None
P = {p.name: p for p in A100.profiles}
UUID = "GPU-00000000-aaaa-0000-0000-000000000000"


def nvml(**mig: object) -> FakeMigNvml:
    fake = FakeMigNvml(gpus=[FakeGpu(UUID, "NVIDIA A100-SXM4-40GB", 40 << 30, b"0000:1b:00.0")])
    fake.mig[0] = MigGpu(capability=A100, **mig)  # type: ignore[arg-type]
    return fake


def test_capability_is_read_from_nvml() -> None:
    fake = nvml()
    read = read_capability(fake, 0)
    assert read is not None
    assert read.full_sms == A100.full_sms
    assert sorted(read.profiles, key=lambda p: p.name) == sorted(
        A100.profiles, key=lambda p: p.name
    )
    plain = FakeMigNvml(gpus=[FakeGpu(UUID, "Tesla T4", 1, b"0000:1b:00.0")])
    assert read_capability(plain, 0) is None


async def test_create_read_destroy() -> None:
    fake = nvml()
    control = NvmlMigControl(fake)
    made = await control.create(UUID, P["3g.20gb"], MigPlacement(4, 4))
    second = await control.create(UUID, P["1g.5gb"], MigPlacement(0, 1))
    state = await control.state(UUID)
    assert state.mode == "enabled"
    assert set(state.instances) == {made, second}
    assert made.mig_uuid.startswith("MIG-")
    assert made.ci_id == 0
    with pytest.raises(MigError, match="NVML"):
        await control.create(UUID, P["7g.40gb"], MigPlacement(0, 8))
    await control.destroy(UUID, made.gi_id)
    assert (await control.state(UUID)).instances == (second,)
    assert "nvmlComputeInstanceDestroy" in fake.calls


async def test_a_compute_instance_failure_takes_the_gpu_instance_back() -> None:
    fake = nvml()
    fake.failures[("nvmlGpuInstanceCreateComputeInstance", 0)] = 23
    control = NvmlMigControl(fake)
    with pytest.raises(MigError):
        await control.create(UUID, P["1g.5gb"], MigPlacement(3, 1))
    assert fake.mig[0].gpu_instances == {}
    assert (await control.state(UUID)).instances == ()


async def test_modes_and_processes() -> None:
    fake = nvml(current=0, pending=0)
    control = NvmlMigControl(fake)
    assert (await control.state(UUID)).mode == "disabled"
    assert await control.enable(UUID) == "enabled"
    stuck = nvml(current=0, pending=0, reset_required=True)
    assert await NvmlMigControl(stuck).enable(UUID) == "pending"
    assert not await control.busy(UUID)
    fake.mig[0].processes.append(4242)
    assert await control.busy(UUID)


async def test_smoke_lists_mig_and_creates_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = nvml()
    status = await smoke(sysfs_root=tmp_path, node=NodeSettings(), nvml=fake)
    assert status == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_kind = {line["kind"]: line["data"] for line in lines}
    assert by_kind["mig"]["mode"] == "enabled"
    assert {p["name"] for p in by_kind["mig"]["profiles"]} >= {"1g.5gb", "7g.40gb"}
    assert by_kind["mig_register"][0]["mode"] == "mig"
    assert "mig_create" not in by_kind
    assert "nvmlDeviceCreateGpuInstanceWithPlacement" not in fake.calls
    await smoke(sysfs_root=tmp_path, node=NodeSettings(), nvml=fake, mig_create=True)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    created = [line["data"] for line in lines if line["kind"] == "mig_create"]
    assert created[0]["created"]["placement"] == {"start": 6, "size": 1}
    assert created[1] == {"destroyed": created[0]["created"]["gi_id"], "gone": True}
    assert fake.mig[0].gpu_instances == {}
