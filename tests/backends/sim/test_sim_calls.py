"""The sim's count of the API calls it answers (``backends.sim.calls``, issue 18: the API calls
per second per cluster in ``bench/nightly_scale.py``): one whole line per call, in the
cluster's own log, from every process at once, and nothing without the variable."""

from __future__ import annotations

import multiprocessing

import pytest

from gpufleet.backends import cloud_backend, cluster_backend
from gpufleet.backends.sim import calls
from gpufleet.config.catalog import load_catalog
from tests.support.fleet import frozen_sim_clock

CLUSTER = "a3u-sim"  # preexisting in include/fleet/sim.yaml
OTHER = "p5-sim"


@pytest.fixture(autouse=True)
def _frozen_clock(fleet_state):
    frozen_sim_clock()


def test_each_call_a_sim_backend_answers_is_one_line_in_its_clusters_log(tmp_path, monkeypatch):
    catalog = load_catalog()
    monkeypatch.setenv(calls.CALL_LOG_ENV, str(tmp_path))
    kube = cluster_backend(catalog.cluster(CLUSTER))
    kube.list_nodes()
    kube.server_version()
    pool = next(ref.pool.name for ref in catalog.pools() if ref.cluster.name == OTHER)
    cloud_backend(catalog.cluster(OTHER)).get_node_pool(pool)
    logged = calls.read(tmp_path)
    assert [what for _, what in logged[CLUSTER]] == ["list nodes", "get version"]
    assert [what for _, what in logged[OTHER]] == ["get node pool"]
    assert all(at > 0 for at, _ in logged[CLUSTER])


def test_a_folder_not_made_yet_is_made(tmp_path, monkeypatch):
    monkeypatch.setenv(calls.CALL_LOG_ENV, str(tmp_path / "bench" / "calls"))
    cluster_backend(load_catalog().cluster(CLUSTER)).list_nodes()
    assert [what for _, what in calls.read(tmp_path / "bench" / "calls")[CLUSTER]] == ["list nodes"]


def test_without_the_variable_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(calls.CALL_LOG_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    cluster_backend(load_catalog().cluster(CLUSTER)).list_nodes()
    assert list(tmp_path.rglob(f"*{calls.SUFFIX}")) == []


def _calls(n: int) -> None:
    for i in range(n):
        calls.record(CLUSTER, f"call {i} " + "x" * 200)


def test_processes_writing_at_once_leave_whole_lines(tmp_path, monkeypatch):
    """Celery's task processes, each appending: every line whole, none lost."""
    monkeypatch.setenv(calls.CALL_LOG_ENV, str(tmp_path))
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_calls, args=(300,)) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert [w.exitcode for w in workers] == [0] * 4
    logged = calls.read(tmp_path)[CLUSTER]
    assert len(logged) == 1200
    assert sorted(what for _, what in logged) == sorted(
        f"call {i} " + "x" * 200 for i in range(300) for _ in range(4)
    )


def test_rates_per_cluster_over_its_span_and_its_busiest_window(tmp_path):
    (tmp_path / f"a{calls.SUFFIX}").write_text(
        "".join(f"{t}\tlist pods\n" for t in [100.0, 101.0, 102.0, 103.0, 130.0, 160.0])
    )
    (tmp_path / f"b{calls.SUFFIX}").write_text("500.5\tget cluster\n")
    got = calls.rates(calls.read(tmp_path), window=10)
    assert got["a"] == calls.CallRate(calls=6, span_s=60.0, per_s=0.1, peak_per_s=0.4)
    assert got["b"] == calls.CallRate(calls=1, span_s=0.0, per_s=0.0, peak_per_s=0.1)
    # a call exactly one window after the first starts a new window
    assert calls.rates(calls.read(tmp_path), window=3)["a"].peak_per_s == pytest.approx(1.0)
    with pytest.raises(ValueError, match="window must be positive"):
        calls.rates(calls.read(tmp_path), window=0)
