"""GPU health fails closed (issue 31): a check that could not run is neither a pass nor a
failure. The domain reads parser results by their fields, so the inputs here are small
stand-ins with the parsers' fields (``not_run``, ``problems``, DCGM tests with a test-level
status, messages and error ids, retired pages, ``all_inactive``, MIG Xids).

The property: no input holding a failed, skipped, unknown or truncated check (any ``NotRun``,
any parser problem, any DCGM failure, a DCGM run where nothing ran, a run at another level than
asked) ever yields ``healthy`` / ``pass`` or counts as a burn-in; and, so that it cannot hold
vacuously, every input built only from clean parts is ``pass`` or ``degraded``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpufleet.domain.health import (
    HealthAction,
    HealthVerdict,
    burn_in_ran,
    counts_as_burn_in,
    decide_health,
)
from gpufleet.domain.health.catalog import MAX_RETIRED_DBE_PAGES, MAX_RETIRED_PAGES

A, V = HealthAction, HealthVerdict


# --- the parsers' fields, as stand-ins ---------------------------------------------------------


@dataclass(frozen=True)
class NotRun:
    what: str
    why: str
    code: str | None = None


@dataclass(frozen=True)
class GpuResult:
    gpu: int
    status: str
    messages: tuple[str, ...] = ()
    error_codes: tuple[int, ...] = ()


@dataclass(frozen=True)
class DiagTest:
    name: str
    status: str | None
    gpus: tuple[GpuResult, ...] = ()
    messages: tuple[str, ...] = ()
    error_codes: tuple[int, ...] = ()
    category: str | None = None


@dataclass(frozen=True)
class Diag:
    tests: tuple[DiagTest, ...]
    level: int | None = None
    not_run: tuple[NotRun, ...] = ()
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class MemGpu:
    pci_bus: str
    remap_pending: bool | None = False
    remap_failure: bool | None = False
    ecc_volatile: dict[str, int | None] = field(default_factory=dict)
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retirement_pending: bool | None = None


@dataclass(frozen=True)
class Memory:
    gpus: tuple[MemGpu, ...]
    not_run: tuple[NotRun, ...] = ()
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Link:
    link: int
    counters: dict[str, int | None] = field(default_factory=dict)
    inactive: bool = False
    state: str | None = "up"


@dataclass(frozen=True)
class NvGpu:
    index: int
    links: tuple[Link, ...] = ()
    all_inactive: bool = False


@dataclass(frozen=True)
class Nvlink:
    gpus: tuple[NvGpu, ...]
    not_run: tuple[NotRun, ...] = ()
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class XidEvent:
    pci_bus: str
    code: int
    message: str = ""
    gpu_instance: int | None = None
    compute_instance: int | None = None


@dataclass(frozen=True)
class Xid:
    events: tuple[XidEvent, ...] = ()
    not_run: tuple[NotRun, ...] = ()
    problems: tuple[str, ...] = ()


def ok(name: str = "software", gpus: int = 2, status: str = "pass") -> DiagTest:
    return DiagTest(name, status, tuple(GpuResult(g, status) for g in range(gpus)))


IN_USE = NotRun("dcgmi diag", "the GPUs are in use", "DCGM_ST_IN_USE")


# --- DCGM: a test failing with no GPU named, nothing ran, internal errors ---------------------


def test_a_test_that_fails_naming_no_gpu_fails_the_whole_node():
    """DCGM 4.x ``pcie | Fail`` over ``GPUn: Pass`` lines, DCGM 2.x/3.x ``Fail - All``: the
    test fails and no GPU result does: the node, for repair (no error id says otherwise)."""
    pcie = DiagTest("pcie", "fail", (GpuResult(0, "pass"), GpuResult(1, "pass")), ("PCIe replays",))
    decision = decide_health(diag=Diag((ok(), pcie)), diag_level=2)
    assert (decision.action, decision.verdict) == (A.REPAIR, V.FAIL)
    assert decision.reason.startswith(
        "the node (no GPU named): dcgmi diag -r 2 test 'pcie' failed: PCIe replays: repair"
    )


@pytest.mark.parametrize(
    "codes,action",
    [
        ((), A.REPAIR),
        ((44,), A.COULD_NOT_RUN),  # DCGM_FR_INTERNAL: DCGM's own error
        ((47,), A.COULD_NOT_RUN),  # DCGM_FR_ABORTED
        ((117,), A.COULD_NOT_RUN),  # DCGM_FR_TEST_SKIPPED
        ((29,), A.NEEDS_HUMAN),  # DCGM_FR_PERSISTENCE_MODE: configuration
        ((44, 4), A.RESET_GPU),  # an internal error beside a volatile DBE: the DBE
        ((44, 3), A.REPAIR),  # beside PCI replays: the hardware
    ],
)
def test_a_whole_node_failure_takes_dcgms_error_ids(codes, action):
    test = DiagTest("pcie", "fail", (GpuResult(0, "pass"),), ("said",), codes)
    decision = decide_health(diag=Diag((test,)), diag_level=1)
    assert decision.action is action
    if action is A.COULD_NOT_RUN:
        assert "could not run: said: DCGM's own error, not the hardware's" in decision.reason


def test_a_gpu_failing_only_on_dcgms_internal_error_could_not_run():
    test = DiagTest("memory", "fail", (GpuResult(1, "fail", ("internal",), (44,)),))
    decision = decide_health(diag=Diag((test,)), diag_level=2)
    assert decision.verdict is V.COULD_NOT_RUN
    assert decision.reason.startswith("GPU 1: dcgmi diag -r 2 test 'memory' could not run")


def test_every_test_skipped_is_a_check_that_did_not_run_and_no_burn_in():
    skipped = Diag(tuple(ok(name, status="skip") for name in ("software", "memtest")), level=4)
    decision = decide_health(diag=skipped, diag_level=4)
    assert decision.verdict is V.COULD_NOT_RUN
    assert decision.reason == "dcgmi diag -r 4: every test was skipped (2): nothing ran"
    assert not burn_in_ran(skipped) and not counts_as_burn_in(4, decision, skipped)
    empty = decide_health(diag=Diag(()), diag_level=1)
    assert empty.reason == "dcgmi diag -r 1: printed no test: nothing ran"


def test_a_run_at_another_level_than_asked_could_not_run():
    decision = decide_health(diag=Diag((ok(),), level=1), diag_level=4)
    assert decision.verdict is V.COULD_NOT_RUN
    assert decision.reason == "dcgmi diag -r 4 was asked for; DCGM reports level 1"


def test_a_skip_beside_tests_that_ran_is_a_note_and_warnings_degrade():
    diag = Diag((ok(), DiagTest("pcie", "pass", (GpuResult(0, "pass"), GpuResult(1, "skip")))))
    decision = decide_health(diag=diag, diag_level=2)
    assert decision.verdict is V.PASS and decision.notes == (
        "GPU 1: dcgmi diag -r 2 test 'pcie' was skipped",
    )
    warned = Diag((ok(), DiagTest("memory", "warn", (GpuResult(0, "warn", ("hot",)),))))
    decision = decide_health(diag=warned, diag_level=2)
    assert (decision.action, decision.verdict) == (A.HEALTHY, V.DEGRADED)
    assert decision.reason.endswith("degraded: GPU 0: dcgmi diag -r 2 test 'memory' warned: hot")
    whole = Diag((DiagTest("pcie", "warn", (GpuResult(0, "pass"),), ("slow",)),))
    assert decide_health(diag=whole).verdict is V.DEGRADED


def test_a_level_4_run_is_a_burn_in_only_when_its_level_4_tests_ran_and_it_passed():
    ran = Diag((ok(), ok("memtest"), ok("Pulse Test")), level=4)
    decision = decide_health(diag=ran, diag_level=4)
    assert decision.verdict is V.PASS and counts_as_burn_in(4, decision, ran)
    assert not counts_as_burn_in(3, decision, ran)  # level 3 is no burn-in
    no_deep = Diag((ok(), ok("memtest", status="skip")), level=4)
    assert not counts_as_burn_in(4, decide_health(diag=no_deep, diag_level=4), no_deep)
    warned = Diag((ok(), ok("memtest", status="warn")), level=4)
    assert not counts_as_burn_in(4, decide_health(diag=warned, diag_level=4), warned)


# --- NotRun, problems: what did not run and why -----------------------------------------------


def test_a_not_run_says_what_did_not_run_and_why_and_keeps_dcgms_code():
    decision = decide_health(diag=Diag((), not_run=(IN_USE,)), diag_level=1)
    assert (decision.action, decision.verdict) == (A.COULD_NOT_RUN, V.COULD_NOT_RUN)
    assert decision.reason == "dcgmi diag: the GPUs are in use (DCGM_ST_IN_USE)"
    assert decision.not_run_codes == {"DCGM_ST_IN_USE"}


def test_a_real_failure_outranks_what_could_not_run_and_healthy_findings_do_not():
    cut = NotRun("ECC of GPU 0", "not in the output")
    memory = Memory((MemGpu("00000000:10:1C.0", remap_failure=True),), not_run=(cut,))
    assert decide_health(memory=memory).action is A.REPAIR
    clean = Memory((MemGpu("00000000:10:1C.0"),), not_run=(cut,))
    decision = decide_health(memory=clean, xid=Xid((XidEvent("0000:10:1c", 13),)))
    assert decision.action is A.COULD_NOT_RUN  # a note and a could-not-run: could_not_run
    assert decision.reason == "ECC of GPU 0: not in the output"


def test_a_parser_problem_is_text_not_read_and_never_healthy():
    decision = decide_health(xid=Xid(problems=("line 3: an Xid line of unknown shape",)))
    assert decision.verdict is V.COULD_NOT_RUN
    assert decision.reason == "dmesg: not read: line 3: an Xid line of unknown shape"


def test_the_report_level_not_run_is_read_too():
    decision = decide_health(memory=Memory(()), not_run=(NotRun("dcgmi diag", "timed out"),))
    assert decision.reason == "dcgmi diag: timed out"


# --- page retirement, NVLink all inactive, MIG Xids -------------------------------------------


@pytest.mark.parametrize(
    "gpu,action",
    [
        (MemGpu("b", retirement_pending=True), A.RESET_GPU),
        (MemGpu("b", retired_pages_sbe=60, retired_pages_dbe=MAX_RETIRED_PAGES - 60), A.REPAIR),
        (MemGpu("b", retired_pages_dbe=MAX_RETIRED_DBE_PAGES + 1), A.REPAIR),
        (MemGpu("b", retired_pages_sbe=10, retired_pages_dbe=MAX_RETIRED_DBE_PAGES), A.HEALTHY),
        (MemGpu("b", retired_pages_sbe=None, retired_pages_dbe=None), A.HEALTHY),
    ],
)
def test_retired_pages(gpu, action):
    decision = decide_health(memory=Memory((gpu,)))
    assert decision.action is action
    if action is A.REPAIR:
        assert "past DCGM's limits (63 in all, 15 for double-bit errors)" in decision.reason


def test_nvml_all_links_inactive_is_nvlink_down():
    decision = decide_health(nvlink=Nvlink((NvGpu(2, all_inactive=True),)))
    assert decision.action is A.REPAIR
    assert decision.reason.startswith("GPU 2: all its NVLinks are inactive (NVML)")
    down = decide_health(nvlink=Nvlink((NvGpu(0, (Link(4, state="down"),)),)))
    assert down.action is A.REPAIR and down.reason.startswith("GPU 0: NVLink 4 is down")
    counted = decide_health(nvlink=Nvlink((NvGpu(0, (Link(4, {"crc": 3}),)),)))
    assert counted.verdict is V.DEGRADED


def test_a_mig_xid_names_its_instance():
    event = XidEvent("0000:10:1c", 79, gpu_instance=1, compute_instance=0)
    decision = decide_health(xid=Xid((event,)))
    assert decision.action is A.REBOOT
    assert decision.reason.startswith(
        "the GPU at PCI 0000:10:1c (MIG GPU instance 1, compute instance 0): Xid 79"
    )


# --- the property ------------------------------------------------------------------------------

STATUSES = ("pass", "warn", "skip", "fail")
HEALTHY_XIDS = (13, 31, 43, 63, 92, 94)  # NVIDIA: restart the application, or nothing to do
not_runs = st.builds(
    NotRun,
    st.sampled_from(["dcgmi diag", "ECC of GPU 0", "nvidia-smi nvlink -e"]),
    st.sampled_from(["timed out", "not in the output", "in use"]),
    st.sampled_from([None, "DCGM_ST_IN_USE", "DCGM_ST_NVVS_ERROR"]),
)
problems = st.lists(st.sampled_from(["line 2: unknown shape", "a field it does not know"]))


@st.composite
def diags(draw) -> Diag:
    tests = []
    for name in draw(st.lists(st.sampled_from(["software", "pcie", "memtest"]), max_size=3)):
        gpus = tuple(
            GpuResult(
                g,
                draw(st.sampled_from(STATUSES)),
                error_codes=tuple(draw(st.lists(st.sampled_from([3, 29, 44, 4]), max_size=2))),
            )
            for g in range(draw(st.integers(0, 2)))
        )
        status = draw(st.sampled_from((None, *STATUSES)))
        codes = tuple(draw(st.lists(st.sampled_from([3, 29, 44]), max_size=2)))
        tests.append(DiagTest(name, status, gpus, error_codes=codes))
    return Diag(
        tuple(tests),
        level=draw(st.sampled_from([None, 1, 4])),
        not_run=tuple(draw(st.lists(not_runs, max_size=1))),
        problems=tuple(draw(problems)),
    )


@st.composite
def nodes(draw) -> dict[str, Any]:
    """One node's signals: each may be absent, clean, or carry something unknown."""
    signals: dict[str, Any] = {}
    if draw(st.booleans()):
        signals["diag"] = draw(diags())
        signals["diag_level"] = draw(st.sampled_from([None, signals["diag"].level]))
    if draw(st.booleans()):
        gpu = MemGpu("00000000:10:1C.0", retired_pages_sbe=draw(st.sampled_from([None, 0, 2])))
        signals["memory"] = Memory(
            (gpu,), tuple(draw(st.lists(not_runs, max_size=1))), tuple(draw(problems))
        )
    if draw(st.booleans()):
        link = Link(0, {"crc": draw(st.integers(0, 3))})
        signals["nvlink"] = Nvlink(
            (NvGpu(0, (link,)),), tuple(draw(st.lists(not_runs, max_size=1))), tuple(draw(problems))
        )
    if draw(st.booleans()):
        codes = draw(st.lists(st.sampled_from(HEALTHY_XIDS), max_size=2))
        signals["xid"] = Xid(
            tuple(XidEvent("0000:10:1c", c) for c in codes),
            tuple(draw(st.lists(not_runs, max_size=1))),
            tuple(draw(problems)),
        )
    signals["not_run"] = tuple(draw(st.lists(not_runs, max_size=1)))
    return signals


def holds_a_check_that_did_not_pass(signals: dict[str, Any]) -> bool:
    """Failed, skipped, unknown or truncated: any NotRun or problem, any DCGM failure, a DCGM
    run where nothing ran, one at another level than asked, or no signal at all."""
    parts = [signals.get(k) for k in ("diag", "memory", "nvlink", "xid")]
    if not any(p is not None for p in parts) or signals["not_run"]:
        return True
    if any(p is not None and (p.not_run or p.problems) for p in parts):
        return True
    diag = signals.get("diag")
    if diag is None:
        return False
    statuses = [s for t in diag.tests for s in (t.status, *(g.status for g in t.gpus))]
    ran = [s for s in statuses if s in ("pass", "warn", "fail")]
    level = signals.get("diag_level")
    return "fail" in statuses or not ran or (level is not None and diag.level not in (None, level))


CUT = NotRun("nvidia-smi -q -d ROW_REMAPPER,ECC,PAGE_RETIREMENT", "not in the output")


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(nodes())
# shrunk examples hypothesis found against mutated rules, kept as cases
@example({"diag": Diag((DiagTest("pcie", "fail", (GpuResult(0, "pass"),)),)), "not_run": ()})
@example({"diag": Diag((DiagTest("software", "skip", (GpuResult(0, "skip"),)),)), "not_run": ()})
@example({"diag": Diag(()), "not_run": ()})
@example({"memory": Memory((MemGpu("00000000:10:1C.0"),)), "not_run": (CUT,)})
@example({"memory": Memory((MemGpu("00000000:10:1C.0"),), not_run=(CUT,)), "not_run": ()})
@example({"xid": Xid(problems=("line 2: unknown shape",)), "not_run": ()})
@example({"diag": Diag((ok(),), not_run=(IN_USE,)), "not_run": ()})
@example({"diag": Diag((ok("memtest"),), level=1), "diag_level": 4, "not_run": ()})
@example({"not_run": ()})
def test_no_failed_skipped_unknown_or_truncated_check_is_ever_healthy_or_a_burn_in(signals):
    decision = decide_health(**signals)
    level = signals.get("diag_level") or 4
    if holds_a_check_that_did_not_pass(signals):
        assert decision.action is not A.HEALTHY
        assert decision.verdict not in (V.PASS, V.DEGRADED)
        assert not counts_as_burn_in(level, decision, signals.get("diag"))
        if decision.verdict is V.COULD_NOT_RUN:
            assert decision.reason  # says what did not run and why
    else:  # clean parts only: the property is not vacuous
        assert decision.verdict in (V.PASS, V.DEGRADED)


def test_a_gpu_the_driver_could_not_initialise_goes_to_a_person():
    """The parser's ``init_failures`` (``RmInitAdapter failed``): no Xid names an action."""

    @dataclass(frozen=True)
    class InitLog(Xid):
        init_failures: tuple[tuple[str, str], ...] = ()

    line = "NVRM: GPU 0000:9a:00.0: RmInitAdapter failed! (0x22:0x40:894)"
    decision = decide_health(xid=InitLog(init_failures=(("0000:9a:00", line),)))
    assert decision.action is A.NEEDS_HUMAN
    assert decision.reason.startswith(
        "the GPU at PCI 0000:9a:00: the driver could not initialise it (NVRM: GPU"
    )
