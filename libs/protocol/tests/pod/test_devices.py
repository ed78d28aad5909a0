"""Pod device lists: HAMi's split rules, canonical round trips, consumption, usage collapse."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.errors import DecodeError, ProtocolError, ValidationError
from hami_protocol.pod.devices import (
    MISSING_FIELDS_MESSAGE,
    ContainerDevice,
    DeviceUsageSummary,
    PodDevices,
    PodSingleDevice,
    collapse_device_usage,
    decode_container_devices,
    decode_pod_devices,
    decode_pod_devices_canonical,
    encode_container_devices,
    encode_pod_devices,
    erase_container,
    has_pending,
    next_pending,
    pop_next_pending,
)

GPU = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
KEY = "hami.io/vgpu-devices-to-allocate"


def dev(uuid: str, mem: int, cores: int = 0, kind: str = "NVIDIA") -> ContainerDevice:
    return ContainerDevice(uuid, kind, mem, cores)


@pytest.mark.parametrize(
    ("value", "hami", "canonical"),
    [
        pytest.param(
            f"{GPU},NVIDIA,3000,0:;{GPU},NVIDIA,5000,0:;",
            ((dev(GPU, 3000),), (dev(GPU, 5000),), ()),
            ((dev(GPU, 3000),), (dev(GPU, 5000),)),
            id="protocol-doc-two-containers",
        ),
        pytest.param(
            "UUID1,Type1,1000,30:;",
            ((ContainerDevice("UUID1", "Type1", 1000, 30),), ()),
            ((ContainerDevice("UUID1", "Type1", 1000, 30),),),
            id="unit-test-two-entries",
        ),
        pytest.param(
            f"{GPU},NVIDIA,3000,0:;",
            ((dev(GPU, 3000),), ()),
            ((dev(GPU, 3000),),),
            id="seed-allocated",
        ),
        pytest.param(";", ((), ()), ((),), id="seed-consumed-to-allocate"),
        pytest.param("", ((),), (), id="empty"),
        pytest.param(
            f"{GPU},NVIDIA,3000,0:{GPU},NVIDIA,5000,0: ",
            ((dev(GPU, 3000), dev(GPU, 5000)),),
            ((dev(GPU, 3000), dev(GPU, 5000)),),
            id="seed-old-doc-no-container-terminator",
        ),
        pytest.param(
            ",,0,0:;GPU-a,NVIDIA,1,2:;",
            ((ContainerDevice("", "", 0, 0),), (dev("GPU-a", 1, 2),), ()),
            ((ContainerDevice("", "", 0, 0),), (dev("GPU-a", 1, 2),)),
            id="placeholder-empty-uuid-tolerated",
        ),
        pytest.param(
            ";;GPU-a,NVIDIA,1,2:GPU-b,NVIDIA,3,4:;",
            ((), (), (dev("GPU-a", 1, 2), dev("GPU-b", 3, 4)), ()),
            ((), (), (dev("GPU-a", 1, 2), dev("GPU-b", 3, 4))),
            id="init-slots-preserved",
        ),
        pytest.param(
            "junk:GPU-a,NVIDIA,1,2,extra,fields:;",
            ((dev("GPU-a", 1, 2),), ()),
            ((dev("GPU-a", 1, 2),),),
            id="comma-less-pieces-and-extra-fields-ignored",
        ),
        pytest.param(
            " GPU-a , NVIDIA , +1 , 2 :\n    GPU-b,NVIDIA,3,4:;\n",
            ((dev("GPU-a", 1, 2), dev("GPU-b", 3, 4)), ()),
            ((dev("GPU-a", 1, 2), dev("GPU-b", 3, 4)),),
            id="wrapped-whitespace",
        ),
    ],
)
def test_decode_examples(value: str, hami: PodSingleDevice, canonical: PodSingleDevice) -> None:
    assert decode_pod_devices(value) == hami
    assert decode_pod_devices_canonical(value) == canonical


def test_contract_encode_decode_yields_extra_empty_entry() -> None:
    pod = ((ContainerDevice("UUID1", "Type1", 1000, 30),),)
    encoded = encode_pod_devices(pod)
    assert encoded == "UUID1,Type1,1000,30:;"
    assert decode_pod_devices(encoded) == (*pod, ())
    assert decode_pod_devices_canonical(encoded) == pod


def test_encode_is_byte_exact() -> None:
    pod = ((dev(GPU, 3000),), (), (dev("GPU-a", 1000, 30), dev("GPU-b", 1000, 30)))
    assert encode_pod_devices(pod) == (
        f"{GPU},NVIDIA,3000,0:;;GPU-a,NVIDIA,1000,30:GPU-b,NVIDIA,1000,30:;"
    )
    assert encode_container_devices(pod[2]) == "GPU-a,NVIDIA,1000,30:GPU-b,NVIDIA,1000,30:"
    assert encode_pod_devices(()) == ""


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("GPU-a,NVIDIA,3000:;", MISSING_FIELDS_MESSAGE),
        ("GPU-a,NVIDIA:;", MISSING_FIELDS_MESSAGE),
        ("GPU-a,NVIDIA,2147483648,0:;", "must be integers"),
        ("GPU-a,NVIDIA,-1,0:;", "must be integers"),
        ("GPU-a,NVIDIA,1_000,0:;", "must be integers"),
        ("GPU-a,NVIDIA,16Gi,0:;", "must be integers"),
        ("GPU-a,NVIDIA,1,٣:;", "must be integers"),
    ],
)
def test_decode_errors(value: str, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason) as caught:
        decode_pod_devices(value, key=KEY)
    assert KEY in str(caught.value)
    assert repr(value)[:20] in str(caught.value)


def test_decode_container_devices_alone() -> None:
    assert decode_container_devices("GPU-a,NVIDIA,1,2:GPU-b,NVIDIA,3,4:") == (
        dev("GPU-a", 1, 2),
        dev("GPU-b", 3, 4),
    )
    assert decode_container_devices("") == ()


@pytest.mark.parametrize(
    "device",
    [
        ContainerDevice("GPU;a", "NVIDIA", 1, 1),
        ContainerDevice("GPU-a", "NV:IDIA", 1, 1),
        ContainerDevice("GPU-a", "NVIDIA,", 1, 1),
        ContainerDevice("GPU-a ", "NVIDIA", 1, 1),
        ContainerDevice("GPU-a", "NVI\nDIA", 1, 1),
        ContainerDevice("GPU-a", "NVIDIA", -1, 1),
        ContainerDevice("GPU-a", "NVIDIA", 1, 2**31),
    ],
)
def test_encode_rejects_values_the_wire_cannot_carry(device: ContainerDevice) -> None:
    with pytest.raises(ValidationError):
        encode_pod_devices(((device,),))


# --- device-plugin consumption --------------------------------------------------------------------


def test_pop_consumes_containers_in_order_leaving_empty_segments() -> None:
    pod = decode_pod_devices_canonical(";GPU-a,NVIDIA,1,2:;;GPU-b,NVIDIA,3,4:GPU-c,NVIDIA,5,6:;")
    first = pop_next_pending(pod)
    assert first is not None
    index, devices, pod = first
    assert (index, devices) == (1, (dev("GPU-a", 1, 2),))
    assert encode_pod_devices(pod) == ";;;GPU-b,NVIDIA,3,4:GPU-c,NVIDIA,5,6:;"
    assert has_pending(pod)
    second = pop_next_pending(pod)
    assert second is not None
    index, devices, pod = second
    assert (index, len(devices)) == (3, 2)
    assert encode_pod_devices(pod) == ";;;;"
    assert not has_pending(pod)
    assert pop_next_pending(pod) is None
    assert next_pending(pod) is None


def test_consumed_list_does_not_grow_across_canonical_round_trips() -> None:
    value = "GPU-a,NVIDIA,1,2:;;"
    for _ in range(3):
        found = pop_next_pending(decode_pod_devices_canonical(value))
        pod = found[2] if found else decode_pod_devices_canonical(value)
        value = encode_pod_devices(pod)
    assert value == ";;"


def test_erase_container_bounds() -> None:
    pod = ((dev("GPU-a", 1),), (dev("GPU-b", 2),))
    assert erase_container(pod, 1) == ((dev("GPU-a", 1),), ())
    with pytest.raises(ValidationError):
        erase_container(pod, 2)
    with pytest.raises(ValidationError):
        erase_container(pod, -1)


# --- PodDevices -----------------------------------------------------------------------------------


def test_pod_devices_is_sorted_frozen_and_unique() -> None:
    nvidia = ((dev("GPU-a", 1),),)
    mlu = ((dev("MLU-a", 1, kind="MLU"),),)
    pods = PodDevices.from_mapping({"NVIDIA": nvidia, "MLU": mlu})
    assert pods.vendors == ("MLU", "NVIDIA")
    assert pods == PodDevices((("NVIDIA", nvidia), ("MLU", mlu)))
    assert pods.get("NVIDIA") == nvidia
    assert pods.get("DCU") is None
    assert pods.as_dict() == {"MLU": mlu, "NVIDIA": nvidia}
    replaced = pods.with_vendor("NVIDIA", ((),))
    assert replaced.get("NVIDIA") == ((),)
    assert pods.get("NVIDIA") == nvidia
    assert hash(pods) == hash(PodDevices.from_mapping({"MLU": mlu, "NVIDIA": nvidia}))
    with pytest.raises(ValidationError):
        PodDevices((("NVIDIA", nvidia), ("NVIDIA", mlu)))


# --- usage collapse -------------------------------------------------------------------------------


def usage(uuid: str, mem: int, cores: int, slots: int) -> DeviceUsageSummary:
    return DeviceUsageSummary(uuid, "NVIDIA", mem, cores, slots)


@pytest.mark.parametrize(
    ("pod", "init_count", "sidecars", "expected"),
    [
        pytest.param(
            ((dev("u", 5000, 10),), (dev("u", 4000, 30),)),
            1,
            frozenset[int](),
            (usage("u", 5000, 30, 1),),
            id="init-peak-vs-app",
        ),
        pytest.param(
            ((dev("u", 3000, 20),), (dev("u", 2000, 10),), (dev("u", 3000, 5),)),
            1,
            frozenset[int](),
            (usage("u", 5000, 20, 2),),
            id="apps-add-up",
        ),
        pytest.param(
            ((dev("u", 3000, 20),), (dev("u", 2000, 50),), (dev("v", 1, 1),)),
            2,
            frozenset[int](),
            (usage("u", 3000, 50, 1), usage("v", 1, 1, 1)),
            id="init-containers-take-the-peak-not-the-sum",
        ),
        pytest.param(
            ((dev("u", 1000, 10),), (dev("u", 3000, 0),), (dev("u", 2000, 20),), ()),
            2,
            frozenset({0}),
            (usage("u", 4000, 30, 2),),
            id="sidecar-runs-alongside-everything-after-it",
        ),
    ],
)
def test_collapse_examples(
    pod: PodSingleDevice,
    init_count: int,
    sidecars: frozenset[int],
    expected: tuple[DeviceUsageSummary, ...],
) -> None:
    assert collapse_device_usage(pod, init_count=init_count, sidecars=sidecars) == expected


def test_collapse_after_init_finished_keeps_only_running_containers() -> None:
    pod = ((dev("u", 5000, 10), dev("w", 1, 1)), (dev("s", 100, 1),), (dev("u", 4000, 30),))
    assert collapse_device_usage(pod, init_count=2, init_finished=True) == (
        usage("u", 4000, 30, 1),
    )
    assert collapse_device_usage(
        pod, init_count=2, sidecars=frozenset({1}), init_finished=True
    ) == (
        usage("s", 100, 1, 1),
        usage("u", 4000, 30, 1),
    )


# --- properties -----------------------------------------------------------------------------------

WIRE_TEXT = st.text(
    st.characters(exclude_categories=["Cs", "Cc", "Zl", "Zp"], exclude_characters=",:;"),
    max_size=10,
).filter(lambda text: text == text.strip())
DEVICES = st.builds(
    ContainerDevice,
    uuid=WIRE_TEXT,
    type=WIRE_TEXT,
    usedmem=st.integers(0, 2**31 - 1),
    usedcores=st.integers(0, 2**31 - 1),
)
PODS = st.lists(st.lists(DEVICES, max_size=3).map(tuple), max_size=5).map(tuple)


@given(PODS)
def test_round_trips(pod: PodSingleDevice) -> None:
    encoded = encode_pod_devices(pod)
    assert decode_pod_devices_canonical(encoded) == pod
    assert decode_pod_devices(encoded) == (*pod, ())
    assert encode_pod_devices(decode_pod_devices_canonical(encoded)) == encoded


@given(PODS)
def test_popping_visits_every_pending_container_once_in_order(pod: PodSingleDevice) -> None:
    seen: list[int] = []
    current = pod
    while (found := pop_next_pending(current)) is not None:
        index, devices, current = found
        assert devices == pod[index]
        seen.append(index)
    assert seen == [index for index, container in enumerate(pod) if container]
    assert len(current) == len(pod)
    assert not has_pending(current)


SMALL_PODS = st.lists(
    st.lists(
        st.builds(dev, st.sampled_from(["u", "v", "w"]), st.integers(0, 9999), st.integers(0, 100)),
        max_size=3,
    ).map(tuple),
    max_size=5,
).map(tuple)


@given(SMALL_PODS, st.integers(0, 5))
def test_collapse_without_sidecars_is_max_of_init_peak_and_app_sum(
    pod: PodSingleDevice, init_count: int
) -> None:
    result = {item.uuid: item for item in collapse_device_usage(pod, init_count=init_count)}
    uuids = {device.uuid for container in pod for device in container}
    assert set(result) == uuids
    for uuid in uuids:
        init_mem = [sum(d.usedmem for d in c if d.uuid == uuid) for c in pod[:init_count]]
        init_cores = [sum(d.usedcores for d in c if d.uuid == uuid) for c in pod[:init_count]]
        apps = [d for c in pod[init_count:] for d in c if d.uuid == uuid]
        init_slots = [sum(1 for d in c if d.uuid == uuid) for c in pod[:init_count]]
        assert result[uuid].usedmem == max([*init_mem, sum(d.usedmem for d in apps)])
        assert result[uuid].usedcores == max([*init_cores, sum(d.usedcores for d in apps)])
        assert result[uuid].slots == max([1, len(apps), *init_slots])


@given(st.text() | st.text(st.sampled_from(list(",:;0123456789-+ aG\n")), max_size=40))
def test_garbage_raises_only_decode_errors(value: str) -> None:
    for decoder in (decode_pod_devices, decode_pod_devices_canonical, decode_container_devices):
        try:
            decoder(value)
        except DecodeError:
            pass
        except ProtocolError:
            pytest.fail("decoder raised a ProtocolError other than DecodeError")
