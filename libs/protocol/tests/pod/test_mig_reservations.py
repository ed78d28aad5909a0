"""MIG reservation codec (``hami.io/vgpu-mig-allocations``): contract examples, Go JSON rules,
HAMi's checks, the runtime-id merge and round trips."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.errors import DecodeError, ProtocolError, ValidationError
from hami_protocol.keys import NVIDIA_MIG_ALLOCATIONS
from hami_protocol.node.registry import MigPlacement
from hami_protocol.pod.mig import (
    MigReservation,
    MigRuntimeIds,
    container_reservations,
    decode_mig_reservations,
    encode_mig_reservations,
    with_runtime_ids,
)

GPU = "GPU-5d9c2a3e-0000-1111-2222-333344445555"
CONTRACT_VALUE = (
    f'[{{"containerIndex":0,"deviceIndex":0,"gpuUUID":"{GPU}","profile":"1g.10gb",'
    '"placement":{"start":6,"size":1}}]'
)
CONTRACT_RESERVATION = MigReservation(0, 0, GPU, "1g.10gb", MigPlacement(6, 1))
IDS = MigRuntimeIds("MIG-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9", 13, 0)


def entry(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {
        "containerIndex": 0,
        "deviceIndex": 0,
        "gpuUUID": GPU,
        "profile": "1g.10gb",
        "placement": {"start": 6, "size": 1},
    }
    base.update(overrides)
    return {name: item for name, item in base.items() if item is not ...}


def value_of(*entries: dict[str, object]) -> str:
    return json.dumps(list(entries))


# --- examples -------------------------------------------------------------------------------------


def test_contract_example_decodes_and_encodes_byte_for_byte() -> None:
    assert decode_mig_reservations(CONTRACT_VALUE) == (CONTRACT_RESERVATION,)
    assert encode_mig_reservations([CONTRACT_RESERVATION]) == CONTRACT_VALUE


def test_runtime_ids_are_written_after_the_placement_in_hamis_field_order() -> None:
    realised = MigReservation(0, 0, GPU, "1g.10gb", MigPlacement(6, 1), IDS)
    expected = CONTRACT_VALUE[:-2] + (
        f',"migUUID":"{IDS.mig_uuid}","gpuInstanceID":13,"computeInstanceID":0}}]'
    )
    assert encode_mig_reservations([realised]) == expected
    assert decode_mig_reservations(expected) == (realised,)


@pytest.mark.parametrize("value", ["", "   ", "null", "[]"])
def test_empty_values_mean_no_reservations(value: str) -> None:
    assert decode_mig_reservations(value) == ()


def test_encoding_nothing_gives_an_empty_array() -> None:
    assert encode_mig_reservations([]) == "[]"


def test_entries_come_back_in_container_then_device_order() -> None:
    value = value_of(
        entry(containerIndex=1, deviceIndex=0, placement={"start": 0, "size": 1}),
        entry(containerIndex=0, deviceIndex=1, placement={"start": 1, "size": 1}),
        entry(containerIndex=0, deviceIndex=0, placement={"start": 2, "size": 1}),
    )
    keys = [r.key for r in decode_mig_reservations(value)]
    assert keys == [(0, 0), (0, 1), (1, 0)]
    shuffled = list(reversed(decode_mig_reservations(value)))
    assert [r.key for r in decode_mig_reservations(encode_mig_reservations(shuffled))] == keys


def test_go_json_rules_unknown_fields_case_folded_keys_and_nulls() -> None:
    value = value_of(
        entry(
            extra={"ignored": True},
            CONTAINERINDEX=2,
            containerIndex=...,
            gpuinstanceid=None,
            computeInstanceID=None,
            migUUID="",
        )
    )
    assert decode_mig_reservations(value) == (
        MigReservation(2, 0, GPU, "1g.10gb", MigPlacement(6, 1)),
    )


def test_zero_instance_ids_count_as_present() -> None:
    value = value_of(entry(migUUID="MIG-x", gpuInstanceID=0, computeInstanceID=0))
    (reservation,) = decode_mig_reservations(value)
    assert reservation.runtime == MigRuntimeIds("MIG-x", 0, 0)


def test_the_key_named_in_errors_defaults_to_the_annotation_and_can_be_overridden() -> None:
    with pytest.raises(DecodeError) as default:
        decode_mig_reservations("{")
    assert default.value.key == NVIDIA_MIG_ALLOCATIONS
    with pytest.raises(DecodeError) as custom:
        decode_mig_reservations("{", key="other")
    assert custom.value.key == "other"
    assert "'{'" in str(custom.value)


# --- decode errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        pytest.param("{", "invalid JSON", id="not-json"),
        pytest.param('{"containerIndex":0}', "expected a JSON array", id="object-document"),
        pytest.param("[1]", "expected a JSON object", id="scalar-entry"),
        pytest.param(value_of(entry(containerIndex="0")), "containerIndex", id="string-index"),
        pytest.param(value_of(entry(deviceIndex=1.0)), "deviceIndex", id="float-index"),
        pytest.param(value_of(entry(gpuUUID=5)), "gpuUUID must be a string", id="number-uuid"),
        pytest.param(value_of(entry(placement=[6, 1])), "expected a JSON object", id="list-spot"),
        pytest.param(value_of(entry(placement={"start": -1, "size": 1})), "start", id="neg-start"),
        pytest.param(
            value_of(entry(placement={"start": 0, "size": 2**32})), "size", id="size-over-uint32"
        ),
        pytest.param(
            value_of(entry(migUUID="M", gpuInstanceID=-1, computeInstanceID=0)),
            "gpuInstanceID",
            id="negative-gi",
        ),
        pytest.param("[NaN]", "invalid JSON", id="nan"),
    ],
)
def test_values_go_could_not_unmarshal_are_decode_errors(value: str, fragment: str) -> None:
    with pytest.raises(DecodeError, match=fragment) as caught:
        decode_mig_reservations(value)
    assert caught.value.key == NVIDIA_MIG_ALLOCATIONS
    assert caught.value.value == value


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        pytest.param(value_of(entry(containerIndex=-1)), "must not be negative", id="neg-ctr"),
        pytest.param(value_of(entry(deviceIndex=-3)), "must not be negative", id="neg-dev"),
        pytest.param(value_of(entry(gpuUUID="")), "incomplete", id="no-uuid"),
        pytest.param(value_of(entry(gpuUUID=...)), "incomplete", id="missing-uuid"),
        pytest.param(value_of(entry(profile=...)), "incomplete", id="missing-profile"),
        pytest.param(value_of(entry(placement=...)), "incomplete", id="missing-placement"),
        pytest.param(value_of(entry(placement=None)), "incomplete", id="null-placement"),
        pytest.param(
            value_of(entry(placement={"start": 3, "size": 0})), "incomplete", id="zero-size"
        ),
        pytest.param("[null]", "incomplete", id="null-entry"),
        pytest.param(
            value_of(entry(migUUID="MIG-x")),
            r"entry 0: partial runtime identity: has migUUID, lacks computeInstanceID, gpuInst",
            id="only-uuid",
        ),
        pytest.param(
            value_of(entry(gpuInstanceID=1, computeInstanceID=0)),
            "has gpuInstanceID, computeInstanceID, lacks migUUID",
            id="ids-without-uuid",
        ),
        pytest.param(
            value_of(entry(), entry(deviceIndex=1), entry(placement={"start": 0, "size": 1})),
            r"entry 2: duplicate reservation for container 0 device 0 \(also entry 0\)",
            id="duplicate",
        ),
    ],
)
def test_hamis_checks_are_validation_errors_naming_the_entry(value: str, fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment) as caught:
        decode_mig_reservations(value)
    assert caught.value.key == NVIDIA_MIG_ALLOCATIONS
    assert caught.value.value == value


# --- encode errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reservation",
    [
        pytest.param(MigReservation(-1, 0, GPU, "1g.10gb", MigPlacement(0, 1)), id="neg-ctr"),
        pytest.param(MigReservation(0, -1, GPU, "1g.10gb", MigPlacement(0, 1)), id="neg-dev"),
        pytest.param(MigReservation(0, 0, "", "1g.10gb", MigPlacement(0, 1)), id="no-uuid"),
        pytest.param(MigReservation(0, 0, GPU, "", MigPlacement(0, 1)), id="no-profile"),
        pytest.param(MigReservation(0, 0, GPU, "1g.10gb", MigPlacement(0, 0)), id="zero-size"),
        pytest.param(MigReservation(0, 0, GPU, "1g.10gb", MigPlacement(-1, 1)), id="neg-start"),
        pytest.param(MigReservation(True, 0, GPU, "1g", MigPlacement(0, 1)), id="bool-index"),
        pytest.param(
            MigReservation(0, 0, GPU, "1g", MigPlacement(0, 1), MigRuntimeIds("", 1, 1)),
            id="empty-mig-uuid",
        ),
        pytest.param(
            MigReservation(0, 0, GPU, "1g", MigPlacement(0, 1), MigRuntimeIds("M", 2**32, 1)),
            id="gi-over-uint32",
        ),
        pytest.param(
            MigReservation(0, 0, "GPU-\ud800", "1g", MigPlacement(0, 1)), id="unencodable"
        ),
    ],
)
def test_the_encoder_refuses_what_the_decoder_would(reservation: MigReservation) -> None:
    with pytest.raises(ValidationError):
        encode_mig_reservations([reservation])


def test_the_encoder_refuses_duplicate_keys() -> None:
    other = MigReservation(0, 0, GPU, "2g.20gb", MigPlacement(0, 2))
    with pytest.raises(ValidationError, match="duplicate"):
        encode_mig_reservations([CONTRACT_RESERVATION, other])


# --- device-plugin helpers ------------------------------------------------------------------------

R00 = MigReservation(0, 0, GPU, "1g.10gb", MigPlacement(6, 1))
R01 = MigReservation(0, 1, GPU, "1g.10gb", MigPlacement(5, 1))
R10 = MigReservation(1, 0, GPU, "3g.40gb", MigPlacement(0, 4))


def test_container_reservations_are_that_containers_in_device_order() -> None:
    assert container_reservations([R10, R01, R00], 0) == (R00, R01)
    assert container_reservations([R10, R01, R00], 1) == (R10,)
    assert container_reservations([R10, R01, R00], 2) == ()


def test_with_runtime_ids_fills_only_the_named_entries() -> None:
    merged = with_runtime_ids([R10, R01, R00], {(0, 1): IDS})
    assert [r.runtime for r in merged] == [None, IDS, None]
    assert [r.key for r in merged] == [(0, 0), (0, 1), (1, 0)]
    assert decode_mig_reservations(encode_mig_reservations(merged)) == merged


def test_with_runtime_ids_is_idempotent() -> None:
    once = with_runtime_ids([R00], {(0, 0): IDS})
    assert with_runtime_ids(once, {(0, 0): IDS}) == once


def test_with_runtime_ids_refuses_a_conflict_unless_told_to_overwrite() -> None:
    once = with_runtime_ids([R00], {(0, 0): IDS})
    other = MigRuntimeIds("MIG-other", 1, 0)
    with pytest.raises(ValidationError, match="already realised"):
        with_runtime_ids(once, {(0, 0): other})
    assert with_runtime_ids(once, {(0, 0): other}, overwrite=True)[0].runtime == other


def test_with_runtime_ids_refuses_ids_for_a_missing_reservation() -> None:
    with pytest.raises(ValidationError, match="no reservation"):
        with_runtime_ids([R00], {(3, 0): IDS})


# --- properties -----------------------------------------------------------------------------------

UINT32 = st.integers(0, 2**32 - 1)
TEXT = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
RUNTIME = st.none() | st.builds(MigRuntimeIds, TEXT, UINT32, UINT32)
RESERVATION = st.builds(
    MigReservation,
    st.integers(0, 2**63 - 1),
    st.integers(0, 50),
    TEXT,
    TEXT,
    st.builds(MigPlacement, UINT32, st.integers(1, 2**32 - 1)),
    RUNTIME,
)
RESERVATIONS = st.lists(RESERVATION, max_size=6, unique_by=lambda r: r.key)


@given(RESERVATIONS)
def test_round_trip_gives_the_canonical_order(reservations: list[MigReservation]) -> None:
    encoded = encode_mig_reservations(reservations)
    decoded = decode_mig_reservations(encoded)
    assert decoded == tuple(sorted(reservations, key=lambda r: r.key))
    assert encode_mig_reservations(decoded) == encoded


SCALARS = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=4)
FIELD_NAMES = st.sampled_from(
    (
        *("containerIndex", "deviceIndex", "gpuUUID", "profile", "placement", "start", "size"),
        *("migUUID", "gpuInstanceID", "computeInstanceID", "other"),
    )
)
DOCUMENTS = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(FIELD_NAMES, inner)
)


@given(st.text(max_size=40) | DOCUMENTS.map(json.dumps))
def test_decoding_raises_only_protocol_errors_and_what_decodes_re_encodes(value: str) -> None:
    try:
        decoded = decode_mig_reservations(value)
    except ProtocolError:
        return
    assert decode_mig_reservations(encode_mig_reservations(decoded)) == decoded
