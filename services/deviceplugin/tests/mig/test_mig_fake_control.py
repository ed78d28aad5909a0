"""The fake backend's MIG: the ``mig:`` entry of the devices file, faithful instance rules, state
that a new process reads back, injected failures."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_deviceplugin.errors import FakeDevicesError, MigError
from hami_deviceplugin.gpu.backends.fake import FakeBackend, parse_fake_devices
from hami_deviceplugin.gpu.mig.fake_control import FakeMigControl, state_file_for
from hami_deviceplugin.gpu.mig.model import MigProfileSpec
from hami_deviceplugin.gpu.mig.tables import fake_capability
from hami_protocol.node.registry import MigPlacement

GPU = "GPU-a100"
A100 = fake_capability("A100-SXM4-40GB")
assert A100 is not None
P = {p.name: p for p in A100.profiles}


def write(path: Path, mig: dict[str, object], model: str = "NVIDIA A100-SXM4-40GB") -> None:
    gpu = {"uuid": GPU, "model": model, "memory_mib": 40960, "mig": mig}
    path.write_text(yaml.safe_dump({"gpus": [gpu]}))


async def opened(path: Path) -> tuple[FakeBackend, FakeMigControl]:
    backend = FakeBackend(path, sysfs_root=path.parent / "no-sysfs")
    await backend.open()
    return backend, backend.mig_control()


async def test_gpu_reports_its_profile_table(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    write(path, {"mode": "enabled"})
    backend = FakeBackend(path, sysfs_root=tmp_path)
    (gpu,) = await backend.open()
    assert gpu.mig == A100


@pytest.mark.parametrize(
    ("mig", "model", "message"),
    [
        ({"mode": "on"}, "NVIDIA A100-SXM4-40GB", "mode must be one of"),
        ({"colour": 1}, "NVIDIA A100-SXM4-40GB", "unknown keys colour"),
        ({"fail_create_after": -1}, "NVIDIA A100-SXM4-40GB", "non-negative integer"),
        ({}, "Tesla T4", "no MIG profile table for model 'Tesla T4'"),
    ],
)
def test_bad_mig_entries_are_refused(mig: dict[str, object], model: str, message: str) -> None:
    gpu = {"uuid": GPU, "model": model, "memory_mib": 1, "mig": mig}
    with pytest.raises(FakeDevicesError, match=message):
        parse_fake_devices(yaml.safe_dump({"gpus": [gpu]}))


async def test_instances_survive_a_new_process(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    write(path, {"mode": "enabled"})
    _, control = await opened(path)
    made = await control.create(GPU, P["3g.20gb"], MigPlacement(4, 4))
    assert made.mig_uuid.startswith("MIG-")
    assert state_file_for(path).exists()
    _, again = await opened(path)  # a restarted plugin
    assert (await again.state(GPU)).instances == (made,)
    await again.destroy(GPU, made.gi_id)
    assert (await control.state(GPU)).instances == ()


async def test_creation_follows_the_hardware_rules(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    write(path, {"mode": "enabled"})
    _, control = await opened(path)
    first = await control.create(GPU, P["1g.5gb"], MigPlacement(6, 1))
    with pytest.raises(MigError, match="in use"):
        await control.create(GPU, P["7g.40gb"], MigPlacement(0, 8))
    with pytest.raises(MigError, match=r"no 3g\.20gb at 2"):
        await control.create(GPU, P["3g.20gb"], MigPlacement(2, 4))
    second = await control.create(GPU, P["1g.5gb"], MigPlacement(5, 1))
    assert first.gi_id != second.gi_id
    assert first.mig_uuid != second.mig_uuid
    with pytest.raises(MigError, match="no GPU instance 42"):
        await control.destroy(GPU, 42)


async def test_modes(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    write(path, {"mode": "disabled", "busy": True})
    _, control = await opened(path)
    with pytest.raises(MigError, match="MIG mode is disabled"):
        await control.create(GPU, P["1g.5gb"], MigPlacement(0, 1))
    assert await control.busy(GPU)
    assert await control.enable(GPU) == "enabled"
    assert (await control.state(GPU)).mode == "enabled"
    pending = tmp_path / "pending.yaml"
    write(pending, {"mode": "pending"})
    _, stuck = await opened(pending)
    assert await stuck.enable(GPU) == "pending"


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.sampled_from([(p, s) for p in A100.profiles for s in p.placements]), max_size=5),
    st.integers(0, 6),
)
def test_a_failed_create_leaves_the_gpu_as_it_was(
    tmp_path_factory: pytest.TempPathFactory,
    attempts: list[tuple[MigProfileSpec, MigPlacement]],
    fail_after: int,
) -> None:
    path = tmp_path_factory.mktemp("fake") / "gpus.yaml"
    write(path, {"mode": "enabled", "fail_create_after": fail_after})

    async def scenario() -> None:
        _, control = await opened(path)
        for profile, placement in attempts:
            before = await control.state(GPU)
            try:
                await control.create(GPU, profile, placement)
            except MigError:
                assert await control.state(GPU) == before
        placements = [i.placement for i in (await control.state(GPU)).instances]
        for n, a in enumerate(placements):
            for b in placements[n + 1 :]:
                assert a.start + a.size <= b.start or b.start + b.size <= a.start

    asyncio.run(scenario())
