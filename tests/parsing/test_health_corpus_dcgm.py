"""Real ``dcgmi diag`` outputs (``tests/data/parsing/health/corpus/dcgm/``) read by
``parse_dcgm_diag``: every fact its sidecar states must come out, so a wrong read of a real
sample is a failing test.

Each sample ``<what>.txt`` / ``<what>.json`` has a sidecar ``<what>.yaml``::

    source: https://...        # where the output was published (required, an https URL)
    note: ...                   # what differs from the original, if anything
    parser: dcgm_diag
    expect:
      tests: 13                 # number of tests read (DcgmDiagResult.tests)
      failed_tests: [GPU Memory]  # names of the tests DCGM failed, sorted
      failing_gpus: [0, 1]      # GPUs any test failed (DcgmDiagResult.failing_gpus)
      whole_node_failed_tests: [pcie]  # failed tests that name no failing GPU, sorted
      skipped_all: false        # tests were read and DCGM skipped every one
      not_run: true             # at least one NotRun (run error, cut short, no result, ...)
      not_run_codes: [DCGM_ST_IN_USE]  # the DCGM_ST_* names of those NotRuns, sorted
      level: 3                  # the run level the output states (a dcgmi diag -r N line)
      dcgm_version: 3.3.8       # the DCGM Version row / JSON version, or null

Every key is checked when present; a sidecar without ``source`` or ``expect`` fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.parsing import parse_dcgm_diag

CORPUS = Path(__file__).resolve().parents[1] / "data" / "parsing" / "health" / "corpus" / "dcgm"
KEYS = {
    "tests",
    "failed_tests",
    "failing_gpus",
    "whole_node_failed_tests",
    "skipped_all",
    "not_run",
    "not_run_codes",
    "level",
    "dcgm_version",
}


def _samples() -> list[Path]:
    return sorted(p for p in CORPUS.glob("*") if p.suffix in (".txt", ".json"))


def _facts(text: str) -> dict[str, Any]:
    result = parse_dcgm_diag(text)
    return {
        "tests": len(result.tests),
        "failed_tests": sorted(set(result.failed_tests)),
        "failing_gpus": list(result.failing_gpus),
        "whole_node_failed_tests": sorted({t.name for t in result.whole_node_failures}),
        "skipped_all": result.skipped_all,
        "not_run": bool(result.not_run),
        "not_run_codes": sorted({n.code for n in result.not_run if n.code}),
        "level": result.level,
        "dcgm_version": result.dcgm_version,
    }


def test_the_dcgm_corpus_is_not_empty():
    assert len(_samples()) >= 28


@pytest.mark.parametrize("sample", _samples(), ids=lambda p: p.name)
def test_every_real_sample_yields_the_facts_its_sidecar_states(sample: Path):
    meta = yaml.safe_load(sample.with_suffix(".yaml").read_text(encoding="utf-8"))
    assert str(meta.get("source", "")).startswith("https://"), f"{sample.name}: no source URL"
    assert meta.get("parser") == "dcgm_diag"
    expect = meta.get("expect")
    assert isinstance(expect, dict) and expect, f"{sample.name}: no expected facts"
    assert set(expect) <= KEYS, f"{sample.name}: unknown keys {set(expect) - KEYS}"
    facts = _facts(sample.read_text(encoding="utf-8"))
    wrong = {k: (facts[k], v) for k, v in expect.items() if facts[k] != v}
    assert not wrong, f"{sample.name}: (read, expected) {wrong}"


def test_no_sample_reads_healthy_when_it_holds_a_failure_or_did_not_run():
    """Fail closed across the corpus: a sample whose sidecar names a failed test or a NotRun
    never reads as a clean pass (no failing test, nothing not run)."""
    for sample in _samples():
        expect = yaml.safe_load(sample.with_suffix(".yaml").read_text(encoding="utf-8"))["expect"]
        if expect.get("failed_tests") or expect.get("not_run"):
            result = parse_dcgm_diag(sample.read_text(encoding="utf-8"))
            assert result.failed_tests or result.not_run, sample.name
