"""A tour of the protocol: decode what HAMi's components write, show what it means.

Run with ``python -m hami_protocol.demo``.  It exercises the real codecs on the example values of
HAMi's protocol documents and exits non-zero if any of them stops decoding as documented, so it
doubles as a smoke test of an installation.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.node.handshake import check_handshake, parse_handshake
from hami_protocol.node.lock import decide_acquire, decode_node_lock
from hami_protocol.node.registry import decode_node_devices, encode_node_devices_json
from hami_protocol.pod.devices import decode_pod_devices_canonical, encode_pod_devices
from hami_protocol.request.containers import pod_device_requests
from hami_protocol.vendor.table import DEFAULT_VENDORS

V100_REGISTER = (
    "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
    "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
)
POD_DEVICES = (
    "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,3000,0:;"
    "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,5000,0:;"
)
HANDSHAKES = (
    "Requesting_2024.05.14 07:07:33",
    "Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895",
    "Deleted_2024-05-14 07:07:33",
    "something else",
)
LOCK = "2024-05-14T07:07:33Z,default,trainer-0"
POD = {
    "metadata": {"name": "trainer-0", "namespace": "default"},
    "spec": {
        "initContainers": [{"name": "fetch"}],
        "containers": [
            {
                "name": "train",
                "resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3000"}},
            },
            {
                "name": "viz",
                "resources": {
                    "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}
                },
            },
        ],
    },
}


def _section(title: str) -> None:
    print(f"\n== {title}")


def run() -> None:
    _section(f"node registry ({keys.NVIDIA_REGISTER}, legacy colon form)")
    devices = decode_node_devices(V100_REGISTER, key=keys.NVIDIA_REGISTER)
    for dev in devices:
        state = "healthy" if dev.health else "UNHEALTHY"
        print(
            f"  {dev.id}  {dev.type}  {dev.devmem} MiB  split {dev.count}  numa {dev.numa}  {state}"
        )
    print(f"  re-encoded as JSON: {encode_node_devices_json(devices)[:100]}...")

    _section(f"pod decision ({keys.NVIDIA_DEVICES_ALLOCATED})")
    pod_devices = decode_pod_devices_canonical(POD_DEVICES, key=keys.NVIDIA_DEVICES_ALLOCATED)
    for index, container in enumerate(pod_devices):
        for grant in container:
            print(
                f"  container {index}: {grant.uuid} {grant.usedmem} MiB, {grant.usedcores}% cores"
            )
    assert encode_pod_devices(pod_devices) == POD_DEVICES, "canonical round trip broke"

    _section(f"handshakes ({keys.NVIDIA_HANDSHAKE})")
    now = datetime(2024, 5, 14, 7, 10, 0, tzinfo=UTC)
    for value in HANDSHAKES:
        shake = parse_handshake(value)
        verdict = check_handshake(value, now=now, expiry=timedelta(minutes=5), has_allocatable=True)
        print(
            f"  {value[:40]!r:44} -> {shake.state:10} at {shake.timestamp}; "
            f"healthy={verdict.healthy} rewrite={verdict.needs_update}"
        )

    _section(f"node lock ({keys.NODE_LOCK})")
    lock = decode_node_lock(LOCK)
    print(f"  held by {lock.namespace}/{lock.pod} since {lock.acquired.isoformat()}")
    for who in ("trainer-0", "other"):
        action = decide_acquire(
            LOCK, namespace="default", pod=who, now=now, timeout=timedelta(minutes=5)
        )
        print(f"  pod default/{who} asks for it -> {action}")

    _section("container requests (init containers first)")
    requests = pod_device_requests(POD, vendors=DEFAULT_VENDORS)
    for slot in requests.slots:
        for word, req in slot.requests.items():
            print(
                f"  {slot.name:8} {word}: {req.nums} GPU(s), mem {req.memreq} MiB, "
                f"mem% {req.mem_percentagereq}, cores {req.coresreq}"
            )
        if not slot.requests:
            print(f"  {slot.name:8} (no device request)")


def main() -> int:
    try:
        run()
    except (ProtocolError, AssertionError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    print("\nall protocol examples decoded as documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
