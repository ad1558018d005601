"""Where a night's GPU time went, for people (the pool page) and for Prometheus (``/metrics``
histograms per kind and stage), from the stages the validations keep in their rows (issue 35)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufleet.config.catalog import load_catalog
from gpufleet.store import Ledger
from tests.support.prometheus import families_written_back

CLUSTER, POOL = "a3u-sim", "h200-a"


def record(ledger: Ledger, run_id: str = "night-1") -> None:
    now = datetime.now(UTC)
    pair = {
        "scheduled": 1.0,
        "image_pull": 0.0,
        "container_start": 1.0,
        "gang": 0.3,
        "nccl_init": 2.0,
        "sweep": 9.0,
        "teardown": 1.0,
    }
    rows = {
        "fabric": {
            "gpu_minutes": 6.0, "cost_nodes": 6,
            "stages": {"gpu_minutes": {"sweep": 3.6, "nccl_init": 0.8, "image_pull": 0.0,
                                       "container_start": 0.4, "gang": 0.12, "teardown": 0.4,
                                       "bogus": float("nan")},
                       "pairs": [{"round": 0, "nodes": ["a", "b"], "stages": pair}] * 3},
        },
        "health": {
            "gpu_minutes": 24.0, "cost_nodes": 6,
            "nodes": {f"n{i}": {"level": 1, "stages": {"diag_r1": 33.0, "image_pull": 0.0}}
                      for i in range(6)},
            "stages": {"gpu_minutes": {"diag_r1": 22.0, "container_start": 2.0}},
        },
        "storage": {
            "gpu_minutes": 3.0, "cost_nodes": 6,
            "stages": {"gpu_minutes": {"io": 3.0}, "nodes": {"n0": {"io": 22.5, "teardown": 0.0}}},
        },
    }  # fmt: skip
    for kind, details in rows.items():
        ledger.record_validation(
            run_id=run_id, cluster=CLUSTER, pool=POOL, kind=kind, passed=True,
            started_at=now, details=details,
        )  # fmt: skip


def test_the_pool_page_shows_where_the_last_night_went(airflow_db, fleet_state):
    from gpufleet.airflow.ui.pages import pool_page
    from gpufleet.services.views.pool import pool_view

    ledger = Ledger()
    record(ledger)
    view = pool_view(load_catalog(), ledger, CLUSTER, POOL)
    per_node = {s["stage"]: s["per_node"] for s in view["stages"]}
    # each row's GPU-minutes per stage over the nodes its cost is counted on, added up
    assert per_node == pytest.approx(
        {"image_pull": 0.0, "container_start": 0.4 / 6 + 2.0 / 6, "gang": 0.02,
         "nccl_init": 0.8 / 6, "sweep": 0.6, "diag_r1": 22.0 / 6, "io": 0.5,
         "teardown": 0.4 / 6}, abs=1e-3,
    )  # fmt: skip
    assert list(per_node)[:3] == ["image_pull", "container_start", "gang"]  # life's order
    assert sum(s["share"] for s in view["stages"]) == pytest.approx(1.0)
    assert view["stages_launch_share"] == pytest.approx(
        (0.4 / 6 + 2.0 / 6 + 0.02 + 0.4 / 6) / sum(per_node.values()), abs=1e-3
    )
    page = pool_page(view)
    assert '<tr data-stage="diag_r1"><td>diag_r1</td><td>3.667</td>' in page
    assert view["nights"][-1]["stages"] == {k: round(v, 3) for k, v in per_node.items()}


def test_metrics_have_a_histogram_per_kind_and_stage(airflow_db, fleet_state):
    from gpufleet.airflow.ui.metrics import exposition

    ledger = Ledger()
    record(ledger)
    text = exposition(load_catalog(), ledger, datetime.now(UTC))
    families = families_written_back(text)  # the format, byte for byte
    (stage,) = [f for f in families if f.name == "gpufleet_validation_stage_seconds"]
    assert stage.type == "histogram"
    count = {
        (s.labels["kind"], s.labels["stage"]): s.value
        for s in stage.samples
        if s.name.endswith("_count")
    }
    assert count[("fabric", "gang")] == 3 and count[("health", "diag_r1")] == 6
    assert count[("storage", "io")] == 1
    buckets = {
        s.labels["le"]: s.value
        for s in stage.samples
        if s.name.endswith("_bucket") and s.labels["stage"] == "diag_r1"
    }
    assert buckets["30.0"] == 0 and buckets["60.0"] == 6 and buckets["+Inf"] == 6


def test_the_runs_cost_lines_add_its_stages_per_node_and_name_the_launchs_share(fleet_state):
    """``make run`` and ``bench.nightly_scale`` print these: the night's cost per node, each
    stage's GPU-minutes over the nodes the pool's validations covered, and the launch's part."""
    from gpufleet.services.views.cost import cost_breakdown

    ledger = Ledger()
    record(ledger)
    rows = ledger.validations_for_run("night-1")
    for row in rows:  # the per-node figure as each service writes it
        row["details"]["gpu_minutes_per_node"] = row["details"]["gpu_minutes"] / 6
    cost, stages, launch = cost_breakdown(rows)
    assert cost == (
        "Validation cost: 5.5 GPU-minutes per node per night (33.0 GPU-minutes over 6 nodes)"
    )
    # over 6 nodes: sweep 3.6, diag 22, io 3; launch: start 0.4 + 2.0, gang 0.12, teardown 0.4
    assert stages.startswith("| GPU-minutes per node by stage (6 nodes): ")
    assert "diag_r1 3.67" in stages and "sweep 0.60" in stages and "io 0.50" in stages
    assert "bogus" not in stages  # a stage that is no number is left out
    assert launch == (
        "| launch (image_pull, container_start, gang, teardown): 0.49 of 5.39 GPU-minutes per node"
    )
    assert cost_breakdown([]) == []  # nothing recorded: nothing printed


def _tier_row(pool, kind, passed, minutes, nodes, checks=None, **details):
    cluster, name = pool.split("/")
    details = {"stages": {"gpu_minutes": minutes}, "cost_nodes": nodes, **details}
    if checks is not None:
        details["nodes"] = {
            f"{name}-{i}": {"level": level, "stages": {f"diag_r{level}": s} if s else {}}
            for i, (level, s) in enumerate(checks)
        }
    return {"cluster": cluster, "pool": name, "kind": kind, "passed": passed, "details": details}


def test_the_nightly_tier_is_level_1_and_the_full_test_at_their_share_plus_what_ran(
    tmp_path, full_test_every_night
):
    """Over the pools that passed: fabric and the pools' own Lustre checks as measured tonight;
    each filesystem's last full test (tonight's, whoever ran it, or an earlier night's) once in
    its ``full_test_every_nights`` over the nodes of its pools; level 1 at the mean measured
    check (theirs only) on the pool's GPUs, once in its ``level1_every_nights``. The failed
    pools, the higher diag levels and a pool the catalog lost are said beside it."""
    from gpufleet.services.views.cost import cost_breakdown, nightly_tier

    text = (full_test_every_night / "sim.yaml").read_text()  # every filesystem at 1
    fsx = "mount_path: /fsx\n            full_test_every_nights: 1"
    assert text.count(fsx) == 1
    (tmp_path / "sim.yaml").write_text(text.replace(fsx, fsx[:-1] + "4"))
    catalog = load_catalog(tmp_path)  # the sim fleet: 8 GPUs a node, level 1 once in 4 nights
    assert catalog.pool("a3u-sim", "h200-a").pool.level1_every_nights == 4
    a3u = {"scope": "filesystem", "filesystem": "lustre-a3u"}
    rows = [
        _tier_row("a3u-sim/h200-a", "fabric", True, {"sweep": 4.0, "container_start": 2.0}, 4),
        _tier_row("a3u-sim/h200-a", "storage", True, {"io": 0.4}, 4, scope="pool"),
        _tier_row(
            "a3u-sim/h200-a",
            "health",
            True,
            {"diag_r1": 8.8, "diag_r3": 4.5},
            4,
            [(1, 30.0), (1, 36.0), (0, None), (3, 900.0)],
        ),
        _tier_row("p5-sim/h100-a", "fabric", True, {"sweep": 5.0}, 5),
        _tier_row("p5-sim/h100-a", "health", True, {}, 5, [(0, None)] * 5),  # all rested
        _tier_row("a3u-sim/h200-b", "fabric", False, {"sweep": 40.0}, 4),
        _tier_row("a3u-sim/h200-b", "storage", True, {"io": 7.0}, 4, **a3u),  # the full test
        _tier_row("a3u-sim/h200-b", "health", True, {"diag_r1": 8.8}, 4, [(1, 60.0)]),
        _tier_row("gone-sim/old", "fabric", True, {"sweep": 1.0}, 2),
    ]
    # fsx-p5's full test ran an earlier night (full_test.last_full_test finds it)
    earlier = {("p5-sim", "fsx-p5"): _tier_row("p5-sim/h100-a", "storage", True, {"io": 5.0}, 5)}
    tier = nightly_tier(rows, catalog, earlier)
    assert tier["check_s"] == 33.0 and tier["checks"] == 2  # the failed pool's 60 s left out
    assert (tier["nodes"], tier["pools"], tier["every"]) == (9, 2, [4])
    # lustre-a3u's 7.0 over its 10 nodes (h200-a 6, h200-b 4; h200-c is planned) every night:
    # 0.7 a node on h200-a's 4; fsx-p5's 5.0 once in 4 nights over its 5 nodes: 0.25 on 5
    lustre = (0.4 + 4 * 0.7 + 5 * 0.25) / 9
    assert tier["parts"] == pytest.approx(
        {"level1": 33.0 * 8 / 60 / 4, "fabric": 11.0 / 9, "lustre": lustre}
    )
    assert tier["per_node"] == pytest.approx(1.1 + 11.0 / 9 + lustre)
    assert tier["levels"] == pytest.approx({"diag_r3": 4.5 / 9})
    assert tier["failed"] == {"a3u-sim/h200-b": {"per_node": pytest.approx(13.95), "nodes": 4}}
    assert tier["unknown"] == ["gone-sim/old"]
    # without the earlier night's full test, fsx-p5's share is unknown: none counted
    assert nightly_tier(rows, catalog)["parts"]["lustre"] == pytest.approx((0.4 + 2.8) / 9)
    lines = cost_breakdown(rows, catalog)
    assert lines[-2] == (
        "| nightly tier: 2.68 GPU-minutes per node per night over 9 nodes of the 2 pools that "
        "passed: level 1 1.10 (dcgmi diag -r 1 at 33.0 s, the mean of 2 checks tonight, once in "
        "4 nights), fabric 1.22, Lustre 0.36"
    )
    assert lines[-1] == (
        "| beyond the tier tonight: diag_r3 0.50; a3u-sim/h200-b failed (13.95 per node over "
        "4 nodes); gone-sim/old (not in the catalog)"
    )
    assert len(cost_breakdown(rows)) == 3  # without the catalog: no tier


def test_no_nightly_tier_without_a_passing_pool_or_a_level_1_check():
    from gpufleet.services.views.cost import cost_breakdown, nightly_tier

    catalog = load_catalog()
    rested = [
        _tier_row("a3u-sim/h200-a", "fabric", True, {"sweep": 4.0}, 4),
        _tier_row("a3u-sim/h200-a", "health", True, {}, 4, [(0, None)] * 4),
    ]
    assert nightly_tier(rested, catalog) is None
    failed = [_tier_row("a3u-sim/h200-a", "health", False, {"diag_r1": 4.4}, 4, [(1, 33.0)])]
    assert nightly_tier(failed, catalog) is None
    assert cost_breakdown(rested, catalog)[-1] == (
        "| nightly tier: not measured tonight (no pool passed with a level-1 check)"
    )


@pytest.mark.parametrize(
    "hostile",
    [
        {"details": None},
        {"details": ["not", "a", "mapping"]},
        {"details": {"stages": "io", "cost_nodes": True, "nodes": ["a"]}},
        {"details": {"stages": {"gpu_minutes": {"io": -3.0, "sweep": float("nan")}}}},
        {"details": {"cost_nodes": -4, "nodes": {"x": {"level": 1, "stages": {"diag_r1": True}}}}},
        {"details": {"nodes": {"x": {"level": 1, "stages": {"diag_r1": float("inf")}}}}},
        {"details": {"nodes": {"x": "level 1"}, "scope": ["filesystem"]}},
    ],
)
def test_the_nightly_tier_reads_past_hostile_rows(hostile):
    """A row whose details are not what the services write (a hostile or corrupt ledger) is
    read as recording nothing: no error, no figure from it."""
    from gpufleet.services.views.cost import cost_breakdown, nightly_tier

    catalog = load_catalog()
    good = [
        _tier_row("a3u-sim/h200-a", "fabric", True, {"sweep": 4.0}, 4),
        _tier_row("a3u-sim/h200-a", "health", True, {"diag_r1": 4.4}, 4, [(1, 33.0)]),
    ]
    tier = nightly_tier(good, catalog)
    for kind in ("fabric", "storage", "health"):
        bad = {"cluster": "a3u-sim", "pool": "h200-c", "kind": kind, "passed": True, **hostile}
        assert nightly_tier([*good, bad], catalog) == tier
        cost_breakdown([*good, bad], catalog)  # no error either


def test_the_nightly_report_has_the_tier_as_a_section(fleet_state, full_test_every_night):
    """The report the nightly writes (and the UI's run tab renders) says the tier too, in its
    Markdown and its HTML; a run whose rows record no stages has no such section."""
    from gpufleet.domain.verdicts import latest_per_check
    from gpufleet.services.views.nightly_report import TIER_HEAD, render_report

    ledger = Ledger()
    record(ledger)
    rows = latest_per_check(ledger.validations_for_run("night-1"))
    md, page = render_report(ledger, load_catalog(), "night-1", rows)
    # h200-a, 6 nodes: level 1 33 s x 8 GPUs once in 4 nights 1.10; fabric 5.32 / 6; Lustre: its
    # full test (a row without scope) 3.0 over the filesystem's 10 nodes
    line = (
        "nightly tier: 2.29 GPU-minutes per node per night over 6 nodes of the 1 pools that "
        "passed: level 1 1.10 (dcgmi diag -r 1 at 33.0 s, the mean of 6 checks tonight, once in "
        "4 nights), fabric 0.89, Lustre 0.30"
    )
    assert f"## {TIER_HEAD}\n\n- {line}\n" in md
    assert '<section id="tier">' in page and line in page
    ledger.record_validation(
        run_id="night-2", cluster=CLUSTER, pool=POOL, kind="fabric", passed=True,
        started_at=datetime.now(UTC), details={},
    )  # fmt: skip
    md, page = render_report(
        ledger, load_catalog(), "night-2", ledger.validations_for_run("night-2")
    )
    assert TIER_HEAD not in md and 'id="tier"' not in page
