"""The simulated fleet's state, faults, cluster operations and cloud operations."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.base import Taint
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.faults import Fault, FaultError, parse_fault
from gpufleet.domain.workloads import QUARANTINE_KEY
from gpufleet.errors import BackendError, GpufleetError, TransientBackendError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def catalog():
    return load_catalog()


@pytest.fixture
def a3u(catalog, fleet_state):
    return cluster_backend(catalog.cluster("a3u-sim"))


def gpufleet(*args: str, env_state: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUFLEET_STATE_DIR": str(env_state)}
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", *args], capture_output=True, text=True, env=env, cwd=ROOT
    )


def test_nodes_are_seeded_from_the_catalog(a3u, catalog):
    nodes = a3u.list_nodes("h200-a")
    assert [n.name for n in nodes] == [f"a3u-sim-h200-a-{i}" for i in range(6)]
    node = nodes[0]
    assert node.ready and node.schedulable and node.idle and not node.quarantined
    assert node.labels["cloud.google.com/gke-nodepool"] == "h200-a"
    assert node.labels["gpufleet.io/pool"] == "h200-a"
    eks_nodes = cluster_backend(catalog.cluster("p5-sim")).list_nodes()
    assert eks_nodes[0].labels["eks.amazonaws.com/nodegroup"] == "h100-a"
    assert len(a3u.list_nodes()) == 10


def test_state_is_shared_between_processes(a3u, fleet_state):
    a3u.set_unschedulable("a3u-sim-h200-a-1", True)
    out = gpufleet("sim", "show", "--cluster", "a3u-sim", env_state=fleet_state)
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if "a3u-sim-h200-a-1 " in ln)
    assert line.split()[2:4] == ["yes", "no"]  # ready, not schedulable


def test_taint_label_cordon(a3u):
    node = "a3u-sim-h200-a-2"
    a3u.add_taint(node, Taint(QUARANTINE_KEY, "low-busbw", "NoSchedule"))
    a3u.add_taint(node, Taint(QUARANTINE_KEY, "still-low", "NoSchedule"))  # replaces
    a3u.set_labels(node, {"gpufleet.io/quarantined": "true"})
    info = next(n for n in a3u.list_nodes("h200-a") if n.name == node)
    assert info.quarantined and not info.schedulable
    assert [t.value for t in info.taints if t.key == QUARANTINE_KEY] == ["still-low"]
    assert info.labels["gpufleet.io/quarantined"] == "true"
    a3u.remove_taint(node, QUARANTINE_KEY)
    a3u.set_labels(node, {"gpufleet.io/quarantined": None})
    info = next(n for n in a3u.list_nodes("h200-a") if n.name == node)
    assert info.schedulable and "gpufleet.io/quarantined" not in info.labels
    with pytest.raises(BackendError, match="not found"):
        a3u.set_unschedulable("no-such-node", True)


def test_apply_is_idempotent_and_delete_reports(a3u):
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "ns"},
        "data": {"a": "1"},
    }
    first = a3u.apply(cm)
    cm2 = {**cm, "data": {"a": "2"}}
    assert a3u.apply(cm2)["data"] == {"a": "1"}  # existing object returned unchanged
    assert first["metadata"]["uid"]
    assert a3u.delete("ConfigMap", "x", "ns") is True
    assert a3u.delete("ConfigMap", "x", "ns") is False
    assert a3u.workload_status("JobSet", "nope", "ns").phase == "NotFound"


@pytest.mark.parametrize(
    "text,expected",
    [
        ("fabric-down", Fault("fabric-down")),
        ("fabric-down:busbw=340", Fault("fabric-down", busbw_gbps=340.0)),
        ("bad-node:n1", Fault("bad-node", node="n1")),
        ("bad-node:n1:nic", Fault("bad-node", node="n1", nic=True)),
        ("lustre-slow", Fault("lustre-slow")),
        ("lustre-slow:0.25", Fault("lustre-slow", factor=0.25)),
        ("capacity-short", Fault("capacity-short")),
        ("capacity-short:2", Fault("capacity-short", machines=2)),
        ("api-errors:0.5", Fault("api-errors", rate=0.5)),
        ("  api-errors:1 ", Fault("api-errors", rate=1.0)),
        ("api-errors:1:after=20", Fault("api-errors", rate=1.0, after=20)),
        ("not-ready:n1", Fault("not-ready", node="n1")),
        ("drift:1", Fault("drift", percent=1.0)),
        ("drift:2.5", Fault("drift", percent=2.5)),
    ],
)
def test_fault_grammar(text, expected):
    fault = parse_fault(text)
    assert fault == expected
    assert parse_fault(fault.text) == fault  # the written form reads back the same


@pytest.mark.parametrize(
    "text,match",
    [
        ("meteor", "unknown fault"),
        ("bad-node", "needs a node"),
        ("bad-node:", "empty argument"),
        ("bad-node:Node_1", "not a node name"),
        ("bad-node:n1:cpu", "only ':nic'"),
        ("api-errors", "needs a rate"),
        ("api-errors:2", "within"),
        ("api-errors:0", "within"),
        ("api-errors:x", "must be a number"),
        ("api-errors:nan", "finite"),
        ("api-errors:1:after=0", "after=N"),
        ("api-errors:1:before=3", "after=N"),
        ("api-errors:1:after=x", "after=N"),
        ("not-ready", "not-ready needs a node"),
        ("not-ready:Node_1", "not-ready needs a node"),
        ("lustre-slow:3", "within"),
        ("lustre-slow:-0.5", "within"),
        ("lustre-slow:inf", "finite"),
        ("lustre-slow:0.3:0.4", "must be a number"),
        ("fabric-down:fast", "busbw="),
        ("fabric-down:busbw=", "must be a number"),
        ("fabric-down:busbw=abc", "must be a number"),
        ("fabric-down:busbw=-1", "above 0"),
        ("fabric-down:busbw=0", "above 0"),
        ("fabric-down:busbw=nan", "finite"),
        ("fabric-down:busbw=inf", "finite"),
        ("fabric-down:busbw=1e400", "finite"),
        ("capacity-short:-1", "at least 1"),
        ("capacity-short:0", "at least 1"),
        ("capacity-short:1.5", "at least 1"),
        ("drift", "drift needs a percent"),
        ("drift:", "empty argument"),
        ("drift:0", "within"),
        ("drift:100", "within"),
        ("drift:-1", "within"),
        ("drift:fast", "must be a number"),
        ("drift:nan", "finite"),
        ("drift:inf", "finite"),
    ],
)
def test_bad_faults_are_refused_in_one_line(text, match):
    with pytest.raises(FaultError, match=match) as err:
        parse_fault(text)
    assert "\n" not in str(err.value) and repr(text.strip()) in str(err.value)


def test_the_param_pattern_admits_the_grammar_and_refuses_words_signs_nan_inf():
    """The sim drill DAG's ``sim_faults`` Param can validate with ``PARAM_PATTERN`` in the form."""
    import re

    from gpufleet.domain.faults import PARAM_PATTERN

    pattern = re.compile(PARAM_PATTERN)
    for text in (
        "fabric-down",
        "fabric-down:busbw=340",
        "fabric-down:busbw=22.5",
        "bad-node:a3u-sim-h200-a-1",
        "bad-node:a3u-sim-h200-a-1:nic",
        "lustre-slow",
        "lustre-slow:0.25",
        "capacity-short:2",
        "api-errors:0.5",
        "api-errors:1",
        "api-errors:1:after=20",
        "not-ready:a3u-sim-h200-a-1",
        "drift:1",
        "drift:0.5",
    ):
        assert pattern.match(f"a3u-sim/h200-a={text}"), text
        parse_fault(text)  # and the parser reads every one of them
    for text in (
        "meteor",
        "fabric-down:busbw=nan",
        "fabric-down:busbw=inf",
        "fabric-down:busbw=abc",
        "fabric-down:busbw=-1",
        "bad-node:",
        "bad-node:n1:gpu",
        "lustre-slow:-0.5",
        "lustre-slow:2",
        "capacity-short:x",
        "api-errors:nan",
        "api-errors:1.5",
        "api-errors:1:after=",
        "api-errors:1:before=3",
        "not-ready:",
        "not-ready:N1",
        "drift",
        "drift:-1",
        "drift:nan",
        "drift:1:2",
    ):
        assert not pattern.match(f"a3u-sim/h200-a={text}"), text


def test_the_catalog_check_uses_the_same_parser(tmp_path):
    """A standing fault the grammar refuses is a catalog problem, with the parser's words."""
    import yaml

    data = yaml.safe_load((ROOT / "include" / "fleet" / "sim.yaml").read_text())
    data["regions"][0]["clusters"][0]["sim"]["faults"] = {"h200-a": ["lustre-slow:nan"]}
    (tmp_path / "sim.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(GpufleetError, match=r"sim\.faults\.h200-a.*lustre-slow:nan.*finite"):
        load_catalog(tmp_path)


def test_nightly_fault_specs_use_the_same_parser(catalog):
    from gpufleet.services.validation.run_faults import parse_fault_specs

    [(ref, fault)] = parse_fault_specs(catalog, ["a3u-sim/h200-a=bad-node:a3u-sim-h200-a-1:nic"])
    assert ref.key == "a3u-sim/h200-a"
    assert fault == Fault("bad-node", node="a3u-sim-h200-a-1", nic=True)
    with pytest.raises(FaultError, match="finite"):
        parse_fault_specs(catalog, ["a3u-sim/h200-a=fabric-down:busbw=inf"])


def test_faults_reach_only_sim_clusters():
    from gpufleet.backends.faults import fault_injection

    real = load_catalog(ROOT / "include" / "fleet-examples").cluster("train-usc1")
    with pytest.raises(BackendError, match="only be injected into sim clusters"):
        fault_injection(real)


def test_api_errors_fault(a3u, fleet_state, caplog):
    SimState().inject("a3u-sim", "h200-a", "api-errors:1")
    with pytest.raises(TransientBackendError, match="injected api-errors"):
        a3u.list_nodes()  # every attempt fails: the last error goes through
    assert caplog.text.count("list_nodes failed") == 4  # retried 4 times before giving up
    from gpufleet.backends.faults import fault_injection

    # `sim show` still sees the fleet: the injector reads nodes without injected API errors
    assert len(fault_injection(load_catalog().cluster("a3u-sim")).nodes()) == 10
    SimState().clear()
    assert len(a3u.list_nodes()) == 10


def test_transient_errors_are_retried(a3u, fleet_state, caplog):
    import random

    random.seed(7)
    SimState().inject("a3u-sim", "h200-a", "api-errors:0.3")
    for _ in range(10):
        assert len(a3u.list_nodes()) == 10
    assert "retry 1 of 4" in caplog.text  # some calls failed and were retried
    with pytest.raises(BackendError, match="not found"):  # a real error is not retried
        a3u.set_unschedulable("no-such-node", True)
    assert "set_unschedulable failed" not in caplog.text


def test_catalog_faults_are_standing(catalog, fleet_state):
    SimState().ensure_seeded(catalog.cluster("a3u-sim"))
    assert SimState().faults(catalog) == []  # the shipped catalog declares none


# --- the CLI ------------------------------------------------------------------------------------


def test_cli_inject_show_clear(fleet_state):
    out = gpufleet(
        "sim", "inject", "--pool", "a3u-sim/h200-a", "--fault", "fabric-down", env_state=fleet_state
    )
    assert out.returncode == 0 and "injected: fabric-down on a3u-sim/h200-a" in out.stdout
    again = gpufleet(
        "sim", "inject", "--pool", "h200-a", "--fault", "fabric-down", env_state=fleet_state
    )
    assert "already active" in again.stdout
    gpufleet(
        "sim",
        "inject",
        "--pool",
        "h100-a",
        "--fault",
        "bad-node:p5-sim-h100-a-3",
        env_state=fleet_state,
    )
    show = gpufleet("sim", "show", env_state=fleet_state)
    assert "a3u-sim/h200-a: fabric-down (cli)" in show.stdout
    assert "p5-sim/h100-a: bad-node:p5-sim-h100-a-3 (cli)" in show.stdout
    cleared = gpufleet("sim", "clear", "--pool", "h200-a", env_state=fleet_state)
    assert "cleared 1 fault(s)" in cleared.stdout
    assert "fabric-down" not in gpufleet("sim", "show", env_state=fleet_state).stdout
    assert "cleared 1 fault(s)" in gpufleet("sim", "clear", env_state=fleet_state).stdout
    assert "faults: none" in gpufleet("sim", "show", env_state=fleet_state).stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (["--pool", "h200-z", "--fault", "fabric-down"], "no node pool named 'h200-z'"),
        (["--pool", "a3u-sim/h200-a", "--fault", "bogus"], "unknown fault 'bogus'"),
        (["--pool", "h200-a", "--fault", "bad-node:ghost"], "has no node 'ghost'"),
    ],
)
def test_cli_refuses_bad_input_and_changes_nothing(fleet_state, args, message):
    out = gpufleet("sim", "inject", *args, env_state=fleet_state)
    assert out.returncode == 2
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "faults: none" in gpufleet("sim", "show", env_state=fleet_state).stdout


def test_cli_reset(fleet_state):
    gpufleet("sim", "inject", "--pool", "h200-a", "--fault", "lustre-slow", env_state=fleet_state)
    assert gpufleet("sim", "reset", env_state=fleet_state).returncode == 0
    assert "faults: none" in gpufleet("sim", "show", env_state=fleet_state).stdout


def test_cli_reset_onboarded_prepulls_the_preexisting_clusters_only(fleet_state, catalog):
    from gpufleet.backends.sim.run_times import prepulled_images
    from gpufleet.backends.sim.state import SimState
    from gpufleet.manifests.addons.prepull import validation_images

    for _ in range(2):  # a second reset --onboarded installs the same, once
        out = gpufleet("sim", "reset", "--onboarded", env_state=fleet_state)
        assert out.returncode == 0, out.stderr
        assert "pre-pull DaemonSet installed on a3u-sim, p5-sim\n" in out.stdout
    with SimState().read() as conn:
        for name in ("a3u-sim", "p5-sim"):
            _, cluster = catalog.clusters[name]
            assert set(validation_images(cluster)) <= prepulled_images(conn, name)
        assert prepulled_images(conn, "a3u-euw4-sim") == set()  # onboarding has yet to make it
        daemonsets = conn.execute("SELECT COUNT(*) FROM objects WHERE kind='DaemonSet'")
        assert daemonsets.fetchone()[0] == 2
