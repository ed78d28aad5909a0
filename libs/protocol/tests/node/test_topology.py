"""Topology model: PCI address normalisation, the RDMA register codec, locality helpers."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol import keys
from hami_protocol.errors import DecodeError, ProtocolError, ValidationError
from hami_protocol.selectors import EVERYTHING, parse_selector_string
from hami_protocol.topology.layout import (
    GPUTopology,
    RdmaNic,
    TopologyLevel,
    VirtualFunction,
    VirtualFunctionGroup,
    bus_id_from_list_device_id,
    decode_rdma_register,
    encode_rdma_register,
    gpu_topology,
    group_by_numa,
    group_by_pcie_switch,
    list_device_id,
    normalize_pci_bus_id,
    normalize_pcie_root,
    same_scope,
    scope_id,
    vfs_matching,
)

_BDF_PARTS = st.tuples(
    st.integers(0, 0x1_0000), st.integers(0, 255), st.integers(0, 31), st.integers(0, 7)
)


def _bdf(parts: tuple[int, int, int, int]) -> str:
    domain, bus, device, function = parts
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


# --- PCI addresses --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("0000:1f:00.0", "0000:1f:00.0"),
        ("00000000:1F:00.0", "0000:1f:00.0"),  # NVML's form
        ("0000:1F:00.0", "0000:1f:00.0"),  # NVML's busIdLegacy
        ("1f:00.2", "0000:1f:00.2"),  # lspci without -D
        ("0001:B9:1F.7", "0001:b9:1f.7"),
        ("10000:E0:00.0", "10000:e0:00.0"),  # VMD domains are wider than 4 digits
        ("00010000:e0:00.0", "10000:e0:00.0"),
        ("0:00:07.0", "0000:00:07.0"),
    ],
)
def test_normalize_pci_bus_id(raw: str, normal: str) -> None:
    assert normalize_pci_bus_id(raw) == normal
    assert normalize_pci_bus_id(normal) == normal


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "gpu",
        "0000:1f:00",
        "0000:1f:20.0",  # device number above 1f
        "0000:1f:00.8",  # function above 7
        "000000000:1f:00.0",  # 9-digit domain
        "0000:1g:00.0",
        " 0000:1f:00.0",
        "0000:1f:00.0\n",
        "0000:1:00.0",
        "0000:c800:000e:270a",
        "pci0000:17",
    ],
)
def test_normalize_pci_bus_id_rejects(raw: str) -> None:
    with pytest.raises(ValidationError) as info:
        normalize_pci_bus_id(raw, annotation=keys.NVIDIA_REGISTER)
    assert info.value.key == keys.NVIDIA_REGISTER


def test_list_device_ids_carry_no_list_separators() -> None:
    assert list_device_id("00000000:1F:00.2") == "0000_1f_00.2"
    assert bus_id_from_list_device_id("0000_1f_00.2") == "0000:1f:00.2"
    for bad in ("0000:1f:00.2", "mlx5_0", "", "0000_1f_00"):
        with pytest.raises(ValidationError):
            bus_id_from_list_device_id(bad, annotation=keys.RDMA_DEVICES_ALLOCATED)


@given(_BDF_PARTS)
def test_list_device_ids_round_trip(parts: tuple[int, int, int, int]) -> None:
    bus_id = _bdf(parts)
    list_id = list_device_id(bus_id)
    assert not set(list_id) & set(":;,")
    assert bus_id_from_list_device_id(list_id) == bus_id


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("pci0000:17", "pci0000:17"),
        ("pci0000:3A", "pci0000:3a"),
        ("pci00000001:00", "pci0001:00"),
        ("pci10000:e0", "pci10000:e0"),
    ],
)
def test_normalize_pcie_root(raw: str, normal: str) -> None:
    assert normalize_pcie_root(raw) == normal


@pytest.mark.parametrize(
    "raw", ["", "pci0000", "0000:17", "pci00:17", "pci0000:17:00.0", "PCI0000:17"]
)
def test_normalize_pcie_root_rejects(raw: str) -> None:
    with pytest.raises(ValidationError):
        normalize_pcie_root(raw)


def test_gpu_topology_normalises_addresses() -> None:
    topo = gpu_topology(
        "GPU-1",
        pci_bus_id="00000000:1B:00.0",
        pcie_switch="0000:1A:00.0",
        pcie_root="pci0000:17",
        numa=1,
    )
    assert topo == GPUTopology("GPU-1", "0000:1b:00.0", "0000:1a:00.0", "pci0000:17", 1)
    assert gpu_topology("GPU-2") == GPUTopology("GPU-2")
    with pytest.raises(ValidationError):
        gpu_topology("GPU-3", numa=-1)
    with pytest.raises(ValidationError):
        gpu_topology("GPU-3", pcie_switch="switch-0")


# --- fixture F (contracts/koordinator.md §5), with made-up switch and root addresses --------------
SWITCHES = {"p0": "0000:1a:00.0", "p1": "0000:8b:00.0", "p2": "0000:4c:00.0", "p3": "0000:b4:00.0"}
ROOTS = {"p0": "pci0000:17", "p1": "pci0000:85", "p2": "pci0000:3a", "p3": "pci0000:ae"}
NUMA = {"p0": 0, "p1": 0, "p2": 1, "p3": 1}
NIC_PLACES = [
    (1, "p0", "0000:1f:00.0"),
    (2, "p1", "0000:90:00.0"),
    (3, "p2", "0000:51:00.0"),
    (4, "p3", "0000:b9:00.0"),
]


def thirty_vfs(pf: str) -> tuple[VirtualFunction, ...]:
    domain_bus = pf[:8]
    functions = [(0, f) for f in range(2, 8)] + [(d, f) for d in (1, 2, 3) for f in range(8)]
    return tuple(
        VirtualFunction(f"{domain_bus}{d:02x}.{f}", minor=i) for i, (d, f) in enumerate(functions)
    )


F_NICS = tuple(
    RdmaNic(
        id=pf,
        name=f"mlx5_{minor}",
        minor=minor,
        numa=NUMA[place],
        pcie_switch=SWITCHES[place],
        pcie_root=ROOTS[place],
        healthy=True,
        labels={"type": "fakeW"},
        vf_groups=(VirtualFunctionGroup(vfs=thirty_vfs(pf), labels={"type": "general"}),),
    )
    for minor, place, pf in NIC_PLACES
)
F_GPUS = tuple(
    GPUTopology(f"GPU-{i}", f"0000:{0x20 + i:02x}:00.0", SWITCHES[p], ROOTS[p], NUMA[p])
    for i, p in enumerate(["p0", "p0", "p1", "p1", "p2", "p2", "p3", "p3"])
)


def test_fixture_f_round_trips() -> None:
    text = encode_rdma_register(F_NICS)
    assert decode_rdma_register(text) == F_NICS
    assert len(F_NICS[0].vfs) == 30
    assert F_NICS[0].vfs[0].bus_id == "0000:1f:00.2"
    assert len(text) < 16_000  # compact enough for an annotation refreshed every 30 s


def test_register_encoding_is_compact_and_omits_zero_values() -> None:
    nics = (
        RdmaNic(
            id="0000:1f:00.0",
            name="mlx5_0",
            numa=0,
            pcie_switch="0000:1a:00.0",
            pcie_root="pci0000:17",
            healthy=True,
            labels={"type": "fakeW"},
            vf_groups=(
                VirtualFunctionGroup(
                    vfs=(VirtualFunction("0000:1f:00.2"), VirtualFunction("0000:1f:00.3", minor=1)),
                    labels={"type": "general"},
                ),
            ),
        ),
        RdmaNic(id="0000:90:00.0", name="mlx5_1", minor=1, numa=1),
    )
    assert encode_rdma_register(nics) == (
        '{"v":1,"nics":['
        '{"id":"0000:1f:00.0","name":"mlx5_0","pcieSwitch":"0000:1a:00.0","pcieRoot":"pci0000:17",'
        '"health":true,"labels":{"type":"fakeW"},"vfGroups":[{"labels":{"type":"general"},'
        '"vfs":[{"busID":"0000:1f:00.2"},{"minor":1,"busID":"0000:1f:00.3"}]}]},'
        '{"id":"0000:90:00.0","name":"mlx5_1","minor":1,"numa":1}]}'
    )
    assert encode_rdma_register(()) == '{"v":1,"nics":[]}'


def test_register_decode_normalises_and_reads_like_go() -> None:
    text = json.dumps(
        {
            "v": 1,
            "nics": [
                {
                    "id": "00000000:1F:00.0",
                    "Name": "irdma0",
                    "pcieSwitch": "0000:1A:00.0",
                    "pcieRoot": "pci0000:17",
                    "health": True,
                    "labels": {"b": "2", "a": "1"},
                    "vfGroups": [{"vfs": [{"busID": "1f:00.2"}]}, {}],
                    "futureField": {"anything": [1, 2]},
                    "numa": None,
                }
            ],
            "generatedBy": "a newer writer",
        }
    )
    (nic,) = decode_rdma_register(text)
    assert nic == RdmaNic(
        id="0000:1f:00.0",
        name="irdma0",
        pcie_switch="0000:1a:00.0",
        pcie_root="pci0000:17",
        healthy=True,
        labels={"a": "1", "b": "2"},
        vf_groups=(
            VirtualFunctionGroup(vfs=(VirtualFunction("0000:1f:00.2"),)),
            VirtualFunctionGroup(),
        ),
    )
    assert list(nic.labels) == ["a", "b"]


def test_missing_health_means_unhealthy() -> None:
    (nic,) = decode_rdma_register('{"v":1,"nics":[{"id":"0000:1f:00.0","name":"mlx5_0"}]}')
    assert not nic.healthy
    assert nic.minor == 0
    assert nic.numa == 0


def nic_json(**fields: Any) -> str:
    base: dict[str, Any] = {"id": "0000:1f:00.0", "name": "mlx5_0"}
    base.update(fields)
    return json.dumps({"v": 1, "nics": [base]})


@pytest.mark.parametrize(
    ("text", "error", "fragment"),
    [
        ("", DecodeError, "invalid JSON"),
        ("[]", DecodeError, "must be a JSON object"),
        ('{"nics":[]}', ValidationError, "unsupported version"),
        ('{"v":2,"nics":[]}', ValidationError, "unsupported version"),
        ('{"v":"1","nics":[]}', ValidationError, "unsupported version"),
        ('{"v":true,"nics":[]}', ValidationError, "unsupported version"),
        ('{"v":1.0,"nics":[]}', ValidationError, "unsupported version"),
        ('{"v":1,"nics":{}}', DecodeError, "register.nics must be a list"),
        ('{"v":1,"nics":[7]}', DecodeError, "nics[0] must be a JSON object"),
        ('{"v":1,"nics":[{"name":"mlx5_0"}]}', ValidationError, "PCI bus id"),
        (nic_json(id="0000:1f:00"), ValidationError, "PCI bus id"),
        (nic_json(name=""), ValidationError, "nics[0].name"),
        (nic_json(name="mlx5 0"), ValidationError, "nics[0].name"),
        (nic_json(name=5), DecodeError, "nics[0].name must be a str"),
        (nic_json(minor=-1), ValidationError, "nics[0].minor"),
        (nic_json(minor=True), DecodeError, "nics[0].minor must be a int"),
        (nic_json(minor=2**31), ValidationError, "nics[0].minor"),
        (nic_json(numa=-1), ValidationError, "nics[0].numa"),
        (nic_json(health="true"), DecodeError, "health must be a bool"),
        (nic_json(pcieSwitch="sw0"), ValidationError, "PCI bus id"),
        (nic_json(pcieRoot="0000:17"), ValidationError, "PCIe root"),
        (nic_json(labels={"-bad": "x"}), ValidationError, "nics[0].labels"),
        (nic_json(labels={"ok": "a b"}), ValidationError, "nics[0].labels"),
        (nic_json(labels={"ok": 1}), DecodeError, "nics[0].labels"),
        (nic_json(labels=["ok"]), DecodeError, "nics[0].labels"),
        (nic_json(vfGroups={}), DecodeError, "vfGroups must be a list"),
        (nic_json(vfGroups=[[]]), DecodeError, "vfGroups[0] must be a JSON object"),
        (nic_json(vfGroups=[{"vfs": [{"busID": "x"}]}]), ValidationError, "PCI bus id"),
        (
            nic_json(vfGroups=[{"vfs": [{"busID": "0000:1f:00.2", "minor": -1}]}]),
            ValidationError,
            "VF minor",
        ),
        (
            nic_json(vfGroups=[{"vfs": ["0000:1f:00.2"]}]),
            DecodeError,
            "vfs[0] must be a JSON object",
        ),
        (
            nic_json(vfGroups=[{"labels": {"A/b": "c"}, "vfs": []}]),
            ValidationError,
            "vfGroups[0].labels",
        ),
        # uniqueness
        (
            nic_json(vfGroups=[{"vfs": [{"busID": "0000:1f:00.2"}, {"busID": "0000:1F:00.2"}]}]),
            ValidationError,
            "PCI address",
        ),
        (nic_json(vfGroups=[{"vfs": [{"busID": "0000:1f:00.0"}]}]), ValidationError, "PCI address"),
        (
            '{"v":1,"nics":[{"id":"0000:1f:00.0","name":"a"},{"id":"00000000:1f:00.0","name":"b","minor":1}]}',
            ValidationError,
            "PCI address",
        ),
        (
            '{"v":1,"nics":[{"id":"0000:1f:00.0","name":"a"},{"id":"0000:20:00.0","name":"a","minor":1}]}',
            ValidationError,
            "name",
        ),
        (
            '{"v":1,"nics":[{"id":"0000:1f:00.0","name":"a"},{"id":"0000:20:00.0","name":"b"}]}',
            ValidationError,
            "minor",
        ),
    ],
)
def test_register_decode_errors(text: str, error: type[ProtocolError], fragment: str) -> None:
    with pytest.raises(error) as info:
        decode_rdma_register(text)
    assert info.value.key == keys.RDMA_REGISTER
    assert keys.RDMA_REGISTER in str(info.value)
    assert fragment in str(info.value)


def test_encode_refuses_what_decode_would_refuse() -> None:
    with pytest.raises(ValidationError):
        encode_rdma_register(
            [
                RdmaNic(id="0000:1f:00.0", name="mlx5_0"),
                RdmaNic(id="0000:20:00.0", name="mlx5_0", minor=1),
            ]
        )
    with pytest.raises(ValidationError):
        encode_rdma_register([RdmaNic(id="nic0", name="mlx5_0")])
    with pytest.raises(ValidationError):
        encode_rdma_register([RdmaNic(id="0000:1f:00.0", name="mlx5_0", labels={"bad key": "x"})])


def test_encode_writes_normalised_addresses() -> None:
    nic = RdmaNic(
        id="00000000:1F:00.0",
        name="mlx5_0",
        pcie_switch="1A:00.0",
        vf_groups=(VirtualFunctionGroup(vfs=(VirtualFunction("0000:1F:00.2"),)),),
    )
    text = encode_rdma_register([nic])
    assert '"0000:1f:00.0"' in text
    assert '"0000:1a:00.0"' in text
    assert '"0000:1f:00.2"' in text


# --- VFs and locality -----------------------------------------------------------------------------
def test_vfs_matching_follows_group_labels_and_orders_by_bus_id() -> None:
    nic = RdmaNic(
        id="0000:1f:00.0",
        name="mlx5_0",
        vf_groups=(
            VirtualFunctionGroup(
                vfs=(VirtualFunction("0000:1f:00.5"), VirtualFunction("0000:1f:00.3")),
                labels={"type": "general"},
            ),
            VirtualFunctionGroup(vfs=(VirtualFunction("0000:1f:00.2"),)),
            VirtualFunctionGroup(vfs=(VirtualFunction("0000:1f:00.4"),), labels={"type": "vf_cpu"}),
        ),
    )
    all_ids = ["0000:1f:00.2", "0000:1f:00.3", "0000:1f:00.4", "0000:1f:00.5"]
    assert [vf.bus_id for vf in nic.vfs] == all_ids
    # {} (a vfSelector present but empty) matches every group, unlabelled ones included
    assert [vf.bus_id for vf in vfs_matching(nic, EVERYTHING)] == all_ids
    general = parse_selector_string("type in (general,fakeG)")
    assert [vf.bus_id for vf in vfs_matching(nic, general)] == ["0000:1f:00.3", "0000:1f:00.5"]
    not_cpu = parse_selector_string("type!=vf_cpu")
    assert [vf.bus_id for vf in vfs_matching(nic, not_cpu)] == [
        "0000:1f:00.2",
        "0000:1f:00.3",
        "0000:1f:00.5",
    ]
    assert vfs_matching(nic, parse_selector_string("missing")) == ()


def test_fixture_f_groups_by_switch_and_numa() -> None:
    by_switch = group_by_pcie_switch(F_GPUS)
    assert list(by_switch) == [SWITCHES[p] for p in ("p0", "p1", "p2", "p3")]
    assert [g.uuid for g in by_switch[SWITCHES["p1"]]] == ["GPU-2", "GPU-3"]
    by_numa = group_by_numa(F_GPUS)
    assert {numa: [g.uuid for g in gpus] for numa, gpus in by_numa.items()} == {
        0: ["GPU-0", "GPU-1", "GPU-2", "GPU-3"],
        1: ["GPU-4", "GPU-5", "GPU-6", "GPU-7"],
    }
    nics_by_switch = group_by_pcie_switch(F_NICS)
    assert [n.minor for n in nics_by_switch[SWITCHES["p2"]]] == [3]
    assert group_by_pcie_switch([GPUTopology("GPU-x")]) == {}


@pytest.mark.parametrize(
    ("a", "b", "level", "expected"),
    [
        (F_GPUS[0], F_GPUS[1], TopologyLevel.PCIE_SWITCH, True),
        (F_GPUS[0], F_NICS[0], TopologyLevel.PCIE_SWITCH, True),
        (F_GPUS[0], F_GPUS[2], TopologyLevel.PCIE_SWITCH, False),
        (F_GPUS[0], F_GPUS[2], TopologyLevel.PCIE_ROOT, False),
        (F_GPUS[0], F_GPUS[2], TopologyLevel.NUMA, True),
        (F_GPUS[0], F_NICS[3], TopologyLevel.NUMA, False),
        (F_GPUS[0], F_NICS[3], TopologyLevel.NODE, True),
        # unknown switch or root never counts as "the same"
        (GPUTopology("a"), GPUTopology("b"), TopologyLevel.PCIE_SWITCH, False),
        (GPUTopology("a"), GPUTopology("b"), TopologyLevel.PCIE_ROOT, False),
        (GPUTopology("a"), GPUTopology("b"), TopologyLevel.NUMA, True),
    ],
)
def test_same_scope(a: Any, b: Any, level: TopologyLevel, expected: bool) -> None:
    assert same_scope(a, b, level) is expected
    assert same_scope(b, a, level) is expected


def test_scope_ids() -> None:
    gpu = F_GPUS[5]
    assert scope_id(gpu, TopologyLevel.PCIE_SWITCH) == SWITCHES["p2"]
    assert scope_id(gpu, TopologyLevel.PCIE_ROOT) == ROOTS["p2"]
    assert scope_id(gpu, TopologyLevel.NUMA) == "numa1"
    assert scope_id(gpu, TopologyLevel.NODE) == "node"
    assert scope_id(GPUTopology("x"), TopologyLevel.PCIE_SWITCH) is None


# --- properties -----------------------------------------------------------------------------------


@given(_BDF_PARTS, st.booleans(), st.booleans())
def test_normalize_accepts_any_case_and_domain_width(
    parts: tuple[int, int, int, int], upper: bool, wide: bool
) -> None:
    canonical = _bdf(parts)
    domain, bus, device, function = parts
    raw = f"{domain:08x}:{bus:02x}:{device:02x}.{function}" if wide else canonical
    raw = raw.upper() if upper else raw
    assert normalize_pci_bus_id(raw) == canonical


@given(st.text(max_size=20))
def test_normalize_gives_canonical_ids_or_validation_errors(text: str) -> None:
    try:
        normal = normalize_pci_bus_id(text)
    except ValidationError:
        return
    assert normalize_pci_bus_id(normal) == normal
    assert normal == normal.lower()


_LABEL_NAMES = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,6}[A-Za-z0-9])?", fullmatch=True)
_LABELS = st.dictionaries(_LABEL_NAMES, st.one_of(st.just(""), _LABEL_NAMES), max_size=3)


@st.composite
def _nic_lists(draw: st.DrawFn) -> tuple[RdmaNic, ...]:
    addresses = draw(st.lists(_BDF_PARTS.map(_bdf), unique=True, max_size=12))
    count = draw(st.integers(0, min(4, len(addresses))))
    pfs, vf_pool = addresses[:count], addresses[count:]
    minors = draw(st.lists(st.integers(0, 2**31 - 1), unique=True, min_size=count, max_size=count))
    nics = []
    for pf, minor in zip(pfs, minors, strict=True):
        groups = []
        for _ in range(draw(st.integers(0, 2))):
            take = draw(st.integers(0, len(vf_pool)))
            vfs = tuple(
                VirtualFunction(bus, minor=draw(st.integers(0, 64))) for bus in vf_pool[:take]
            )
            vf_pool = vf_pool[take:]
            groups.append(VirtualFunctionGroup(vfs=vfs, labels=draw(_LABELS)))
        switch = draw(st.one_of(st.just(""), _BDF_PARTS.map(_bdf)))
        root = draw(
            st.one_of(
                st.just(""),
                st.builds(
                    lambda d, b: f"pci{d:04x}:{b:02x}", st.integers(0, 0xFFFF), st.integers(0, 255)
                ),
            )
        )
        nics.append(
            RdmaNic(
                id=pf,
                name=f"mlx5_{minor}",
                minor=minor,
                numa=draw(st.integers(0, 7)),
                pcie_switch=switch,
                pcie_root=root,
                healthy=draw(st.booleans()),
                labels=draw(_LABELS),
                vf_groups=tuple(groups),
            )
        )
    return tuple(nics)


@given(_nic_lists())
def test_rdma_register_round_trips(nics: tuple[RdmaNic, ...]) -> None:
    text = encode_rdma_register(nics)
    decoded = decode_rdma_register(text)
    assert decoded == nics
    assert encode_rdma_register(decoded) == text


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=16,
)
_FIELDS = st.sampled_from(
    [
        "v",
        "nics",
        "id",
        "name",
        "minor",
        "numa",
        "pcieSwitch",
        "pcieRoot",
        "health",
        "labels",
        "vfGroups",
        "vfs",
        "busID",
    ]
)
_STRUCTURED = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 2**32)
    | st.sampled_from(["0000:1f:00.0", "mlx5_0", "pci0000:17", "a"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_FIELDS, inner, max_size=5),
    max_leaves=24,
)


@given(st.text(max_size=80))
def test_arbitrary_text_raises_only_protocol_errors(text: str) -> None:
    with contextlib.suppress(ProtocolError):
        assert isinstance(decode_rdma_register(text), tuple)


@given(st.one_of(_JSON, _STRUCTURED, _STRUCTURED.map(lambda nics: {"v": 1, "nics": nics})))
def test_arbitrary_json_raises_only_protocol_errors(doc: object) -> None:
    try:
        nics = decode_rdma_register(json.dumps(doc))
    except ProtocolError:
        return
    assert decode_rdma_register(encode_rdma_register(nics)) == nics


def test_deeply_nested_json_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode_rdma_register("[" * 100_000 + "]" * 100_000)
