"""Reading Prometheus exposition text in tests: every sample, and the sums and views the tests compare.

Parsed with prometheus_client's own parser, independent of attnload's scrape/ parser under test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def samples(text: str) -> Iterator[Sample]:
    """Every sample of every family, in exposition order."""
    for family in text_string_to_metric_families(text):
        yield from family.samples


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    matching = (s for s in samples(text) if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))
    return sum((s.value for s in matching), 0.0)


def sums_by_label(text: str, name: str, label: str) -> dict[str, float]:
    """``label``'s value ("" where absent) -> the sum of ``name``'s samples carrying it."""
    sums: dict[str, float] = {}
    for s in samples(text):
        if s.name == name:
            key = s.labels.get(label, "")
            sums[key] = sums.get(key, 0.0) + s.value
    return sums


def sums_by_name(text: str, keep: Callable[[Sample], bool]) -> dict[str, float]:
    """Sample name -> the sum of its kept samples (labels summed over)."""
    sums: dict[str, float] = {}
    for s in samples(text):
        if keep(s):
            sums[s.name] = sums.get(s.name, 0.0) + s.value
    return sums


def by_name_and_label(text: str, label: str, keep: Callable[[str], bool]) -> dict[tuple[str, str], float]:
    """``(name, label's value or "")`` -> value, for the kept names (one sample each: a gauge per model)."""
    return {(s.name, s.labels.get(label, "")): s.value for s in samples(text) if keep(s.name)}
