"""NCCL init alarms in the fabric verdict: the sim's ``nccl-slow-init`` faults make every rank's
``Init timings`` line slow in one phase; the validation names the alarm, with its figures, in
the pair's and the pool's reasons and the nightly report, and does not fail the pool for it."""

from __future__ import annotations

import pytest

from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.services.validation.fabric import FabricValidation
from gpufleet.services.views.nightly_report import nightly_report
from gpufleet.store import Ledger
from tests.support.fleet import _wait

CLUSTER, POOL = "a3u-sim", "h200-a"


def validate(run_id: str):
    svc = FabricValidation(load_catalog().pool(CLUSTER, POOL), Ledger(), gpu_health=False)
    state = svc.begin(run_id)
    while state.workload:
        _wait(svc.backend, state.workload)
        state = svc.collect(state)
    summary = svc.finish(state)
    row = Ledger().latest_validation(CLUSTER, POOL, "fabric")
    return summary, row, Ledger().pairs(row["id"])


def alarms(reasons) -> list[str]:
    return [r for r in reasons if "NCCL init alarm" in r]


@pytest.mark.parametrize(
    ("phase", "name", "at_least"),
    [("kernels", "nccl-init-kernels", 50.0), ("bootstrap", "nccl-init-bootstrap", 40.0)],
)
def test_a_slow_init_phase_is_named_in_the_verdict_and_the_report(
    fleet_state, phase, name, at_least
):
    SimState().inject(CLUSTER, POOL, f"nccl-slow-init:{phase}")
    summary, row, pairs = validate(f"night-init-{phase}")
    assert summary.passed and row["passed"]  # a note, not a failure
    pool_alarms = alarms(row["reasons"])
    assert pool_alarms and all(f"({name})" in a for a in pool_alarms)
    assert len(pool_alarms) == len([p for p in pairs if alarms(p["reasons"])])
    seconds = float(pool_alarms[0].split(f"the {phase} phase took ")[1].split(" s")[0])
    assert seconds >= at_least
    assert alarms(summary.reasons) == pool_alarms
    for pair in pairs:
        assert pair["passed"] and not alarms(pair["reasons"][:1])  # after the verdict's own
    report = nightly_report(Ledger(), load_catalog(), f"night-init-{phase}")
    assert f"({name})" in report.markdown


def test_a_healthy_init_raises_no_alarm(fleet_state):
    summary, row, pairs = validate("night-init-healthy")
    assert summary.passed
    assert alarms(row["reasons"]) == [] and not any(alarms(p["reasons"]) for p in pairs)


# ---- the fault, in the sim's grammar ---------------------------------------------------------


@pytest.mark.parametrize("phase", ["kernels", "bootstrap"])
def test_the_slow_init_fault_is_in_the_grammar(phase):
    import re

    from gpufleet.domain.faults import GPU_FAULT_KINDS, PARAM_PATTERN, parse_fault

    fault = parse_fault(f"nccl-slow-init:{phase}")
    assert (fault.kind, fault.phase) == ("nccl-slow-init", phase)
    assert parse_fault(fault.text) == fault
    assert re.match(PARAM_PATTERN, f"{CLUSTER}/{POOL}={fault.text}")
    assert fault.kind not in GPU_FAULT_KINDS  # NCCL's, not a GPU's


@pytest.mark.parametrize("text", ["nccl-slow-init", "nccl-slow-init:alloc", "nccl-slow-init:"])
def test_the_slow_init_fault_names_a_phase_with_an_alarm(text):
    import re

    from gpufleet.domain.faults import PARAM_PATTERN, FaultError, parse_fault

    with pytest.raises(FaultError, match="nccl-slow-init"):
        parse_fault(text)
    assert not re.match(PARAM_PATTERN, f"{CLUSTER}/{POOL}={text}")
