"""The simulated fleet's fault vocabulary: what can be injected, how a fault is written, and the
one parser that reads it. Pure: no I/O.

Design: docs/design/simulated-fleet.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from gpufleet.domain.names import DNS1123_LABEL, DNS1123_LABEL_BODY, DNS1123_SUBDOMAIN
from gpufleet.errors import GpufleetError

FAULT_KINDS = (
    "fabric-down",
    "bad-node",
    "lustre-slow",
    "capacity-short",
    "api-errors",
    "not-ready",
    "drift",
    "subblock-down",
    "block-slow",
    "nccl-slow-init",
    "xid",
    "row-remap-pending",
    "row-remap-failed",
    "ecc-dbe",
    "nvlink-down",
    "thermal-throttle",
    "dcgm-internal-error",
    "dcgm-skip-all",
    "dcgm-fail-all",
    "dcgm-in-use",
    "dcgm-truncated",
    "dcgm-hang",
)
GPU_FAULT_KINDS = FAULT_KINDS[FAULT_KINDS.index("xid") : FAULT_KINDS.index("dcgm-internal-error")]
# the faults of a node's ``dcgmi diag`` run (its DCGM failure dialects), not of its GPUs
DCGM_FAULT_KINDS = FAULT_KINDS[FAULT_KINDS.index("dcgm-internal-error") :]
# how long (seconds on the sim's clock) a ``dcgm-in-use`` fault holds the node's GPUs after it
# was put in force: a diagnostic already running there ends; the health round's retries of
# DCGM_ST_IN_USE (300 s at 10 s, as NVSentinel's) outlast it
IN_USE_HOLD_S = 120.0
# The faults naming a node that its reboot clears (``CloudBackend.reboot_node``): a reboot resets
# every GPU, so this boot's Xid events are gone and a pending row remap takes effect. The rest
# (a failed remap, ECC errors, a link down, throttling, a bad or NotReady node) stay until a
# host repair.
REBOOT_CLEARS = frozenset({"xid", "row-remap-pending"})
# the faults whose one argument is a node name (``kind:<node>``)
_NODE_KINDS = ("not-ready", *GPU_FAULT_KINDS[1:], *DCGM_FAULT_KINDS)
_PLACE_KINDS = ("subblock-down", "block-slow")  # ``kind:<id>``: a sub-block's or block's id
# nccl-slow-init:<phase>: the NCCL init phases the sim can make slow (domain.nccl_init's alarms)
SLOW_INIT_PHASES = ("kernels", "bootstrap")
MAX_XID = 999  # as the kernel-log parser reads Xid codes (gpufleet.parsing.health.xid)
SYNTAX = (
    "fabric-down[:busbw=GBPS], bad-node:<node>[:nic], lustre-slow[:FACTOR], "
    "capacity-short[:N], api-errors:RATE[:after=N], not-ready:<node>, drift:<PERCENT>, "
    "subblock-down:<sub-block>, block-slow:<block>, nccl-slow-init:kernels|bootstrap, "
    "xid:<node>:<CODE>, "
    "row-remap-pending:<node>, row-remap-failed:<node>, ecc-dbe:<node>, "
    "nvlink-down:<node>, thermal-throttle:<node>, dcgm-internal-error:<node>, "
    "dcgm-skip-all:<node>, dcgm-fail-all:<node>, dcgm-in-use:<node>, dcgm-truncated:<node>, "
    "dcgm-hang:<node>"
)
_INTEGER = re.compile(r"^[0-9]+$")
_NUMBER = r"[0-9]+(\.[0-9]+)?"
_FRACTION = r"(0?\.[0-9]+|0)"
_NODE = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
# ``cluster/pool=fault`` for a JSON-schema ``pattern`` (the sim drill DAG's ``sim_faults`` Param),
# so Airflow's own form validation refuses what the grammar cannot read: unknown kinds, words,
# signs, nan and inf. Bounds it cannot express (a zero rate, count or Xid) are refused by
# ``parse_fault`` when the run starts.
PARAM_PATTERN = (
    r"^" + DNS1123_LABEL_BODY + "/" + DNS1123_LABEL_BODY + "="
    r"(fabric-down(:busbw=" + _NUMBER + r")?"
    r"|bad-node:" + _NODE + r"(:nic)?"
    r"|lustre-slow(:" + _FRACTION + r")?"
    r"|capacity-short(:[0-9]+)?"
    r"|api-errors:(" + _FRACTION + r"|1(\.0+)?)(:after=[0-9]+)?"
    r"|(" + "|".join(_NODE_KINDS) + "):" + _NODE + r"|xid:" + _NODE + r":[0-9]{1,3}"
    r"|(subblock-down|block-slow):"
    + DNS1123_LABEL_BODY
    + r"|nccl-slow-init:(kernels|bootstrap)"
    + r"|drift:"
    + _NUMBER
    + r")$(?![\s\S])"  # whole string, in Python too (names.whole)
)


class FaultError(GpufleetError):
    """A fault is not written in the fault grammar, or its argument is out of bounds."""


@dataclass(frozen=True)
class Fault:
    """One fault, typed. Only the fields of its kind are set."""

    kind: str
    busbw_gbps: float | None = None  # fabric-down: socket bandwidth while the fabric is down
    node: str | None = None  # bad-node, not-ready, the GPU and the DCGM faults
    nic: bool = False  # bad-node:<node>:nic
    factor: float | None = None  # lustre-slow (None: the sim's default)
    machines: int | None = None  # capacity-short (None: half the reservation)
    rate: float | None = None  # api-errors
    after: int | None = None  # api-errors:...:after=N
    percent: float | None = None  # drift: bus bandwidth lost per night, in percent
    xid: int | None = None  # xid: the Xid code the node's GPU logs
    place: str | None = None  # subblock-down: the sub-block; block-slow: the block
    phase: str | None = None  # nccl-slow-init: the NCCL init phase made slow

    @property
    def text(self) -> str:
        """The fault written in the grammar (``parse_fault(f.text) == f``)."""
        if self.kind == "fabric-down" and self.busbw_gbps is not None:
            return f"fabric-down:busbw={self.busbw_gbps:g}"
        if self.kind == "bad-node":
            return f"bad-node:{self.node}" + (":nic" if self.nic else "")
        if self.kind == "lustre-slow" and self.factor is not None:
            return f"lustre-slow:{self.factor:g}"
        if self.kind == "capacity-short" and self.machines is not None:
            return f"capacity-short:{self.machines}"
        if self.kind == "api-errors":
            return f"api-errors:{self.rate:g}" + (f":after={self.after}" if self.after else "")
        if self.kind == "xid":
            return f"xid:{self.node}:{self.xid}"
        if self.kind in _NODE_KINDS:
            return f"{self.kind}:{self.node}"
        if self.kind == "drift":
            return f"drift:{self.percent:g}"
        if self.kind in _PLACE_KINDS:
            return f"{self.kind}:{self.place}"
        if self.kind == "nccl-slow-init":
            return f"nccl-slow-init:{self.phase}"
        return self.kind


# How long a run's faults stay in force at most when its DAG sets no ``dagrun_timeout``: longer
# than an onboarding's longest waits (about 4 h), shorter than the nightly's period.
DEFAULT_RUN_LEASE_S = 6 * 3600.0


def run_scope(dag_id: str, run_id: str) -> str:
    """The scope of one DAG run's faults (run ids are unique only within a DAG)."""
    return f"run:{dag_id}/{run_id}"


@dataclass(frozen=True)
class RunLease:
    """Whose a run-scoped fault is (``dag_id``, ``run_id``) and how long it may stay in force at
    most (``seconds`` from when it is injected): a run killed before its teardown cannot leave
    it behind for longer. Not a ledger lock's lease (``domain.leases``): never renewed, and
    no holder keeps it past ``seconds`` however alive its run."""

    dag_id: str
    run_id: str
    seconds: float = DEFAULT_RUN_LEASE_S

    def __post_init__(self) -> None:
        if not self.dag_id or not self.run_id:
            raise FaultError("a run's faults need the run's dag_id and run_id")
        if not isinstance(self.seconds, int | float) or not math.isfinite(self.seconds):
            raise FaultError(
                f"a run's fault lease must be a finite number of seconds, not {self.seconds!r}"
            )
        if self.seconds <= 0:
            raise FaultError(f"a run's fault lease must be above 0 s, not {self.seconds:g}")

    @property
    def scope(self) -> str:
        return run_scope(self.dag_id, self.run_id)


@dataclass(frozen=True)
class ActiveFault:
    """A fault in force on one pool: where, which, and who put it there (``cli``,
    ``catalog``, or ``run:<dag id>/<run id>`` for a run's ``sim_faults``) and since when
    (``since``: a UNIX time; None for the catalog's standing faults, in force from the start).
    A run's fault names its run (``dag_id``, ``run_id``) and when its lease ends
    (``expires_at``, a UNIX time on the sim's clock); the others have neither."""

    cluster: str
    pool: str
    fault: Fault
    scope: str
    since: float | None = None
    dag_id: str | None = None
    run_id: str | None = None
    expires_at: float | None = None

    @property
    def text(self) -> str:
        return self.fault.text


def _number(text: str, spec: str, what: str, example: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise FaultError(f"fault {spec!r}: {what} must be a number, e.g. {example}") from None
    if not math.isfinite(value):
        raise FaultError(f"fault {spec!r}: {what} must be a finite number, e.g. {example}")
    return value


def parse_fault(text: str) -> Fault:  # noqa: C901  one branch per fault kind of the grammar
    """Read one fault (``bad-node:n1:nic``, ``lustre-slow:0.3`` ...) into a ``Fault``.

    Raises ``FaultError`` (one line) for an unknown kind, a missing or malformed argument, or
    a number that is not finite or out of bounds.
    """
    if not isinstance(text, str):
        raise FaultError(f"fault {text!r} is not text: write one of {SYNTAX}")
    spec = text.strip()
    kind, sep, arg = spec.partition(":")
    if kind not in FAULT_KINDS:
        raise FaultError(f"unknown fault {spec!r}: use one of {SYNTAX}")
    if sep and not arg:
        raise FaultError(f"fault {spec!r} has an empty argument after ':'")
    if kind == "fabric-down":
        if not arg:
            return Fault(kind)
        key, eq, value = arg.partition("=")
        if key != "busbw" or not eq:
            raise FaultError(
                f"fault {spec!r}: fabric-down takes an optional socket bandwidth: "
                "fabric-down:busbw=340"
            )
        busbw = _number(value, spec, "busbw (GB/s)", "fabric-down:busbw=340")
        if busbw <= 0:
            raise FaultError(f"fault {spec!r}: busbw must be above 0 GB/s")
        return Fault(kind, busbw_gbps=busbw)
    if kind in _NODE_KINDS:
        if len(arg) > 253 or not DNS1123_SUBDOMAIN.match(arg):
            raise FaultError(f"fault {spec!r}: {kind} needs a node name: {kind}:<node>")
        return Fault(kind, node=arg)
    if kind == "xid":
        node, _, code = arg.partition(":")
        if len(node) > 253 or not DNS1123_SUBDOMAIN.match(node):
            raise FaultError(f"fault {spec!r}: xid needs a node name: xid:<node>:<CODE>")
        if not _INTEGER.fullmatch(code) or not 1 <= int(code) <= MAX_XID:
            raise FaultError(
                f"fault {spec!r}: xid needs a code from 1 to {MAX_XID} after the node: "
                "xid:<node>:79"
            )
        return Fault(kind, node=node, xid=int(code))
    if kind == "bad-node":
        node, _, how = arg.partition(":")
        if not node:
            raise FaultError(f"fault {spec!r}: bad-node needs a node name: bad-node:<node>[:nic]")
        if len(node) > 253 or not DNS1123_SUBDOMAIN.match(node):
            raise FaultError(f"fault {spec!r}: {node!r} is not a node name")
        if how not in ("", "nic"):
            raise FaultError(
                f"fault {spec!r}: after the node only ':nic' may follow (bad-node:<node>:nic)"
            )
        return Fault(kind, node=node, nic=how == "nic")
    if kind in _PLACE_KINDS:
        what = "sub-block" if kind == "subblock-down" else "block"
        if not DNS1123_LABEL.match(arg):
            raise FaultError(f"fault {spec!r}: {kind} needs a {what} id: {kind}:<{what}>")
        return Fault(kind, place=arg)
    if kind == "nccl-slow-init":
        if arg not in SLOW_INIT_PHASES:
            raise FaultError(
                f"fault {spec!r}: nccl-slow-init names the phase: nccl-slow-init:kernels "
                "or nccl-slow-init:bootstrap"
            )
        return Fault(kind, phase=arg)
    if kind == "drift":
        if not arg:
            raise FaultError(f"fault {spec!r}: drift needs a percent per night: drift:1")
        percent = _number(arg, spec, "the drift percent per night", "drift:1")
        if not 0 < percent < 100:
            raise FaultError(f"fault {spec!r}: drift percent {arg} is not within (0, 100)")
        return Fault(kind, percent=percent)
    if kind == "lustre-slow":
        if not arg:
            return Fault(kind)
        factor = _number(arg, spec, "the factor", "lustre-slow:0.3")
        if not 0 < factor < 1:
            raise FaultError(f"fault {spec!r}: lustre-slow factor {arg} is not within (0, 1)")
        return Fault(kind, factor=factor)
    if kind == "capacity-short":
        if not arg:
            return Fault(kind)
        if not _INTEGER.fullmatch(arg) or int(arg) < 1:
            raise FaultError(
                f"fault {spec!r}: capacity-short takes an optional machine count of at least 1: "
                "capacity-short:2"
            )
        return Fault(kind, machines=int(arg))
    # api-errors
    if not arg:
        raise FaultError(f"fault {spec!r}: api-errors needs a rate between 0 and 1: api-errors:0.3")
    rate_text, _, after_text = arg.partition(":")
    rate = _number(rate_text, spec, "the api-errors rate", "api-errors:0.3")
    if not 0 < rate <= 1:
        raise FaultError(f"fault {spec!r}: api-errors rate {rate_text} is not within (0, 1]")
    if not after_text:
        return Fault(kind, rate=rate)
    key, eq, value = after_text.partition("=")
    if key != "after" or not eq or not _INTEGER.fullmatch(value) or int(value) < 1:
        raise FaultError(
            f"fault {spec!r}: after the rate only ':after=N' (N >= 1 calls) may follow: "
            "api-errors:1:after=20"
        )
    return Fault(kind, rate=rate, after=int(value))


_POOL_FAULT = re.compile(
    rf"^(?P<cluster>{DNS1123_LABEL_BODY})/(?P<pool>{DNS1123_LABEL_BODY})=(?P<fault>\S+)$"
)


def parse_pool_fault(text: str) -> tuple[str, str, Fault]:
    """``cluster/pool=fault`` (the sim drill's ``sim_faults`` Param) -> (cluster, pool, fault)."""
    m = _POOL_FAULT.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise FaultError(f"fault {text!r} is not of the form cluster/pool=fault")
    return m["cluster"], m["pool"], parse_fault(m["fault"])
