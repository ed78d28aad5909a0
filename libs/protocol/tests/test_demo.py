"""The protocol demo decodes every documented example and says so."""

from __future__ import annotations

import pytest

from hami_protocol import demo


def test_demo_runs_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main() == 0
    out = capsys.readouterr().out
    assert "NVIDIA-Tesla V100-PCIE-32GB" in out
    assert "container 1: GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448 5000 MiB" in out
    assert "pod default/other asks for it -> contended" in out
    assert "viz      NVIDIA: 1 GPU(s), mem 0 MiB, mem% 50" in out
