"""``hami_mig_device_info``: one sample per realised MIG instance, read from the pods'
``hami.io/vgpu-mig-allocations`` and read back by Prometheus's own parser."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from hami_deviceplugin.monitor.pods import MigDevice, PodRef, pod_ref
from hami_deviceplugin.monitor.series import render_mig
from hami_protocol.keys import NVIDIA_MIG_ALLOCATIONS
from hami_protocol.node.registry import MigPlacement
from hami_protocol.pod.mig import MigReservation, MigRuntimeIds, encode_mig_reservations

_NAMES = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12
)


def _pod(annotation: str) -> dict[str, object]:
    return {
        "metadata": {
            "uid": "u1",
            "namespace": "ns",
            "name": "p",
            "annotations": {NVIDIA_MIG_ALLOCATIONS: annotation},
        },
        "spec": {"initContainers": [{"name": "setup"}], "containers": [{"name": "main"}]},
    }


def test_realised_reservations_become_series_by_container_name() -> None:
    value = encode_mig_reservations(
        [
            MigReservation(
                1, 0, "GPU-a", "1g.5gb", MigPlacement(6, 1), MigRuntimeIds("MIG-x", 13, 0)
            ),
            MigReservation(1, 1, "GPU-a", "3g.20gb", MigPlacement(0, 4)),  # not realised yet
        ]
    )
    ref = pod_ref(_pod(value))
    assert ref.mig == (MigDevice("main", 0, "GPU-a", "MIG-x", "1g.5gb", 13, 0),)
    assert pod_ref(_pod("[{broken")).mig == ()
    (family,) = text_string_to_metric_families(render_mig([ref], legacy=False))
    (sample,) = family.samples
    assert sample.name == "hami_mig_device_info"
    assert sample.value == 1
    assert sample.labels == {
        "namespace": "ns",
        "pod": "p",
        "container": "main",
        "vdevice_index": "0",
        "device_uuid": "GPU-a",
        "mig_uuid": "MIG-x",
        "profile": "1g.5gb",
        "gpu_instance_id": "13",
        "compute_instance_id": "0",
        "zone": "vGPU",
    }


@given(namespace=_NAMES, name=_NAMES, container=_NAMES, legacy=st.booleans())
def test_labels_survive_any_names(namespace: str, name: str, container: str, legacy: bool) -> None:
    device = MigDevice(container, 2, "GPU-" + "a" * 60, "MIG-y", "2g.10gb", 5, 1)
    ref = PodRef("u", namespace, name, frozenset({container}), mig=(device,))
    families = {f.name: f for f in text_string_to_metric_families(render_mig([ref], legacy=legacy))}
    (sample,) = families["hami_mig_device_info"].samples
    assert (sample.labels["namespace"], sample.labels["pod"]) == (namespace, name)
    assert sample.labels["container"] == container
    assert sample.labels["device_uuid"] == "GPU-" + "a" * 36
    assert ("MigInfo" in families) is legacy
    if legacy:
        assert families["MigInfo"].samples[0].labels["instanceid"] == "5"
