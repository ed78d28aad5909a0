"""The report's vendor lines: what each vendor's plugin reads and what each container got."""

from __future__ import annotations

from datetime import UTC, datetime

from hami_kubesim.stack.report import render_report
from hami_kubesim.stack.state import ClusterState
from hami_kubesim.stack.vendor_report import vendor_pod_lines, vendors_of
from hami_protocol import keys

ALLOCATED = keys.devices_allocated_key("cambricon-mlu")
POD = {
    "metadata": {
        "name": "mlu",
        "namespace": "default",
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "annotations": {
            ALLOCATED: "n-cambricon-mlu-1,MLU,5120,25:;",
            "CAMBRICON_DSMLU_PROFILE": "1_25_20",
            "CAMBRICON_DSMLU_ASSIGNED": "true",
            "unrelated.io/key": "x",
        },
    },
    "spec": {"nodeName": "n", "containers": [{"name": "infer"}]},
    "status": {"phase": "Running"},
}
NODE = {
    "metadata": {"name": "n", "annotations": {}},
    "status": {
        "capacity": {
            "cambricon.com/vmlu": "20",
            "cambricon.com/mlu.smlu.vmemory": "192",
            "cambricon.com/mlu.smlu.vcore": "200",
        }
    },
}


def test_a_vendor_pod_shows_what_its_plugin_reads_and_each_containers_devices() -> None:
    assert [p.word for p in vendors_of(POD)] == ["MLU"]
    assert vendor_pod_lines(POD) == [
        "      MLU plugin reads:",
        "        CAMBRICON_DSMLU_ASSIGNED: true",
        "        CAMBRICON_DSMLU_PROFILE: 1_25_20",
        f"        {ALLOCATED}: n-cambricon-mlu-1,MLU,5120,25:;",
        "      infer: n-cambricon-mlu-1 5120 MiB 25 cores",
    ]


def test_the_report_lists_vendor_devices_with_their_load() -> None:
    state = ClusterState(pods=(POD,), nodes=(NODE,), events=(), taken_at=datetime.now(UTC))
    text = render_report(state)
    assert "  n  (2 MLU devices: MLU)" in text
    assert "mem   5120/24576  MiB  20%  cores  25/100  tasks 1/100  mlu" in text
    assert "infer: no GPU" not in text
