"""CDI spec loading and container edits as the runtime applies them (pure: no files, no I/O)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hami_kubesim.kubelet.dra.cdi import (
    CdiError,
    ContainerEdits,
    DeviceNode,
    Mount,
    parse_device_id,
    parse_spec,
    parse_spec_text,
    resolve,
)

KIND = "k8s.gpu.hami.io/claim"
UID = "0f3c2a10-7d1e-4c3b-9a51-3d8e0c1f2b44"  # starts with a digit, as claim UIDs often do


def _spec(version: str = "0.5.0", **top: Any) -> dict[str, Any]:
    return {
        "cdiVersion": version,
        "kind": KIND,
        "containerEdits": {"env": ["SHARED=1"]},
        "devices": [
            {
                "name": f"{UID}-gpu-0",
                "containerEdits": {
                    "env": ["NVIDIA_VISIBLE_DEVICES=GPU-a", "CUDA_DEVICE_MEMORY_LIMIT_0=4096m"],
                    "mounts": [
                        {
                            "hostPath": f"/var/lib/hami/claims/{UID}",
                            "containerPath": f"/usr/local/vgpu/claims/{UID}",
                            "options": ["rw", "bind"],
                        },
                        {
                            "hostPath": "/usr/local/vgpu/libvgpu.so",
                            "containerPath": "/usr/local/vgpu/libvgpu.so",
                            "options": ["ro", "bind"],
                        },
                    ],
                    "deviceNodes": [{"path": "/dev/nvidia0"}],
                },
            },
            {"name": f"{UID}-gpu-1", "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-b"]}},
        ],
        **top,
    }


def test_one_device_brings_the_spec_edits_then_its_own() -> None:
    spec = parse_spec(_spec(), source="a.json")
    edits = resolve([spec], [f"{KIND}={UID}-gpu-0"])
    assert edits.env == (
        "SHARED=1",
        "NVIDIA_VISIBLE_DEVICES=GPU-a",
        "CUDA_DEVICE_MEMORY_LIMIT_0=4096m",
    )
    assert edits.mounts[0] == Mount(
        f"/usr/local/vgpu/claims/{UID}", f"/var/lib/hami/claims/{UID}", ("rw", "bind")
    )
    assert not edits.mounts[0].read_only
    assert edits.mounts[1].read_only
    # No hostPath: the same path on the host; no permissions: rwm.
    assert edits.device_nodes == (DeviceNode("/dev/nvidia0", "/dev/nvidia0", "rwm"),)


def test_spec_edits_once_and_a_later_env_entry_wins() -> None:
    spec = parse_spec(_spec(), source="a.json")
    edits = resolve([spec], [f"{KIND}={UID}-gpu-0", f"{KIND}={UID}-gpu-1", f"{KIND}={UID}-gpu-0"])
    assert edits.env.count("SHARED=1") == 1
    assert edits.env_map["NVIDIA_VISIBLE_DEVICES"] == "GPU-b"
    assert edits.env_map["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"


def test_a_later_spec_overrides_a_device_of_an_earlier_one() -> None:
    low = parse_spec(_spec(), source="/etc/cdi/a.json")
    high_raw = _spec()
    high_raw["devices"][0]["containerEdits"] = {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-z"]}
    high = parse_spec(high_raw, source="/var/run/cdi/a.json")
    edits = resolve([low, high], [f"{KIND}={UID}-gpu-0"])
    assert edits.env_map["NVIDIA_VISIBLE_DEVICES"] == "GPU-z"


def test_unresolvable_ids_are_named_with_the_specs_that_failed() -> None:
    spec = parse_spec(_spec(), source="a.json")
    with pytest.raises(CdiError) as caught:
        resolve(
            [spec],
            [f"{KIND}={UID}-gpu-0", f"{KIND}=other", "not-an-id"],
            spec_errors=["b.json: invalid cdiVersion '9.9.9'"],
        )
    assert str(caught.value) == (
        f"unresolvable CDI devices {KIND}=other, not-an-id "
        "(specs not loaded: b.json: invalid cdiVersion '9.9.9')"
    )


def test_no_ids_no_edits() -> None:
    assert resolve([], []) == ContainerEdits()


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (_spec(version="0.3.0"), "cdiVersion 0.3.0 is too low: device name '0f3c"),
        (_spec(version="2.0.0"), "invalid cdiVersion '2.0.0'"),
        ({**_spec(), "kind": "nodomain"}, "invalid kind 'nodomain'"),
        ({**_spec(), "extra": 1}, "unknown field 'extra' in the spec"),
        ({**_spec(), "devices": []}, "the spec has no devices"),
        ({**_spec(), "devices": [{"name": "-bad"}]}, "invalid device name '-bad'"),
        (
            {**_spec(), "devices": [{"name": "x", "containerEdits": {"envs": []}}]},
            "unknown field 'envs' in device 'x'",
        ),
        (
            {**_spec(), "devices": [{"name": "x", "containerEdits": {"env": ["NOVALUE"]}}]},
            "device 'x'.env entry 'NOVALUE' is not NAME=value",
        ),
        ({**_spec(version="0.5.0"), "annotations": {"a": "b"}}, "annotations needs 0.6.0"),
        (
            {
                **_spec(version="0.5.0"),
                "containerEdits": {"netDevices": [{"hostInterfaceName": "eth1", "name": "n"}]},
            },
            "netDevices needs 1.1.0",
        ),
    ],
)
def test_specs_the_runtime_refuses(raw: dict[str, Any], error: str) -> None:
    with pytest.raises(CdiError) as caught:
        parse_spec(raw, source="x.json")
    assert error in str(caught.value)


def test_device_node_host_path_needs_0_5_and_mount_type_0_4() -> None:
    raw = {
        "cdiVersion": "0.4.0",
        "kind": KIND,
        "devices": [
            {
                "name": "gpu",
                "containerEdits": {
                    "mounts": [{"hostPath": "/a", "containerPath": "/b", "type": "bind"}],
                    "deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/y"}],
                },
            }
        ],
    }
    with pytest.raises(CdiError, match=r"a device node hostPath needs 0\.5\.0"):
        parse_spec(raw)
    raw["cdiVersion"] = "0.5.0"
    assert parse_spec(raw).devices["gpu"].device_nodes[0].host_path == "/dev/y"


def test_json_and_yaml_files() -> None:
    text = json.dumps(_spec())
    assert parse_spec_text(text, source="k8s.gpu.hami.io-claim_x.json").kind == KIND
    yaml_text = f"cdiVersion: 0.6.0\nkind: {KIND}\ndevices:\n  - name: gpu\n"
    assert set(parse_spec_text(yaml_text, source="static.yaml").devices) == {"gpu"}
    with pytest.raises(CdiError, match="cannot decode"):
        parse_spec_text("{", source="broken.json")


def test_device_ids() -> None:
    assert parse_device_id(f"{KIND}={UID}-gpu-0") == (KIND, f"{UID}-gpu-0")
    assert parse_device_id("vendor.com/class=name:with:colons")[1] == "name:with:colons"
    for bad in ("k8s.gpu.hami.io=x", "k8s.gpu.hami.io/claim", "/claim=x", "v/c=-x"):
        with pytest.raises(CdiError):
            parse_device_id(bad)
