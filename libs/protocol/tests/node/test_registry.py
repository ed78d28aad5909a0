"""Node device registry and pair-score codecs: documented examples, Go JSON rules, properties."""

from __future__ import annotations

import contextlib
import json
import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from hami_protocol.errors import DecodeError, ProtocolError, ValidationError
from hami_protocol.node.registry import (
    DeviceInfo,
    DevicePairScore,
    MigPlacement,
    MigProfile,
    decode_node_devices,
    decode_pair_scores,
    encode_node_devices_colon,
    encode_node_devices_json,
    encode_pair_scores,
)

V100_A = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
V100_B = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
V100_TYPE = "NVIDIA-Tesla V100-PCIE-32GB"
V100_REGISTER = (
    f"{V100_A},10,32768,100,{V100_TYPE},0,true:{V100_B},10,32768,100,{V100_TYPE},0,true:"
)
V100_DEVICES = (
    DeviceInfo(V100_A, 0, 10, 32768, 100, V100_TYPE, 0, True, "hami-core"),
    DeviceInfo(V100_B, 0, 10, 32768, 100, V100_TYPE, 0, True, "hami-core"),
)
MLU_SEED = (
    "MLU-45013011-2257-0000-0000-000000000000,10,23308,0,MLU-MLU370-X4,0,false:"
    "MLU-54043011-2257-0000-0000-000000000000,10,23308,0,"
)
MIG_PROFILE_JSON = (
    '{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":[{"start":6,"size":1}]}'
)
MIG_PROFILE = MigProfile("1g.5gb", 4864, 15, 1, (MigPlacement(6, 1),))


# --- colon form -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(V100_REGISTER, V100_DEVICES, id="seed-v100"),
        pytest.param(
            "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true:",
            (
                DeviceInfo(
                    "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4",
                    0,
                    10,
                    7680,
                    100,
                    "NVIDIA-Tesla P4",
                    0,
                    True,
                    "hami-core",
                ),
            ),
            id="legacy-7-fields",
        ),
        pytest.param(
            "GPU-a,4,40960,200,NVIDIA A30,1,False,3,mig:",
            (DeviceInfo("GPU-a", 3, 4, 40960, 200, "NVIDIA A30", 1, False, "mig"),),
            id="9-fields",
        ),
        pytest.param(
            "GPU-a,4,1,2,T,0,1,0,:GPU-b,4,1,2,T,0,0,1,hami-core:",
            (
                DeviceInfo("GPU-a", 0, 4, 1, 2, "T", 0, True, ""),
                DeviceInfo("GPU-b", 1, 4, 1, 2, "T", 0, False, "hami-core"),
            ),
            id="go-parsebool-digits-and-empty-mode",
        ),
        pytest.param(
            f"  {V100_A} , 10 ,32768, 100 , {V100_TYPE} ,0, true :\n   {V100_B},10,32768,100,"
            f"NVIDIA-Tesla\n      V100-PCIE-32GB,0,true:  \n",
            V100_DEVICES,
            id="wrapped-manifest-whitespace",
        ),
        pytest.param(V100_REGISTER + "::: ", V100_DEVICES, id="trailing-separators"),
        pytest.param(":", (), id="no-devices"),
    ],
)
def test_decode_colon_examples(value: str, expected: tuple[DeviceInfo, ...]) -> None:
    assert decode_node_devices(value) == expected


def test_seed_mlu_value_with_truncated_device_is_rejected() -> None:
    with pytest.raises(
        DecodeError, match="device 1: expected 7 or 9 comma-separated fields, got 5"
    ):
        decode_node_devices(MLU_SEED, key="hami.io/node-mlu-register")


def test_seed_mlu_first_device_alone_decodes_unhealthy() -> None:
    first = MLU_SEED.split(":", maxsplit=1)[0] + ":"
    (device,) = decode_node_devices(first)
    assert (device.id, device.type, device.health, device.devcore) == (
        "MLU-45013011-2257-0000-0000-000000000000",
        "MLU-MLU370-X4",
        False,
        0,
    )


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "no ':'"),
        ("GPU-a,10,32768,100,T,0,true", "no ':'"),
        ("GPU-a,10,32768,100,T,0,yes:", "health 'yes'"),
        ("GPU-a,10,32768,100,T,0,TRUE ,0:", "expected 7 or 9"),
        ("GPU-a,1_0,32768,100,T,0,true:", "count '1_0'"),
        ("GPU-a,10,2147483648,100,T,0,true:", "devmem"),
        ("GPU-a,-1,1,100,T,0,true:", "count '-1'"),
        ("GPU-a,10,1,100,T,0,true,-1,m:", "index '-1'"),
        ("GPU-a,10,1,100,T,x,true:", "numa 'x'"),
        ("garbage:", "expected 7 or 9"),
    ],
)
def test_decode_colon_errors(value: str, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason) as caught:
        decode_node_devices(value, key="hami.io/node-nvidia-register")
    assert "hami.io/node-nvidia-register" in str(caught.value)


def test_encode_colon_is_nine_fields_and_terminated() -> None:
    assert encode_node_devices_colon(V100_DEVICES) == (
        f"{V100_A},10,32768,100,{V100_TYPE},0,true,0,hami-core:"
        f"{V100_B},10,32768,100,{V100_TYPE},0,true,0,hami-core:"
    )
    # Like HAMi, zero devices encode to "" — which no decoder accepts as a device list.
    assert encode_node_devices_colon(()) == ""


@pytest.mark.parametrize(
    "device",
    [
        DeviceInfo("GPU,a", 0, 1, 1, 1, "T", 0, True),
        DeviceInfo("GPU-a", 0, 1, 1, 1, "T:x", 0, True),
        DeviceInfo("GPU-a", 0, 1, 1, 1, "T\nx", 0, True),
        DeviceInfo("GPU-a", 0, 1, 1, 1, " T", 0, True),
        DeviceInfo("GPU-a", 0, 1, 1, 1, "T", 0, True, mig_profiles=(MIG_PROFILE,)),
        DeviceInfo("GPU-a", 0, 1, 1, 1, "T", 0, True, pci_bus_id="0000:3b:00.0"),
        DeviceInfo("GPU-a", 0, -1, 1, 1, "T", 0, True),
        DeviceInfo("GPU-a", 0, 1, 2**31, 1, "T", 0, True),
    ],
)
def test_encode_colon_rejects_what_it_cannot_carry(device: DeviceInfo) -> None:
    with pytest.raises(ValidationError):
        encode_node_devices_colon([device])


# --- JSON form ------------------------------------------------------------------------------------


def test_encode_json_matches_go_marshal_bytes() -> None:
    device = DeviceInfo("GPU-a", 1, 10, 32768, 100, "NVIDIA A30", 1, True, "hami-core")
    assert encode_node_devices_json([device]) == (
        '[{"id":"GPU-a","index":1,"count":10,"devmem":32768,"devcore":100,'
        '"type":"NVIDIA A30","numa":1,"mode":"hami-core","health":true}]'
    )


def test_encode_json_omits_zero_values_like_omitempty() -> None:
    device = DeviceInfo("GPU-a", 0, 0, 0, 0, "", 0, False, "")
    assert encode_node_devices_json([device]) == '[{"id":"GPU-a"}]'
    assert encode_node_devices_json([]) == "[]"


def test_mig_profiles_use_the_compact_wire_form() -> None:
    device = DeviceInfo("GPU-m", 0, 7, 40320, 100, "NVIDIA A100", 0, True, "mig", (MIG_PROFILE,))
    encoded = encode_node_devices_json([device])
    assert f'"migProfiles":[{MIG_PROFILE_JSON}]' in encoded
    assert encoded.index('"mode"') < encoded.index('"migProfiles"') < encoded.index('"health"')
    assert decode_node_devices(encoded) == (device,)


def test_topology_extension_fields_round_trip_and_follow_hami_fields() -> None:
    device = DeviceInfo(
        "GPU-a",
        2,
        10,
        1000,
        100,
        "NVIDIA A30",
        0,
        True,
        pci_bus_id="0000:3b:00.0",
        pcie_switch="0000:3a:00.0",
        pcie_root="pci0000:39",
    )
    encoded = encode_node_devices_json([device])
    assert encoded.endswith(
        '"health":true,"pciBusId":"0000:3b:00.0","pcieSwitch":"0000:3a:00.0",'
        '"pcieRoot":"pci0000:39"}]'
    )
    assert decode_node_devices(encoded) == (device,)


def test_encode_json_escapes_html_runes_like_go() -> None:
    device = DeviceInfo("GPU-a", 0, 1, 1, 1, "A<B>&C\u2028é", 0, True)
    encoded = encode_node_devices_json([device])
    assert '"type":"A\\u003cB\\u003e\\u0026C\\u2028é"' in encoded
    assert decode_node_devices(encoded) == (device,)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(
            '[{"id":"GPU-a","count":10,"devmem":24576,"devcore":100,"type":"NVIDIA A30",'
            '"health":true}]',
            (DeviceInfo("GPU-a", 0, 10, 24576, 100, "NVIDIA A30", 0, True, ""),),
            id="omitempty-index-numa-mode",
        ),
        pytest.param(
            '[{"id":"GPU-a","count":10,"devmem":1,"devcore":100,"type":"T","mode":"hami-core"}]',
            (DeviceInfo("GPU-a", 0, 10, 1, 100, "T", 0, False, "hami-core"),),
            id="missing-health-is-unhealthy",
        ),
        pytest.param(
            '  [ {"ID":"GPU-a", "Count":2, "HEALTH":true, "unknown":{"x":[1,2]},'
            ' "custominfo":{"pciBDF":"0000:01:00.0"}, "numa":null} ]\n',
            (
                DeviceInfo(
                    "GPU-a", 0, 2, 0, 0, "", 0, True, "", custom_info={"pciBDF": "0000:01:00.0"}
                ),
            ),
            id="go-case-insensitive-keys-unknown-fields-null",
        ),
        pytest.param(
            '[{"id":"GPU-a","id":"GPU-b","migProfiles":null,"type":"T","Type":null}]',
            (DeviceInfo("GPU-b", 0, 0, 0, 0, "T", 0, False, ""),),
            id="last-duplicate-wins-null-changes-nothing",
        ),
        pytest.param(
            f'[{{"id":"GPU-m","mode":"mig","health":true,"migProfiles":[{MIG_PROFILE_JSON}]}}]',
            (DeviceInfo("GPU-m", 0, 0, 0, 0, "", 0, True, "mig", (MIG_PROFILE,)),),
            id="mig-profiles",
        ),
        pytest.param("[]", (), id="empty"),
    ],
)
def test_decode_json_examples(value: str, expected: tuple[DeviceInfo, ...]) -> None:
    assert decode_node_devices(value) == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("[", "invalid JSON"),
        ('[{"id":"a"},]', "invalid JSON"),
        ("[1]", "expected a JSON object"),
        ("[null]", "expected a JSON object"),
        ('[{"count":1.0}]', "count must be an integer"),
        ('[{"count":1e2}]', "count must be an integer"),
        ('[{"count":true}]', "count must be an integer"),
        ('[{"count":"1"}]', "count must be an integer"),
        ('[{"count":NaN}]', "invalid JSON"),
        ('[{"devmem":2147483648}]', "devmem must be an integer"),
        ('[{"index":-1}]', "index must be an integer"),
        ('[{"id":5}]', "id must be a string"),
        ('[{"health":"true"}]', "health must be a boolean"),
        ('[{"migProfiles":{}}]', "expected a JSON array"),
        ('[{"migProfiles":[{"placements":[{"start":-1}]}]}]', "start must be an integer"),
    ],
)
def test_decode_json_errors(value: str, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        decode_node_devices(value)


# --- pair scores ----------------------------------------------------------------------------------


def test_pair_scores_contract_example_round_trips_bytes() -> None:
    value = '[{"uuid":"GPU-a","score":{"GPU-b":200}}]'
    decoded = decode_pair_scores(value)
    assert decoded == (DevicePairScore("GPU-a", (("GPU-b", 200),)),)
    assert decoded[0].score_to("GPU-b") == 200
    assert decoded[0].score_to("GPU-z") == 0
    assert encode_pair_scores(decoded) == value


def test_pair_scores_sort_peers_and_omit_empty_fields() -> None:
    entries = [DevicePairScore("GPU-a", (("GPU-c", 60), ("GPU-b", 100))), DevicePairScore("")]
    assert encode_pair_scores(entries) == '[{"uuid":"GPU-a","score":{"GPU-b":100,"GPU-c":60}},{}]'


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("null", ()),
        ("[null]", (DevicePairScore(""),)),
        ('[{"UUID":"a","score":null}]', (DevicePairScore("a"),)),
        ('[{"uuid":"a","score":{"b":-5,"b":7}}]', (DevicePairScore("a", (("b", 7),)),)),
    ],
)
def test_pair_scores_go_semantics(value: str, expected: tuple[DevicePairScore, ...]) -> None:
    assert decode_pair_scores(value) == expected


@pytest.mark.parametrize(
    "value", ["", "{}", '[{"score":[]}]', '[{"score":{"b":1.5}}]', '[{"uuid":1}]']
)
def test_pair_scores_errors_name_the_key(value: str) -> None:
    with pytest.raises(DecodeError, match=re.escape("hami.io/node-nvidia-score")):
        decode_pair_scores(value)


# --- properties -----------------------------------------------------------------------------------

INT32 = st.integers(0, 2**31 - 1)
UINT32 = st.integers(0, 2**32 - 1)
ANY_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
# Text the colon form can carry: no separators, control characters or edge whitespace.
COLON_TEXT = st.text(
    st.characters(exclude_categories=["Cs", "Cc", "Zl", "Zp"], exclude_characters=",:;"),
    max_size=12,
).filter(lambda text: text == text.strip())

PROFILES = st.builds(
    MigProfile,
    name=ANY_TEXT,
    memory_mb=INT32,
    core=INT32,
    slice_count=UINT32,
    placements=st.lists(st.builds(MigPlacement, UINT32, UINT32), max_size=3).map(tuple),
)
JSON_DEVICES = st.builds(
    DeviceInfo,
    id=ANY_TEXT,
    index=st.integers(0, 2**63 - 1),
    count=INT32,
    devmem=INT32,
    devcore=INT32,
    type=ANY_TEXT,
    numa=st.integers(-(2**63), 2**63 - 1),
    health=st.booleans(),
    mode=ANY_TEXT,
    mig_profiles=st.lists(PROFILES, max_size=2).map(tuple),
    pci_bus_id=ANY_TEXT,
    pcie_switch=ANY_TEXT,
    pcie_root=ANY_TEXT,
)
COLON_DEVICES = st.builds(
    DeviceInfo,
    id=COLON_TEXT,
    index=st.integers(0, 2**63 - 1),
    count=INT32,
    devmem=INT32,
    devcore=INT32,
    type=COLON_TEXT,
    numa=st.integers(-(2**63), 2**63 - 1),
    health=st.booleans(),
    mode=COLON_TEXT,
)


@given(st.lists(JSON_DEVICES, max_size=4))
def test_json_round_trip(devices: list[DeviceInfo]) -> None:
    encoded = encode_node_devices_json(devices)
    assert decode_node_devices(encoded) == tuple(devices)
    assert encode_node_devices_json(decode_node_devices(encoded)) == encoded
    assert json.loads(encoded) is not None  # plain JSON for any other reader too


@given(st.lists(COLON_DEVICES, min_size=1, max_size=4))
# Once a DecodeError: a colon-form value whose first id starts with "[" was read as JSON.
@example([DeviceInfo(id="[", index=0, count=0, devmem=0, devcore=0, type="", numa=0, health=False)])
def test_colon_round_trip(devices: list[DeviceInfo]) -> None:
    encoded = encode_node_devices_colon(devices)
    assert decode_node_devices(encoded) == tuple(devices)
    assert encode_node_devices_colon(decode_node_devices(encoded)) == encoded


@given(
    st.lists(
        st.builds(
            DevicePairScore,
            uuid=ANY_TEXT,
            scores=st.dictionaries(ANY_TEXT, st.integers(-(2**63), 2**63 - 1), max_size=4).map(
                lambda peers: tuple(peers.items())
            ),
        ),
        max_size=4,
    )
)
def test_pair_scores_round_trip(entries: list[DevicePairScore]) -> None:
    encoded = encode_pair_scores(entries)
    assert decode_pair_scores(encoded) == tuple(entries)
    assert encode_pair_scores(decode_pair_scores(encoded)) == encoded


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | ANY_TEXT,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["id", "count", "health", "migProfiles", "placements", "score", "x"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@given(st.text() | st.text().map(lambda tail: "[" + tail) | JSON_VALUES.map(json.dumps))
def test_garbage_raises_only_protocol_errors(value: str) -> None:
    for decoder in (decode_node_devices, decode_pair_scores):
        with contextlib.suppress(ProtocolError):
            decoder(value)
