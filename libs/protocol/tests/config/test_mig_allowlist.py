"""The MIG allow-list matcher over the chart's default allow-list."""

from __future__ import annotations

import pytest

from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import MigProfileAllow, parse_device_config
from hami_protocol.config.mig_allowlist import allowed_mig_profiles

DEFAULTS = parse_device_config(DEFAULT_DEVICE_CONFIG_YAML).nvidia.mig_profile_allowlist


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("NVIDIA A100-SXM4-40GB", ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")),
        ("NVIDIA A100-PCIE-40GB", ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")),
        ("NVIDIA A100-SXM4-80GB", ("1g.10gb", "2g.20gb", "3g.40gb", "7g.79gb")),
        ("NVIDIA A30", ("1g.6gb", "2g.12gb", "4g.24gb")),
        ("NVIDIA H100-SXM5-80GB", ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")),
        ("NVIDIA H100 on GH200", ("1g.12gb", "2g.24gb", "3g.48gb", "7g.96gb")),
        # "H20" is a substring of "H200", but a model does not match where a digit follows:
        # an H200 gets its own profiles (HAMi gives it the H20's).
        ("NVIDIA H200-SXM5", ("1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb")),
        ("NVIDIA H20", ("1g.12gb", "2g.24gb", "3g.48gb", "7g.96gb")),
        ("NVIDIA B200", ("1g.23gb", "2g.45gb", "3g.90gb", "7g.180gb")),
        ("Tesla T4", ()),
        ("NVIDIA a100-sxm4-40gb", ()),  # case-sensitive, as HAMi's strings.Contains
    ],
)
def test_chart_defaults(model: str, expected: tuple[str, ...]) -> None:
    assert allowed_mig_profiles(model, DEFAULTS) == expected


def test_first_matching_entry_wins() -> None:
    allowlist = (
        MigProfileAllow(models=("A100-SXM4-80GB",), profiles=("7g.80gb",)),
        MigProfileAllow(models=("A100",), profiles=("1g.5gb",)),
    )
    assert allowed_mig_profiles("NVIDIA A100-SXM4-80GB", allowlist) == ("7g.80gb",)
    assert allowed_mig_profiles("NVIDIA A100-SXM4-40GB", allowlist) == ("1g.5gb",)
    assert allowed_mig_profiles("NVIDIA A100-SXM4-40GB", ()) == ()
