"""The fail-closed rule on real outputs (issue 31): every sample of the health corpus
(``tests/data/parsing/health/corpus``, each with its public source in its sidecar), read by its
parser and decided alone, never reads ``pass`` or ``degraded`` when what the parser read holds
a check that did not run (``not_run``), a line it does not know (``problems``), a DCGM test
that failed, or a DCGM run where no test ran; and a sample that holds none of these is never
``could_not_run``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.domain.health import HealthVerdict, decide_health
from gpufleet.errors import ParseError
from gpufleet.parsing.health import (
    parse_dcgm_diag,
    parse_nvidia_smi_remap_ecc,
    parse_nvlink_errors,
    parse_xid_lines,
)

CORPUS = Path(__file__).resolve().parents[1] / "data" / "parsing" / "health" / "corpus"
READERS = {  # the sidecar's parser -> (parser, decide_health's keyword)
    "dcgm_diag": (parse_dcgm_diag, "diag"),
    "nvidia_smi": (parse_nvidia_smi_remap_ecc, "memory"),
    "nvlink": (parse_nvlink_errors, "nvlink"),
    "xid": (parse_xid_lines, "xid"),
}
SAMPLES = sorted(
    p
    for p in CORPUS.glob("*/*")
    if p.suffix != ".yaml"
    and p.with_suffix(".yaml").exists()
    and yaml.safe_load(p.with_suffix(".yaml").read_text()).get("parser") in READERS
)


def did_not_pass(result, keyword: str) -> bool:
    if getattr(result, "not_run", ()) or getattr(result, "problems", ()):
        return True
    if keyword != "diag":
        return False
    statuses = [s for t in result.tests for s in (t.status, *(g.status for g in t.gpus))]
    return "fail" in statuses or not any(s in ("pass", "warn", "fail") for s in statuses)


@pytest.mark.skipif(not SAMPLES, reason="the health corpus is not in the tree")
@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_real_output_that_did_not_pass_never_reads_healthy(sample: Path):
    parser, keyword = READERS[yaml.safe_load(sample.with_suffix(".yaml").read_text())["parser"]]
    try:
        result = parser(sample.read_text())
    except ParseError:
        pytest.skip("refused by its parser (its own corpus test says so)")
    decision = decide_health(**{keyword: result})
    if did_not_pass(result, keyword):
        assert decision.verdict not in (HealthVerdict.PASS, HealthVerdict.DEGRADED), decision
    else:
        assert decision.verdict is not HealthVerdict.COULD_NOT_RUN, decision.reason
