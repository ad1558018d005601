"""How long NCCL took to set up its communicators: the ``Init timings`` lines, per rank.

What NCCL prints (``src/init.cc``, ``INFO(NCCL_INIT|NCCL_PROFILE, ...)`` at ``NCCL_DEBUG=INFO``):

- 2.23 and later (checked up to 2.30.7)::

    Init timings - <ncclCommInitRank|ncclCommInitRankConfig|ncclCommInitAll|ncclCommSplit|...>:
    rank R nranks N total T (kernels k, alloc a, bootstrap b, allgathers g, topo t, graphs h,
    connections c, rest r)

- 2.22 only: ``Init timings: rank R nranks N total T (kernels k, bootstrap b, allgathers g,
  topo t, graphs h, connections c, rest r)`` (no function name, no ``alloc``);
- before 2.22: no timings at all. What a log of such a release can still say is which ranks
  finished their init, from the ``Init COMPLETE`` lines (2.4 and later; 2.3 prints none):

  ====================  ==========================================================================
  2.4                   ``comm %p rank %d nranks %d cudaDev %d nvmlDev %d - Init COMPLETE``
  2.5 - 2.15            ``comm %p rank %d nranks %d cudaDev %d busId %x - Init COMPLETE``
  2.16 - 2.18.1         ``... cudaDev %d busId %lx commId 0x%llx - Init COMPLETE``
  2.18.3 - 2.20         ``... cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init COMPLETE``
  2.21 and later        the same led by the function (``ncclCommInitRank comm ...``); a split
                        communicator's line has ``parent %p [splitCount|childCount %d] color %d
                        key %d`` (2.21 also ``commId``) in place of ``commId``
  ====================  ==========================================================================

  No release prints a duration on its ``Init COMPLETE`` line.

Every figure is seconds with two decimals; ``rest`` is what the others leave of ``total`` (so the
phases and ``rest`` add up to ``total`` within the rounding), and may print ``-0.00``.

Lines are found by their needle anywhere in the line, so a launcher's or viewer's prefix
(``[1,0]<stdout>:``, ``0: ``, ``host: ``, a timestamp, `` | ts | ``) is skipped the way the
transport parser skips it (:mod:`.lines`); the host is read from NCCL's own ``host:pid:tid [dev]``
prefix when there is one. A line that holds a needle but not a shape above, or whose figures do
not hold together (a rank outside its communicator, a negative phase, phases that do not add up
to the total), is kept as a problem with its reason and never read as figures.

Pure, as the rest of ``gpufleet.parsing``: it reads the lines it is handed (text or bytes, e.g.
an open binary file, streamed line by line).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from gpufleet.parsing.nccl_log.lines import PREFIX_RE, clip

__all__ = [
    "COMPLETE_NEEDLE",
    "PHASES",
    "TIMINGS_NEEDLE",
    "InitComplete",
    "InitTimings",
    "PhaseFigure",
    "RankTiming",
    "read_init_timings",
]

# the phases in NCCL's print order; ``alloc`` from 2.23 on
PHASES = ("kernels", "alloc", "bootstrap", "allgathers", "topo", "graphs", "connections", "rest")
PHASES_2_22 = ("kernels", "bootstrap", "allgathers", "topo", "graphs", "connections", "rest")

TIMINGS_NEEDLE = "Init timings"
COMPLETE_NEEDLE = "- Init COMPLETE"

_NUM = r"(-?\d+\.\d+)"
# 2.23+: ``Init timings - <function>: rank ...``; 2.22: ``Init timings: rank ...``
TIMINGS_RE = re.compile(
    r"Init timings(?: - (nccl\w+))?: rank (\d+) nranks (\d+) total " + _NUM + r" \(("
    r"kernels " + _NUM + r", (?:alloc " + _NUM + r", )?bootstrap " + _NUM + r", "
    r"allgathers " + _NUM + r", topo " + _NUM + r", graphs " + _NUM + r", "
    r"connections " + _NUM + r", rest " + _NUM + r")\)"
)
COMPLETE_RE = re.compile(
    r"(?:(nccl\w+) )?comm (0x[0-9a-fA-F]+|\(nil\)) rank (\d+) nranks (\d+) cudaDev (\d+)"
    r"(?: nvmlDev (\d+))?(?: busId ([0-9a-fA-F]+))?"
    r"(?: parent (?:0x[0-9a-fA-F]+|\(nil\))(?: (?:splitCount|childCount) \d+)?"
    r" color -?\d+ key -?\d+)?"
    r"(?: commId 0x([0-9a-fA-F]+))? - Init COMPLETE"
)
# each of the nine printed figures is rounded to 0.005 s: what they may miss the total by
ADD_UP_TOLERANCE_S = 9 * 0.005 + 1e-9
MAX_RECORDS = 1 << 16  # per kind: memory stays bounded on a huge log
MAX_PROBLEMS = 64


@dataclass(frozen=True, slots=True)
class RankTiming:
    """One ``Init timings`` line: one rank's init of one communicator, in seconds."""

    rank: int
    nranks: int
    function: str | None  # ``ncclCommInitRank`` ...; None on 2.22 lines
    total: float
    phases: dict[str, float]  # in NCCL's order; no ``alloc`` on 2.22 lines
    host: str | None
    line: str

    @property
    def shape(self) -> str:
        return "2.22" if self.function is None else "2.23+"


@dataclass(frozen=True, slots=True)
class InitComplete:
    """One ``Init COMPLETE`` line: a rank finished its init (no duration in any release)."""

    rank: int
    nranks: int
    function: str | None
    cuda_dev: int
    nvml_dev: int | None
    bus_id: str | None
    comm_id: str | None
    host: str | None
    line: str


@dataclass(frozen=True, slots=True)
class PhaseFigure:
    """One phase over the ranks: the slowest (and where), the median, how many ranks."""

    phase: str
    max: float
    median: float
    ranks: int
    where: str  # ``rank 4 of 8 on host-a``: the slowest rank

    def as_dict(self) -> dict[str, object]:
        return {
            "max": self.max,
            "median": self.median,
            "ranks": self.ranks,
            "where": self.where,
        }


@dataclass(slots=True)
class InitTimings:
    """What a log says of its communicators' init."""

    timings: list[RankTiming] = field(default_factory=list)
    completes: list[InitComplete] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "why: line", never read as figures
    dropped: int = 0  # records past MAX_RECORDS (counted, not kept)

    @property
    def shapes(self) -> list[str]:
        return sorted({t.shape for t in self.timings})

    def summary(self) -> dict[str, PhaseFigure]:
        """Per phase (and ``total``), over every rank that printed it: max and median."""
        out: dict[str, PhaseFigure] = {}
        for phase in ("total", *PHASES):
            values = [
                (t.total if phase == "total" else t.phases[phase], t)
                for t in self.timings
                if phase == "total" or phase in t.phases
            ]
            if not values:
                continue
            slowest, who = max(values, key=lambda v: v[0])
            out[phase] = PhaseFigure(
                phase=phase,
                max=slowest,
                median=statistics.median(v for v, _ in values),
                ranks=len(values),
                where=_where(who),
            )
        return out

    def as_dict(self) -> dict[str, object]:
        """Plain JSON: the summary, the per-rank figures, the completes, the problems."""
        return {
            "shapes": self.shapes,
            "summary": {p: f.as_dict() for p, f in self.summary().items()},
            "ranks": [
                {
                    "rank": t.rank,
                    "nranks": t.nranks,
                    "function": t.function,
                    "host": t.host,
                    "total": t.total,
                    **t.phases,
                }
                for t in self.timings
            ],
            "init_complete": {
                "ranks": len(self.completes),
                "communicators": sorted(
                    {f"{c.function or 'comm'} nranks {c.nranks}" for c in self.completes}
                ),
            },
            "dropped": self.dropped,
            "problems": list(self.problems),
        }


def _where(t: RankTiming) -> str:
    return f"rank {t.rank} of {t.nranks}" + (f" on {t.host}" if t.host else "")


def _prefix(line: str, end: int) -> tuple[str | None, str]:
    """The host of NCCL's own ``host:pid:tid [dev]`` prefix before ``line[end]`` (without the
    quote a JSON log record leaves glued to it), and the whole prefix (empty without one)."""
    # the last prefix before the record (a glued line holds several)
    match = None
    for found in PREFIX_RE.finditer(line[:end].encode("utf-8", errors="replace")):
        match = found
    if match is None:
        return None, ""
    prefix = match.group(0).decode("utf-8", errors="replace").lstrip("\"'{")
    return match.group(1).decode("utf-8", errors="replace").lstrip("\"'{") or None, prefix


class _Reader:
    def __init__(self) -> None:
        self.out = InitTimings()
        self._seen: set[int] = set()

    def problem(self, why: str, line: str) -> None:
        if len(self.out.problems) < MAX_PROBLEMS:
            self.out.problems.append(f"{why}: {clip(line)}")

    def _new(self, prefix: str, text: str) -> bool:
        """False for a record already read: the same record of the same process and thread
        (NCCL's prefix), as a line pasted twice or a two-column copy shows it. A hash is kept,
        not the text, so memory stays small."""
        key = hash((prefix, text))
        if key in self._seen:
            return False
        if len(self._seen) < 4 * MAX_RECORDS:
            self._seen.add(key)
        return True

    def line(self, line: str) -> None:
        if TIMINGS_NEEDLE in line:
            self._timings(line)
        if COMPLETE_NEEDLE in line:
            self._complete(line)

    def _timings(self, line: str) -> None:
        found = 0
        for match in TIMINGS_RE.finditer(line):
            found += 1
            self._timing(line, match)
        if found < line.count(TIMINGS_NEEDLE):
            self.problem("an Init timings line of a shape not known (or cut off)", line)

    def _timing(self, line: str, match: re.Match[str]) -> None:
        function, rank, nranks = match.group(1), int(match.group(2)), int(match.group(3))
        total_s = float(match.group(4))
        numbers = list(match.groups()[5:])
        if function is None and numbers[1] is not None:
            self.problem("an Init timings line without its function but with alloc", line)
            return
        if function is not None and numbers[1] is None:
            self.problem("an Init timings line with its function but without alloc", line)
            return
        names = PHASES if function is not None else PHASES_2_22
        values = [float(n) for n in numbers if n is not None]
        phases = dict(zip(names, values, strict=True))
        why = _contradiction(rank, nranks, total_s, phases)
        if why:
            self.problem(why, line)
            return
        host, prefix = _prefix(line, match.start())
        if not self._new(prefix, match.group(0)):
            return
        if len(self.out.timings) >= MAX_RECORDS:
            self.out.dropped += 1
            return
        self.out.timings.append(
            RankTiming(rank, nranks, function, total_s, phases, host, clip(line))
        )

    def _complete(self, line: str) -> None:
        found = 0
        for match in COMPLETE_RE.finditer(line):
            found += 1
            rank, nranks = int(match.group(3)), int(match.group(4))
            if nranks == 0 or rank >= nranks:
                self.problem(f"rank {rank} in a communicator of {nranks}", line)
                continue
            host, prefix = _prefix(line, match.start())
            if not self._new(prefix, match.group(0)):
                continue
            if len(self.out.completes) >= MAX_RECORDS:
                self.out.dropped += 1
                continue
            nvml = match.group(6)
            self.out.completes.append(
                InitComplete(
                    rank=rank,
                    nranks=nranks,
                    function=match.group(1),
                    cuda_dev=int(match.group(5)),
                    nvml_dev=int(nvml) if nvml is not None else None,
                    bus_id=match.group(7),
                    comm_id=match.group(8),
                    host=host,
                    line=clip(line),
                )
            )
        if found < line.count(COMPLETE_NEEDLE):
            self.problem("an Init COMPLETE line of a shape not known (or cut off)", line)


def _contradiction(rank: int, nranks: int, total: float, phases: dict[str, float]) -> str | None:
    """Why these figures cannot be believed, or None."""
    if nranks == 0 or rank >= nranks:
        return f"rank {rank} in a communicator of {nranks}"
    figures = [total, *phases.values()]
    if not all(math.isfinite(v) for v in figures):
        return "a figure that is not a number"
    negative = [p for p, v in phases.items() if p != "rest" and v < 0]
    if total < 0 or negative:
        return f"a negative duration ({', '.join(negative) or 'total'})"
    if abs(sum(phases.values()) - total) > ADD_UP_TOLERANCE_S:
        return f"phases adding up to {sum(phases.values()):.2f} s, not the total {total:.2f} s"
    return None


def _as_text(lines: Iterable[str | bytes]) -> Iterator[str]:
    for line in lines:
        yield line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line


def read_init_timings(lines: Iterable[str | bytes]) -> InitTimings:
    """The ``Init timings`` and ``Init COMPLETE`` lines of an NCCL INFO log (streamed)."""
    reader = _Reader()
    for line in _as_text(lines):
        if "Init" in line:  # one cheap test for both needles
            reader.line(line.rstrip("\r\n"))
    return reader.out
