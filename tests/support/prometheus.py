"""Prometheus text as ``prometheus_client`` reads and writes it: the format check every
``/metrics`` test makes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families


def families_written_back(text: bytes) -> list[Metric]:
    """The metric families of ``text``, asserting that ``prometheus_client`` writes them back
    byte for byte (the text follows the exposition format as the client writes it)."""
    families = list(text_string_to_metric_families(text.decode()))

    class Again:
        def collect(self):
            yield from families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Again())
    assert generate_latest(registry) == text  # the format, byte for byte
    return families
