"""Reading the services' Prometheus metrics: scrape, look samples up, summarise histograms.

:func:`parse_samples` and the summaries are pure (text in, numbers out); :func:`scrape` is the
one HTTP GET.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "HistogramSummary",
    "Sample",
    "histogram_summary",
    "parse_samples",
    "sample_value",
    "scrape",
]


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def parse_samples(text: str) -> tuple[Sample, ...]:
    """Every sample of a Prometheus text exposition."""
    return tuple(
        Sample(sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    )


def _matches(sample: Sample, name: str, labels: Mapping[str, str]) -> bool:
    return sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())


def sample_value(samples: Sequence[Sample], name: str, **labels: str) -> float | None:
    """The sum of the samples named ``name`` whose labels include ``labels`` (None: none)."""
    found = [s.value for s in samples if _matches(s, name, labels)]
    return sum(found) if found else None


@dataclass(frozen=True, slots=True)
class HistogramSummary:
    """Count, mean and bucket-interpolated quantiles of one histogram (seconds)."""

    count: int
    mean: float
    p50: float
    p99: float


def _quantile(buckets: Sequence[tuple[float, float]], q: float) -> float:
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return 0.0
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            span = count - lower_count
            share = (rank - lower_count) / span if span else 1.0
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count = bound, count
    return lower_bound


def histogram_summary(
    samples: Sequence[Sample], name: str, **labels: str
) -> HistogramSummary | None:
    """Summary of histogram ``name`` (label-filtered, series summed); None when it is empty."""
    count = sample_value(samples, f"{name}_count", **labels) or 0.0
    if count <= 0:
        return None
    total = sample_value(samples, f"{name}_sum", **labels) or 0.0
    per_bound: dict[float, float] = {}
    for sample in samples:
        if _matches(sample, f"{name}_bucket", labels):
            bound = float(sample.labels.get("le", "inf"))
            per_bound[bound] = per_bound.get(bound, 0.0) + sample.value
    buckets = sorted(per_bound.items())
    return HistogramSummary(
        count=int(count),
        mean=total / count,
        p50=_quantile(buckets, 0.50),
        p99=_quantile(buckets, 0.99),
    )


async def scrape(url: str, *, session: aiohttp.ClientSession | None = None) -> tuple[Sample, ...]:
    """GET a ``/metrics`` URL and parse it."""
    timeout = aiohttp.ClientTimeout(total=10)
    if session is None:
        async with aiohttp.ClientSession(timeout=timeout) as own:
            return await scrape(url, session=own)
    async with session.get(url, timeout=timeout) as response:
        response.raise_for_status()
        return parse_samples(await response.text())
