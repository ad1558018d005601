"""Drift: a pool's figures moving away from its own recent history while they still pass.

Design: docs/design/workflows.md.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

WINDOW = 14  # passing nights of history: their median
NOISE_WINDOW = 28  # passing nights of history: their noise (when there are that many)
MIN_NIGHTS = 7  # fewer: not judged
LEVEL_K = 4.5  # one night this many noises beyond the median
TREND_NIGHTS = 4  # ... or the mean of this many nights, tonight included,
TREND_K = 4.0  # this many standard errors (noise / sqrt(TREND_NIGHTS)) beyond it
QN_TO_SD = 2.2219  # Qn of normal noise times this is its standard deviation


class DriftError(ValueError):
    """A figure or a metric the drift rule cannot judge (the message names the value)."""


@dataclass(frozen=True)
class Metric:
    """A pool figure drift is judged on."""

    name: str  # the column or details key it is recorded under
    label: str  # in words
    unit: str
    lower_is_worse: bool
    floor: float  # the smallest noise, as a share of the median


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("busbw_gbps", "busbw", "GB/s", True, 0.005),
        Metric("small_latency_us", "small-message latency", "us", False, 0.02),
        Metric("read_mb_s", "Lustre read", "MB/s", True, 0.01),
        Metric("write_mb_s", "Lustre write", "MB/s", True, 0.01),
    )
}


def metric(name: object) -> Metric:
    """The metric called ``name``; DriftError naming the known ones otherwise."""
    if isinstance(name, str) and name in METRICS:
        return METRICS[name]
    raise DriftError(f"drift metric {name!r} is not one of {', '.join(METRICS)}")


@dataclass(frozen=True)
class DriftFinding:
    """One metric of one pool drifting, with the figures that show it."""

    metric: str
    latest: float  # tonight's figure
    median: float  # of the history
    noise: float  # the history's robust spread, in the metric's unit
    limit: float  # the limit crossed: median -/+ LEVEL_K noises (level), or TREND_K standard
    # errors (trend: the recent nights' mean crossed it)
    nights: int  # how many nights of history were used
    direction: str  # below | above (the bad side)
    rule: str = "level"  # level: tonight beyond the limit; trend: the recent nights' mean

    def text(self) -> str:
        """``busbw 331.2 GB/s is 4.3% below its 14-night median 346.0 GB/s (noise ±1.1%)``."""
        m = metric(self.metric)
        move = abs(self.latest - self.median) / self.median
        line = (
            f"{m.label} {self.latest:,.1f} {m.unit} is {move:.1%} {self.direction} its "
            f"{self.nights}-night median {self.median:,.1f} {m.unit} "
            f"(noise ±{self.noise / self.median:.1%})"
        )
        if self.rule == "trend":
            line += f"; the last {TREND_NIGHTS} nights average {self.direction} {self.limit:,.1f}"
        return line

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (a ledger ``details`` entry, an XCom)."""
        return {**asdict(self), "text": self.text()}


@dataclass(frozen=True)
class DriftCheck:
    """The outcome for one metric: a finding, none (judged, steady), or not judged (``note``
    says why)."""

    metric: str
    nights: int
    finding: DriftFinding | None = None
    note: str | None = None  # why the metric was not judged

    @property
    def judged(self) -> bool:
        return self.note is None


def _figure(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DriftError(f"{what} {value!r} is not a number")
    if not math.isfinite(value) or value <= 0:
        raise DriftError(f"{what} {value!r} is not a finite figure above 0")
    return float(value)


def noise_of(history: Sequence[float], floor: float) -> float:
    """The robust spread of ``history``, at least ``floor`` x its median: Rousseeuw and
    Croux's Qn (2.2219 x the k-th smallest distance between two nights, k about a quarter of
    the pairs, with their small-sample factor), which estimates the standard deviation of
    normal noise as the MAD does but wobbles far less on two weeks of nights, and like the
    MAD ignores up to half of them being odd."""
    values = sorted(history)
    n = len(values)
    median = statistics.median(values)
    if n < 2:
        return floor * median
    h = n // 2 + 1
    k = h * (h - 1) // 2
    distances = sorted(b - a for a, b in itertools.combinations(values, 2))
    small = n / (n + 1.4) if n % 2 else n / (n + 3.8)
    if n <= 9:  # Croux and Rousseeuw (1992), finite-sample factors for small n
        small = (0.399, 0.994, 0.512, 0.844, 0.611, 0.857, 0.669, 0.872)[n - 2]
    return max(QN_TO_SD * small * distances[k - 1], floor * median)


@dataclass(frozen=True)
class _Baseline:
    """A history's median and noise, and the metric's bad direction (-1: lower is worse)."""

    median: float
    noise: float
    sign: float
    nights: int

    def limit(self, k: float) -> float:
        return self.median + self.sign * k * self.noise

    def beyond(self, value: float, k: float) -> bool:
        """``value`` is more than ``k`` noises past the median, on the bad side."""
        return self.sign * (value - self.limit(k)) > 0


def _baseline(m: Metric, history: Sequence[float], longer: Sequence[float] = ()) -> _Baseline:
    """The median of ``history``; the noise of ``longer`` (up to ``NOISE_WINDOW`` nights
    ending with ``history``) when it is longer."""
    spread = longer if len(longer) > len(history) else history
    return _Baseline(
        statistics.median(history),
        noise_of(spread, m.floor),
        -1.0 if m.lower_is_worse else 1.0,
        len(history),
    )


def check_drift(name: str, history: Sequence[float], latest: float) -> DriftCheck:
    """Judge tonight's figure ``latest`` of metric ``name`` against ``history``: the pool's
    passing nights before tonight, oldest first (only the last ``WINDOW`` count).

    DriftError for an unknown metric or a figure that is not finite and above 0."""
    m = metric(name)
    tonight = _figure(latest, f"tonight's {m.name}")
    if isinstance(history, str | bytes) or not isinstance(history, Sequence):
        raise DriftError(f"the {m.name} history {history!r} is not a list of figures")
    # only the nights any rule reads: the noise window before the trend's recent nights
    past = [_figure(v, f"a past {m.name}") for v in history[-(NOISE_WINDOW + TREND_NIGHTS) :]]
    window = past[-WINDOW:]
    if len(window) < MIN_NIGHTS:
        return DriftCheck(
            m.name,
            len(window),
            note=(
                f"{m.label}: not judged for drift: {len(window)} passing night(s) of history, "
                f"{MIN_NIGHTS} needed"
            ),
        )
    level = _baseline(m, window, past[-NOISE_WINDOW:])
    rule, base = None, level
    if level.beyond(tonight, LEVEL_K):
        rule = "level"
    else:  # the trend rule judges the recent nights against the history before them
        recent = [*past[len(past) - (TREND_NIGHTS - 1) :], tonight]
        before = past[: len(past) - (TREND_NIGHTS - 1)][-WINDOW:]
        if len(before) >= MIN_NIGHTS:
            head = past[: len(past) - (TREND_NIGHTS - 1)]
            trend = _baseline(m, before, head[-NOISE_WINDOW:])
            k = TREND_K / math.sqrt(TREND_NIGHTS)
            if trend.beyond(statistics.fmean(recent), k) and trend.beyond(tonight, k):
                rule, base = "trend", trend
    k = LEVEL_K if rule == "level" else TREND_K / math.sqrt(TREND_NIGHTS)
    if rule is None:
        return DriftCheck(m.name, len(window))
    finding = DriftFinding(
        metric=m.name,
        latest=tonight,
        median=base.median,
        noise=base.noise,
        limit=base.limit(k),
        nights=base.nights,
        direction="below" if m.lower_is_worse else "above",
        rule=rule,
    )
    return DriftCheck(m.name, len(window), finding)


def check_pool(
    histories: Mapping[str, Sequence[float]], tonight: Mapping[str, float | None]
) -> list[DriftCheck]:
    """Every metric of ``tonight`` that has a figure (None: the metric was not measured),
    judged against its history (``histories[name]``; missing: no history)."""
    for name in (*tonight, *histories):
        metric(name)
    return [
        check_drift(name, histories.get(name, ()), value)
        for name, value in tonight.items()
        if value is not None
    ]
