"""One action per node from its parsed signals: :func:`decide_health` (the rules are in
docs/design/gpu-health.md). Pure: no I/O. The findings of one signal (:func:`xid_finding`,
:func:`memory_finding`, :func:`nvlink_down_finding`, :data:`THROTTLE_ADVICE`) and the decision
over a node's findings (:func:`decision_of`) are shared with ``passive`` (the same rules, read
from dcgm-exporter's metrics). What did not run (:func:`not_run_finding`: a parser's ``NotRun``)
is a ``could_not_run`` finding; :func:`counts_as_burn_in` says whether a check is a node's
burn-in."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpufleet.domain.health.catalog import (
    BUCKET_ACTIONS,
    BUCKET_WORDS,
    BURN_IN_TESTS,
    DCGM_ERROR_ACTIONS,
    MAX_RETIRED_DBE_PAGES,
    MAX_RETIRED_PAGES,
    RECOVERY,
    RECOVERY_ACTIONS,
    SEVERITY,
    XID_CATALOG,
    A,
    Finding,
    HealthAction,
    HealthDecision,
    HealthVerdict,
)
from gpufleet.domain.health.tiers import BURN_IN_LEVEL

# --- what did not run --------------------------------------------------------------------------


def not_run_finding(not_run: Any) -> Finding:
    """A ``NotRun`` (``parsing.health.not_run``: ``what``, ``why``, ``code``) as the finding
    ``could_not_run``, its reason NotRun's own text (what did not run, why, and the tool's
    status code)."""
    what, why = getattr(not_run, "what", "a check"), getattr(not_run, "why", str(not_run))
    code = getattr(not_run, "code", None)
    return Finding(A.COULD_NOT_RUN, f"{what}: {why}" + (f" ({code})" if code else ""), code=code)


def _not_run_findings(name: str, signal: Any) -> list[Finding]:
    """What a parser result says did not run (its ``not_run``) or could not be read (its
    ``problems``: text of a shape the parser does not know): each a ``could_not_run``."""
    findings = [not_run_finding(nr) for nr in getattr(signal, "not_run", ()) or ()]
    findings += [
        Finding(A.COULD_NOT_RUN, f"{name}: not read: {problem}")
        for problem in getattr(signal, "problems", ()) or ()
    ]
    return findings


def _bus_key(bus: str) -> tuple[int, int, int] | None:
    """``0000:3b:00`` (kernel log) and ``00000000:3B:00.0`` (nvidia-smi) as one key."""
    parts = bus.lower().split(".")[0].split(":")
    try:
        return int(parts[-3], 16), int(parts[-2], 16), int(parts[-1], 16)
    except (IndexError, ValueError):
        return None


def _gpu_indexes(memory: Any) -> dict[tuple[int, int, int] | None, int]:
    """PCI bus -> nvidia-smi's GPU index: ``nvidia-smi -q`` prints the GPUs in index order."""
    gpus = getattr(memory, "gpus", ()) if memory is not None else ()
    return {_bus_key(g.pci_bus): index for index, g in enumerate(gpus)}


def _gpu_name(bus: str, indexes: dict[tuple[int, int, int] | None, int]) -> str:
    index = indexes.get(_bus_key(bus))
    return f"GPU {index} (PCI {bus})" if index is not None else f"the GPU at PCI {bus}"


# --- Xid events ------------------------------------------------------------------------------


def xid_finding(event: Any, gpu: str, others: set[int]) -> Finding | None:
    """What one Xid ``event`` (its ``code``, and its ``message`` for Xid 154) on ``gpu`` asks
    for, ``others`` being the other Xid codes of the same GPU (Xid 45 follows them); None when
    it asks for nothing of its own."""
    entry = XID_CATALOG.get(event.code)
    if entry is None:
        return Finding(
            A.NEEDS_HUMAN,
            f"{gpu}: Xid {event.code} is not in gpufleet's Xid catalog: look it up in NVIDIA's",
        )
    said = f"{gpu}: Xid {entry.code} ({entry.meaning})"
    if entry.bucket == "WORKFLOW_XID_45":
        if others:
            return None  # NVIDIA: "Not Solo: IGNORE (follow other Xid)"
        return Finding(
            A.NEEDS_HUMAN,
            f"{said} with no other Xid: NVIDIA says restart Fabric Manager "
            "(WORKFLOW_XID_45, solo: RESTART_FM), which gpufleet does not do",
        )
    if entry.bucket == "XID_154":
        found = RECOVERY.search(event.message or "")
        words = " ".join(found.group("action").split()) if found else ""
        action = RECOVERY_ACTIONS.get(words.lower(), A.NEEDS_HUMAN)
        return Finding(
            action, f"{said}: the driver asks for {words or 'an action it does not name'} (XID_154)"
        )
    return Finding(
        BUCKET_ACTIONS[entry.bucket], f"{said}: NVIDIA says {BUCKET_WORDS[entry.bucket]}"
    )


def _mig(event: Any) -> str:
    """`` (MIG GPU instance 1, compute instance 0)`` for an Xid the driver logged with its MIG
    instance (``GPU-I:``), else nothing: the fault is the GPU's all the same."""
    gi, ci = getattr(event, "gpu_instance", None), getattr(event, "compute_instance", None)
    if gi is None and ci is None:
        return ""
    parts = [f"GPU instance {gi}"] if gi is not None else []
    parts += [f"compute instance {ci}"] if ci is not None else []
    return f" (MIG {', '.join(parts)})"


def _xid_findings(xid: Any, indexes: dict[tuple[int, int, int] | None, int]) -> list[Finding]:
    """One finding per GPU and code, in the order first logged."""
    codes: dict[str, dict[int, Any]] = {}
    for event in xid.events:
        codes.setdefault(event.pci_bus, {}).setdefault(event.code, event)
    findings = []
    for bus, events in codes.items():
        for code, event in events.items():
            name = _gpu_name(bus, indexes) + _mig(event)
            found = xid_finding(event, name, set(events) - {code})
            if found is not None:
                findings.append(found)
    for bus, line in getattr(xid, "init_failures", ()) or ():
        findings.append(
            Finding(
                A.NEEDS_HUMAN,
                f"{_gpu_name(bus, indexes)}: the driver could not initialise it ({line}): a "
                "person looks (no Xid names an action for it)",
            )
        )
    return findings


# --- nvidia-smi: row remapping and ECC --------------------------------------------------------


def _uncorrectable(counters: dict[str, int | None]) -> dict[str, int]:
    """The volatile uncorrectable (double-bit) counters above 0, by name."""
    return {
        name: n
        for name, n in counters.items()
        if n and ("uncorrectable" in name or name.startswith("double_bit"))
    }


def memory_finding(gpu: Any, name: str) -> Finding | None:
    """What one GPU's row remapper (``remap_failure``, ``remap_pending``) and volatile ECC
    counters (``ecc_volatile``: name -> count) ask for; None when nothing."""
    errors = _uncorrectable(gpu.ecc_volatile)
    shown = ", ".join(f"{k} {v}" for k, v in errors.items())
    if gpu.remap_failure:
        return Finding(
            A.REPAIR,
            f"{name}: row remapping failure occurred: NVIDIA's RMA condition for row "
            "remapping: replace the GPU",
        )
    unexplained = {k for k in errors if not gpu.remap_pending or "sram" in k}
    if unexplained:
        return Finding(
            A.REPAIR,
            f"{name}: uncorrectable ECC errors ({shown}) no pending row remap explains: "
            "replace the GPU (NVIDIA: what a reset does not clear follows the RMA flow)",
        )
    if gpu.remap_pending:
        explained = f" after uncorrectable ECC errors ({shown})" if errors else ""
        return Finding(
            A.RESET_GPU,
            f"{name}: row remapping pending{explained}: NVIDIA says reset the GPU to apply it",
        )
    return None


def retirement_finding(gpu: Any, name: str) -> Finding | None:
    """What one GPU's retired pages (``nvidia-smi -q -d PAGE_RETIREMENT``: ``retired_pages_sbe``,
    ``retired_pages_dbe``, ``retirement_pending``; GPUs before Ampere) ask for: SBE + DBE pages
    at DCGM's limit (:data:`MAX_RETIRED_PAGES`) or DBE pages past its soft limit
    (:data:`MAX_RETIRED_DBE_PAGES`; DCGM also asks for more than one more a week, which one
    read cannot see: gpufleet does not wait for the rate) -> ``repair``; a page retirement
    pending (NVIDIA's "Dynamic Page Retirement": the page is blacklisted when the driver
    reloads) -> ``reset_gpu``; None else."""
    sbe = getattr(gpu, "retired_pages_sbe", None) or 0
    dbe = getattr(gpu, "retired_pages_dbe", None) or 0
    if sbe + dbe >= MAX_RETIRED_PAGES or dbe > MAX_RETIRED_DBE_PAGES:
        return Finding(
            A.REPAIR,
            f"{name}: {sbe + dbe} retired pages ({dbe} for double-bit errors), past DCGM's "
            f"limits ({MAX_RETIRED_PAGES} in all, {MAX_RETIRED_DBE_PAGES} for double-bit "
            "errors): replace the GPU",
        )
    if getattr(gpu, "retirement_pending", None):
        return Finding(
            A.RESET_GPU,
            f"{name}: a page retirement is pending: NVIDIA says reset the GPU (or reload the "
            "driver) to blacklist it",
        )
    return None


def _memory_findings(memory: Any) -> list[Finding]:
    findings = []
    for i, g in enumerate(memory.gpus):
        name = f"GPU {i} (PCI {g.pci_bus})"
        findings += [memory_finding(g, name), retirement_finding(g, name)]
    return [f for f in findings if f is not None]


# --- NVLink ------------------------------------------------------------------------------------


def nvlink_down_finding(gpu: str, link: int) -> Finding:
    """NVLink ``link`` of ``gpu`` is down."""
    return Finding(
        A.REPAIR,
        f"{gpu}: NVLink {link} is down: repair the machine (NVLink is its hardware; NVIDIA: "
        "contact the vendor when a reset does not clear it)",
    )


def _nvlink_findings(nvlink: Any) -> list[Finding]:
    """A link down (``inactive``, or ``state`` ``down``) -> repair; NVML's "all links are
    inactive" for a GPU (``all_inactive``) -> repair (every NVLink of the GPU is down; a GPU
    model without NVLink never prints it); non-zero error counters -> a degrading note."""
    findings = []
    for gpu in nvlink.gpus:
        if getattr(gpu, "all_inactive", False):
            findings.append(
                Finding(
                    A.REPAIR,
                    f"GPU {gpu.index}: all its NVLinks are inactive (NVML): repair the machine "
                    "(NVLink is its hardware)",
                )
            )
        for link in gpu.links:
            if link.inactive or getattr(link, "state", None) == "down":
                findings.append(nvlink_down_finding(f"GPU {gpu.index}", link.link))
            elif errors := {k: v for k, v in link.counters.items() if v}:
                counts = ", ".join(f"{k} {v}" for k, v in errors.items())
                said = f"GPU {gpu.index}: NVLink {link.link} counted {counts}"
                findings.append(Finding(A.HEALTHY, said, degrading=True))
    return findings


# --- dcgmi diag --------------------------------------------------------------------------------


_DIAG_ADVICE = {
    A.REPAIR: "repair the machine (DCGM: run a field diagnostic on the GPU)",
    A.NEEDS_HUMAN: "a person fixes what DCGM names (configuration, not hardware)",
    A.RESET_GPU: "reset the GPU (DCGM's next step)",
    A.COULD_NOT_RUN: "DCGM's own error, not the hardware's: the check is run again",
}
_RAN = ("pass", "fail", "warn")


def _diag_action(error_codes: Iterable[int]) -> HealthAction:
    """A failed test's action: what DCGM's error ids ask for, hardware (repair) by default."""
    actions = [DCGM_ERROR_ACTIONS.get(code, A.REPAIR) for code in error_codes]
    return max(actions, key=SEVERITY.__getitem__) if actions else A.REPAIR


def _ran(test: Any) -> bool:
    """Whether a test ran: it, or one of its GPUs, passed, failed or warned."""
    statuses = [getattr(test, "status", None)] + [g.status for g in getattr(test, "gpus", ())]
    return any(s in _RAN for s in statuses)


def _test_name(test: Any) -> str:
    return "_".join(str(test.name).lower().replace("-", " ").split())


def burn_in_ran(diag: Any) -> bool:
    """Whether a ``DcgmDiagResult`` shows dcgmi diag's level-4 tests ran (one of
    :data:`BURN_IN_TESTS` passed, failed or warned; skipped is not run)."""
    tests = getattr(diag, "tests", ()) if diag is not None else ()
    return any(_test_name(t) in BURN_IN_TESTS and _ran(t) for t in tests)


def counts_as_burn_in(level: int | None, decision: HealthDecision, diag: Any) -> bool:
    """Whether a node's check is its burn-in: run at level 4 or above, its verdict ``pass``
    (not degraded, not could_not_run, not failed), and its DCGM run shows the level-4 tests
    ran (:func:`burn_in_ran`)."""
    deep = isinstance(level, int) and not isinstance(level, bool) and level >= BURN_IN_LEVEL
    return deep and decision.verdict is HealthVerdict.PASS and burn_in_ran(diag)


def _failed(where: str, codes: Iterable[int], said: str) -> Finding:
    action = _diag_action(codes)
    verb = "could not run" if action is A.COULD_NOT_RUN else "failed"
    return Finding(action, f"{where} {verb}{said}: {_DIAG_ADVICE[action]}")


def _diag_findings(diag: Any, level: int | None) -> list[Finding]:
    """Per GPU: a failed test -> its action (:func:`_diag_action`); a warning -> a degrading
    note; a skip -> a note. A test that fails naming no GPU (DCGM 2.x/3.x ``Fail - All``,
    DCGM 4.x ``pcie | Fail`` over ``GPUn: Pass`` lines) fails the whole node, by the test's
    own error ids. No test that ran (none printed, or every one skipped) -> could_not_run, and
    so does a run at another level than the one asked for."""
    ran_level = getattr(diag, "level", None)
    shown = level if level is not None else ran_level
    run = f"dcgmi diag -r {shown}" if shown is not None else "dcgmi diag"
    findings = []
    tests = tuple(diag.tests)
    if not tests and not getattr(diag, "not_run", ()):  # else the parser says why
        findings.append(Finding(A.COULD_NOT_RUN, f"{run}: printed no test: nothing ran"))
    elif tests and not any(_ran(t) for t in tests):
        findings.append(
            Finding(A.COULD_NOT_RUN, f"{run}: every test was skipped ({len(tests)}): nothing ran")
        )
    if level is not None and ran_level is not None and ran_level != level:
        findings.append(
            Finding(A.COULD_NOT_RUN, f"{run} was asked for; DCGM reports level {ran_level}")
        )
    for test in tests:
        gpu_failed = gpu_warned = False
        for gpu in test.gpus:
            said = f": {gpu.messages[0]}" if gpu.messages else ""
            where = f"GPU {gpu.gpu}: {run} test {test.name!r}"
            if gpu.status == "fail":
                gpu_failed = True
                findings.append(_failed(where, gpu.error_codes, said))
            elif gpu.status == "warn":
                gpu_warned = True
                findings.append(Finding(A.HEALTHY, f"{where} warned{said}", degrading=True))
            elif gpu.status == "skip" and _ran(test):
                findings.append(Finding(A.HEALTHY, f"{where} was skipped"))
        messages = tuple(getattr(test, "messages", ()) or ())
        said = f": {messages[0]}" if messages else ""
        where = f"the node (no GPU named): {run} test {test.name!r}"
        if test.status == "fail" and not gpu_failed:
            codes = tuple(getattr(test, "error_codes", ()) or ())
            findings.append(_failed(where, codes, said))
        elif test.status == "warn" and not gpu_warned:
            findings.append(Finding(A.HEALTHY, f"{where} warned{said}", degrading=True))
    return findings


# --- the decision ------------------------------------------------------------------------------

THROTTLE_ADVICE = (
    "repair the machine (NVIDIA/DCGM: verify the machine's cooling; NVSentinel: HW thermal "
    "slowdown is fatal, CONTACT_SUPPORT)"
)
_THROTTLING = Finding(A.REPAIR, f"the node's GPUs throttle for heat: {THROTTLE_ADVICE}")


def decide_health(
    *,
    xid: Any = None,
    memory: Any = None,
    nvlink: Any = None,
    diag: Any = None,
    diag_level: int | None = None,
    throttling: bool = False,
    not_run: Iterable[Any] = (),
) -> HealthDecision:
    """One node's action from its signals (``None``: not read): ``xid`` an ``XidLog``,
    ``memory`` an ``NvidiaSmiMemoryReport``, ``nvlink`` an ``NvlinkErrorReport``, ``diag`` a
    ``DcgmDiagResult`` of ``dcgmi diag -r diag_level``, ``throttling`` whether the GPUs throttle
    for heat, ``not_run`` what of the node's check did not run (``NotRun``: a section missing
    from its output, one cut off by its timeout). Fails closed: anything that did not run or
    could not be read (each signal's ``not_run`` and ``problems``, ``not_run``) is a
    ``could_not_run`` finding, which only a real failure outranks; with no signal at all there
    is nothing to call the node healthy on: ``could_not_run``."""
    not_run = tuple(not_run)
    signals = (xid, memory, nvlink, diag)
    if all(s is None for s in signals) and not throttling and not not_run:
        return HealthDecision(A.COULD_NOT_RUN, "no GPU health signal was read for this node")
    # what did not run first: among could_not_run findings, the tools' own words name the cause
    findings: list[Finding] = [not_run_finding(nr) for nr in not_run]
    names = ("dmesg", "nvidia-smi -q", "nvidia-smi nvlink", "dcgmi diag")
    for name, signal in zip(names, signals, strict=True):
        if signal is not None:
            findings += _not_run_findings(name, signal)
    # the GPUs' state before the events that led to it: among equals the first names the cause
    if memory is not None:
        findings += _memory_findings(memory)
    if nvlink is not None:
        findings += _nvlink_findings(nvlink)
    if diag is not None:
        findings += _diag_findings(diag, diag_level)
    if xid is not None:
        findings += _xid_findings(xid, _gpu_indexes(memory))
    if throttling:
        findings.append(_THROTTLING)
    return decision_of(findings)


def decision_of(findings: Iterable[Finding]) -> HealthDecision:
    """The decision over a node's findings: the most severe wins (among equals the first), its
    reason counting the others of the same action; none, or only notes, is healthy (its
    verdict ``degraded`` when a note is degrading)."""
    ordered = tuple(sorted(findings, key=lambda f: -SEVERITY[f.action]))
    if not ordered or ordered[0].action is A.HEALTHY:
        notes = f" ({len(ordered)} note(s))" if ordered else ""
        degrading = [f.reason for f in ordered if f.degrading]
        said = f"; degraded: {degrading[0]}" if degrading else ""
        return HealthDecision(
            A.HEALTHY, f"no GPU health signal calls for action{notes}{said}", ordered
        )
    worst = ordered[0]
    more = sum(1 for f in ordered[1:] if f.action is worst.action)
    return HealthDecision(
        worst.action, worst.reason + (f" (and {more} more)" if more else ""), ordered
    )
