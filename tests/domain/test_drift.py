"""Drift: the rule (pure), its acceptance on simulated histories drawn with the sim's own
documented noise, and the sim's ``drift`` fault."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from gpufleet.backends.sim import nights, performance
from gpufleet.backends.sim.output import LinkModel, nccl_tests_text
from gpufleet.domain import drift
from gpufleet.domain.baselines import SMALL_MESSAGE_BYTES
from gpufleet.domain.drift import DriftError, check_drift, check_pool
from gpufleet.parsing.nccl_tests import parse_nccl_tests

GIB = 2**30
LARGE = GIB  # include/baselines.yaml large_message_bytes (1 GiB and up)
STEADY = [346.0, 345.1, 347.2, 346.3, 344.8, 346.9, 345.6, 346.4, 345.0, 347.0, 346.1, 345.5]


# --- the rule --------------------------------------------------------------------------------


def test_a_steady_night_is_no_drift():
    check = check_drift("busbw_gbps", STEADY, 345.7)
    assert check.judged and check.finding is None and check.nights == len(STEADY)


def test_a_night_far_below_its_history_drifts_with_the_figures():
    check = check_drift("busbw_gbps", STEADY, 331.2)
    f = check.finding
    assert f is not None and f.rule == "level" and f.direction == "below"
    assert f.median == statistics.median(STEADY) and f.nights == len(STEADY)
    assert f.limit == pytest.approx(f.median - drift.LEVEL_K * f.noise)
    assert f.latest < f.limit
    assert f.text() == (
        f"busbw 331.2 GB/s is {(f.median - 331.2) / f.median:.1%} below its 12-night median "
        f"{f.median:.1f} GB/s (noise ±{f.noise / f.median:.1%})"
    )
    assert f.to_dict()["text"] == f.text()


def test_a_better_night_is_never_drift():
    assert check_drift("busbw_gbps", STEADY, 380.0).finding is None
    assert check_drift("small_latency_us", [31.0] * 10, 20.0).finding is None


def test_latency_drifts_upwards():
    history = [31.0, 31.4, 30.8, 31.2, 30.9, 31.1, 31.3, 30.7, 31.0]
    f = check_drift("small_latency_us", history, 36.0).finding
    assert f is not None and f.direction == "above" and f.limit > f.median
    assert f.text().startswith("small-message latency 36.0 us is ")
    assert "above its 9-night median 31.0 us" in f.text()


def test_the_noise_floor_keeps_identical_nights_from_flagging_a_hair():
    history = [12000.0] * 14
    assert check_drift("read_mb_s", history, 11900.0).finding is None  # 0.8% < 4.5 x 1% floor
    assert check_drift("read_mb_s", history, 11000.0).finding is not None


def test_too_short_a_history_is_not_judged_and_says_so():
    check = check_drift("write_mb_s", STEADY[:6], 100.0)
    assert not check.judged and check.finding is None
    assert (
        check.note == "Lustre write: not judged for drift: 6 passing night(s) of history, 7 needed"
    )
    assert check_drift("write_mb_s", STEADY[:7], 100.0).judged


def test_only_the_last_fourteen_nights_make_the_median():
    old = [500.0] * 20  # a faster past, long gone
    check = check_drift("busbw_gbps", old + STEADY + STEADY[:2], 345.0)
    assert check.finding is None and check.nights == 14


def test_a_slow_decay_is_caught_by_the_trend_where_one_night_is_not_enough():
    """Four nights each a little lower: none alone crosses the level limit, their mean does."""
    history = STEADY + STEADY[:6]
    median = statistics.median(history)
    noise = drift.noise_of(history, drift.METRICS["busbw_gbps"].floor)
    dip = median - 2.5 * noise  # within the level limit (4.5 noises); four average past 2
    check = check_drift("busbw_gbps", [*history, dip, dip, dip], dip)
    assert check.finding is not None and check.finding.rule == "trend"
    assert "the last 4 nights average below" in check.finding.text()
    assert check_drift("busbw_gbps", [*history, median, dip, dip], dip).finding is None


@pytest.mark.parametrize(
    "metric,history,latest,match",
    [
        ("busbw", STEADY, 340.0, "drift metric 'busbw' is not one of busbw_gbps"),
        ("busbw_gbps", STEADY, float("nan"), "tonight's busbw_gbps nan is not a finite"),
        ("busbw_gbps", STEADY, -3.0, "tonight's busbw_gbps -3.0 is not a finite figure above 0"),
        ("busbw_gbps", STEADY, 0, "not a finite figure above 0"),
        ("busbw_gbps", STEADY, "340", "tonight's busbw_gbps '340' is not a number"),
        ("busbw_gbps", STEADY, True, "is not a number"),
        ("busbw_gbps", [*STEADY, math.inf], 340.0, "a past busbw_gbps inf is not a finite"),
        ("busbw_gbps", [*STEADY, None], 340.0, "a past busbw_gbps None is not a number"),
        ("busbw_gbps", "346,345", 340.0, "history '346,345' is not a list of figures"),
    ],
)
def test_bad_input_is_refused_naming_it(metric, history, latest, match):
    with pytest.raises(DriftError, match=match):
        check_drift(metric, history, latest)


def test_a_pool_is_judged_on_the_metrics_it_measured():
    checks = check_pool({"busbw_gbps": STEADY}, {"busbw_gbps": 331.0, "read_mb_s": None})
    assert [c.metric for c in checks] == ["busbw_gbps"] and checks[0].finding
    with pytest.raises(DriftError, match="'iops'"):
        check_pool({}, {"iops": 3.0})


# --- acceptance: simulated histories with the sim's own noise ----------------------------------

SEEDS = range(5)
POOLS = 20  # per seed; the first half drift from DRIFT_START (+ pool index % 10)
NIGHTS = 60
DRIFT_START = 30
DRIFT_PERCENT = 1.0
EXPECTED_MIB_S = 12_000.0  # a Lustre filesystem's tier x capacity, MiB/s
FIO_CLIENTS = 4


def pool_night(rng, healthy: LinkModel, pairs: int, decay: float) -> dict[str, float]:
    """One pool's figures for one night, drawn through the sim's own functions and model, and
    reduced as the validations reduce them: bus bandwidth per pair is the mean over the sizes
    of 1 GiB and up (the lowest pair is the pool's figure), latency per pair the median time up
    to 64 KiB (the pool's: the median pair), Lustre the sum of the fio clients."""
    fabric, storage = performance.fabric_model(), performance.storage_model()
    busbw, latency = [], []
    for _ in range(pairs):
        link = nights.pair_link(healthy, fabric.noise, rng, decay)
        rows = nights.pair_rows(link, fabric.noise, rng)
        busbw.append(statistics.fmean(max(c[2] for c in cells) for s, cells in rows if s >= LARGE))
        latency.append(
            statistics.median(
                min(c[0] for c in cells) for s, cells in rows if s <= SMALL_MESSAGE_BYTES
            )
        )
    clients = nights.lustre_clients(
        EXPECTED_MIB_S, storage.filesystems[0], storage.noise, rng, FIO_CLIENTS
    )
    return {
        "busbw_gbps": min(busbw),
        "small_latency_us": statistics.median(latency),
        "read_mb_s": sum(r for r, _ in clients) * 2**20 / 1e6,
        "write_mb_s": sum(w for _, w in clients) * 2**20 / 1e6,
    }


def simulate(seed: int) -> tuple[int, int, dict[int, int | None]]:
    """(flagged fault-free pool-nights, judged fault-free pool-nights, per drifting pool the
    drift night it was first flagged on, 1 = the first night of drift; None = never)."""
    rng = random.Random(seed)
    shapes = performance.fabric_model().rdma
    flagged = judged = 0
    caught: dict[int, int | None] = {}
    for i in range(POOLS):
        shape = shapes[i % len(shapes)]
        healthy = LinkModel(shape.busbw_gbps, shape.latency_us)
        start = DRIFT_START + i % 10 if i < POOLS // 2 else None
        if start is not None:
            caught[i] = None
        history: dict[str, list[float]] = {m: [] for m in drift.METRICS}
        for night in range(NIGHTS):
            drifted = night - start + 1 if start is not None and night >= start else 0
            figures = pool_night(
                rng, healthy, 2 + i % 4, nights.drift_factor(DRIFT_PERCENT, drifted)
            )
            checks = check_pool(history, figures)
            hit = any(c.finding for c in checks)
            if not drifted and all(c.judged for c in checks):
                judged += 1
                flagged += hit
            if drifted and hit and caught[i] is None:
                caught[i] = drifted
            for name, value in figures.items():
                history[name].append(value)
    return flagged, judged, caught


def test_drift_of_one_percent_a_night_is_caught_within_five_nights_and_noise_rarely_flags():
    """Issue 11: 20 pools x 60 nights x 5 seeds with the sim's documented noise: every
    ``drift:1`` pool is flagged within 5 nights of its start, and at most 1% of fault-free
    pool-nights are flagged."""
    flagged = judged = 0
    late = []
    for seed in SEEDS:
        f, j, caught = simulate(seed)
        flagged += f
        judged += j
        late += [(seed, pool, night) for pool, night in caught.items() if not night or night > 5]
    assert not late, f"drifting pools not flagged within 5 nights (seed, pool, night): {late}"
    assert judged > 3000
    assert flagged / judged <= 0.01, f"{flagged} of {judged} fault-free pool-nights flagged"


def test_the_acceptance_reduces_the_sims_figures_as_the_parser_and_verdict_do():
    """The figures above are the ones the sim prints: the same draws, printed as nccl-tests
    text and read back by the real parser, give the same pair bandwidth and latency."""
    noise = performance.fabric_model().noise
    link = nights.pair_link(LinkModel(355.0, 31.0), noise, random.Random(7))
    rows = nights.pair_rows(link, noise, random.Random(8))
    text = nccl_tests_text(
        collective="all_reduce",
        hosts=["a", "b"],
        gpus_per_node=8,
        gpu_model="H200",
        link=link,
        row_jitter=noise.row_jitter,
        seed=0,
    )
    # nccl_tests_text seeds its own Random: draw the rows again from that stream
    rng = random.Random(0)
    rng.randrange(9000)  # the pid it draws first
    rows = nights.pair_rows(link, noise, rng)
    run = parse_nccl_tests(text).runs[0]
    busbw = statistics.fmean(max(c[2] for c in cells) for s, cells in rows if s >= LARGE)
    assert statistics.fmean(run.busbw_at_or_above(LARGE)) == pytest.approx(busbw, abs=0.01)
    small = [t for _, t in run.latency_up_to(SMALL_MESSAGE_BYTES)]
    expected = [min(c[0] for c in cells) for s, cells in rows if s <= SMALL_MESSAGE_BYTES]
    assert statistics.median(small) == pytest.approx(statistics.median(expected), abs=0.01)


def test_the_sims_noise_is_the_one_its_model_documents():
    """Pairs drawn through ``pair_link`` scatter as include/sim/fabric.yaml says."""
    noise = performance.fabric_model().noise
    rng = random.Random(3)
    draws = [nights.pair_link(LinkModel(100.0, 30.0), noise, rng).busbw_gbps for _ in range(4000)]
    assert statistics.stdev(draws) / 100 == pytest.approx(noise.busbw_sd, rel=0.1)
    assert max(draws) <= 100 * (1 + nights.CUT_SD * noise.busbw_sd)


def test_drift_compounds_per_night():
    assert nights.drift_factor(1.0, 0) == 1.0
    assert nights.drift_factor(1.0, 5) == pytest.approx(0.99**5)
    with pytest.raises(ValueError, match="not a drift"):
        nights.drift_factor(100.0, 1)


def test_a_good_night_after_one_awful_night_is_no_trend():
    history = STEADY + STEADY[:6]
    assert check_drift("busbw_gbps", history, 300.0).finding.rule == "level"
    assert check_drift("busbw_gbps", [*history, 300.0], 346.0).finding is None


# --- the sim's drift fault -------------------------------------------------------------------


def test_the_sims_drift_fault_compounds_night_after_night(fleet_state):
    """``drift:10`` on a sim pool: each validation run (a night; its rounds are one) reports
    10% less bus bandwidth than the one before, compounding, from the first night after the
    fault was put in force. Lustre is untouched."""
    from gpufleet.backends.sim.state import SimState
    from tests.support.fleet import validate

    before = validate("a3u-sim", "h200-b", run_id="night-0")
    SimState().inject("a3u-sim", "h200-b", "drift:10")
    after = [validate("a3u-sim", "h200-b", run_id=f"night-{n}") for n in (1, 2, 3)]
    healthy = before["busbw_gbps"]
    for n, summary in enumerate(after, 1):
        assert summary["busbw_gbps"] == pytest.approx(healthy * 0.9**n, rel=0.04), n
        assert summary["storage"]["read_mb_s"] == pytest.approx(
            before["storage"]["read_mb_s"], rel=0.08
        )
    assert after[0]["passed"]  # 10% down still passes the 90% threshold: only drift tells
    state = SimState()
    with state.read() as conn:
        assert state.nights_since(conn, "a3u-sim", "h200-b", None) == 4
