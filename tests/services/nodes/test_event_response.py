"""The event path's response on the simulated fleet (services.nodes.events): a batch of node
changes and node events is decided, recorded once and acted on in minutes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.admission import PENDING_KEY
from gpufleet.domain.events import NodeCondition
from gpufleet.domain.nodes import NodeState
from gpufleet.domain.signals import HOLD_VALUE
from gpufleet.domain.workloads import QUARANTINE_KEY
from gpufleet.services.nodes.admission import AdmissionSessions
from gpufleet.services.nodes.events import EventResponse
from gpufleet.services.nodes.watch_batch import Batch, node_fields
from gpufleet.store import Ledger

CLUSTER, POOL = "a3u-sim", "h200-a"
XID_79 = "NVRM: Xid (PCI:0000:9b:00): 79, pid=1895, name=python3, GPU has fallen off the bus."


@pytest.fixture
def fleet(fleet_state):
    catalog = load_catalog()
    backend = cluster_backend(catalog.cluster(CLUSTER))
    return catalog, backend, Ledger()


def _nodes(backend):
    return {n.name: n for n in backend.list_nodes()}


def _baseline(catalog, backend, ledger, leave_out=()):
    nodes = [n for n in backend.list_nodes() if n.name not in leave_out]
    batch = Batch(CLUSTER)
    batch.listed(nodes, "100")
    return EventResponse(ledger, catalog).respond(batch, "baseline")


def _event(node, message, uid="e1", count=1, version="7"):
    return {
        "uid": uid,
        "node": node,
        "reason": "NvidiaXidError",
        "message": message,
        "type": "Warning",
        "source": "test",
        "count": count,
        "last_seen": None,
        "version": version,
    }


def _taints(backend, node):
    return {t.key for t in _nodes(backend)[node].taints}


def test_the_first_list_is_a_baseline(fleet):
    catalog, backend, ledger = fleet
    report = _baseline(catalog, backend, ledger)
    assert report.baseline
    assert report.admitted == {} and report.quarantined == {}
    assert set(ledger.watched_nodes(CLUSTER)) == set(_nodes(backend))
    assert ledger.watch_cursor(CLUSTER, "nodes") == "100"


def test_an_xid_79_quarantines_at_once_and_a_replay_does_nothing(fleet):
    catalog, backend, ledger = fleet
    _baseline(catalog, backend, ledger)
    node = f"{CLUSTER}-{POOL}-2"
    batch = Batch(CLUSTER, events={"e1": _event(node, XID_79)}, events_version="7")
    report = EventResponse(ledger, catalog).respond(batch, "r1")
    assert list(report.quarantined) == [node]
    assert "79" in report.quarantined[node]
    assert QUARANTINE_KEY in _taints(backend, node)
    assert ledger.node_state(CLUSTER, node)["state"] == NodeState.QUARANTINED
    assert ledger.watch_cursor(CLUSTER, "events") == "7"
    moves = len(ledger.node_history(CLUSTER, node))
    again = EventResponse(ledger, catalog).respond(batch, "r2")  # the watcher resumed: replayed
    assert again.signals == [] and again.quarantined == {}
    assert len(ledger.node_history(CLUSTER, node)) == moves


def test_a_response_the_cluster_refused_acts_when_its_batch_comes_again(fleet):
    from gpufleet.backends.sim.state import SimState
    from gpufleet.errors import BackendError
    from tests.support.fleet import frozen_sim_clock

    catalog, backend, ledger = fleet
    frozen_sim_clock()  # the backend's retries wait on the sim's clock
    _baseline(catalog, backend, ledger)
    node = f"{CLUSTER}-{POOL}-2"
    batch = Batch(CLUSTER, events={"e1": _event(node, XID_79)}, events_version="7")
    SimState().inject(CLUSTER, POOL, "api-errors:1", scope="busy")  # every call: 503
    with pytest.raises(BackendError):
        EventResponse(ledger, catalog).respond(batch, "r1")
    SimState().clear(scope="busy")
    assert [s["what"] for s in ledger.node_signals(CLUSTER, node)] == ["79"]  # recorded...
    assert QUARANTINE_KEY not in _taints(backend, node)  # ...but not acted on
    assert ledger.watch_cursor(CLUSTER, "events") is None  # nor acknowledged
    # the lifecycle recorded the quarantine before the cluster refused its taint
    assert ledger.node_state(CLUSTER, node)["state"] == NodeState.QUARANTINED
    report = EventResponse(ledger, catalog).respond(batch, "r1-retry")  # Airflow's retry
    assert [s.what for s in report.signals] == ["79"]  # acted on this time
    assert QUARANTINE_KEY in _taints(backend, node)
    assert ledger.watch_cursor(CLUSTER, "events") == "7"
    again = EventResponse(ledger, catalog).respond(batch, "r2")  # acted on: a replay is nothing
    assert again.signals == [] and again.notes == []


def test_an_xid_the_catalog_leaves_to_the_application_changes_nothing(fleet):
    catalog, backend, ledger = fleet
    _baseline(catalog, backend, ledger)
    node = f"{CLUSTER}-{POOL}-2"
    msg = "NVRM: Xid (PCI:0000:9b:00): 13, pid=1895, Graphics Exception"
    report = EventResponse(ledger, catalog).respond(
        Batch(CLUSTER, events={"e1": _event(node, msg)}), "r1"
    )
    assert report.quarantined == {} and report.notes
    assert QUARANTINE_KEY not in _taints(backend, node)


def test_a_problem_condition_quarantines(fleet):
    catalog, backend, ledger = fleet
    _baseline(catalog, backend, ledger)
    node = _nodes(backend)[f"{CLUSTER}-{POOL}-1"]
    bad = replace(
        node, conditions=(NodeCondition("AcceleratedHardwareReady", "False", "NvidiaXid79"),)
    )
    batch = Batch(CLUSTER, nodes={node.name: node_fields(bad, "101")}, nodes_version="101")
    report = EventResponse(ledger, catalog).respond(batch, "r1")
    assert list(report.quarantined) == [node.name]


def test_a_new_node_is_held_pending_and_opens_a_session(fleet):
    catalog, backend, ledger = fleet
    new = f"{CLUSTER}-{POOL}-5"
    _baseline(catalog, backend, ledger, leave_out=[new])
    batch = Batch(CLUSTER, nodes={new: node_fields(_nodes(backend)[new], "101")})
    report = EventResponse(ledger, catalog).respond(batch, "r1")
    assert list(report.admitted) == [new]
    assert PENDING_KEY in _taints(backend, new)
    assert not _nodes(backend)[new].schedulable
    [opened] = report.sessions
    assert opened["node_pool"] == POOL
    [session] = ledger.sessions(CLUSTER, POOL)
    assert set(session.nodes) == {new} and session.id == opened["session"]


def test_a_reboot_admits_and_joins_the_open_session(fleet):
    catalog, backend, ledger = fleet
    nodes = _nodes(backend)
    a, b = nodes[f"{CLUSTER}-{POOL}-0"], nodes[f"{CLUSTER}-{POOL}-1"]
    batch = Batch(CLUSTER)
    batch.listed([replace(a, boot_id="b1"), replace(b, boot_id="b1")], "100")
    EventResponse(ledger, catalog).respond(batch, "baseline")
    first = Batch(CLUSTER, nodes={a.name: node_fields(replace(a, boot_id="b2"), "101")})
    r1 = EventResponse(ledger, catalog).respond(first, "r1")
    second = Batch(CLUSTER, nodes={b.name: node_fields(replace(b, boot_id="b2"), "102")})
    r2 = EventResponse(ledger, catalog).respond(second, "r2")
    assert list(r1.admitted) == [a.name] and list(r2.admitted) == [b.name]
    assert len(r1.sessions) == 1 and r2.sessions == []  # joined, not opened
    [session] = ledger.sessions(CLUSTER, POOL)
    assert set(session.nodes) == {a.name, b.name}


def _readiness(node, ready: bool, **changes):
    """``node`` reporting Ready (or NotReady), its other conditions kept."""
    others = tuple(c for c in node.conditions if c.type != "Ready")
    cond = NodeCondition("Ready", "True" if ready else "False")
    return replace(node, ready=ready, conditions=(cond, *others), **changes)


def _pending_value(backend, node):
    return next((t.value for t in _nodes(backend)[node].taints if t.key == PENDING_KEY), None)


def _hold(catalog, backend, ledger, name):
    """A baseline, then ``name`` going NotReady: the response's report."""
    nodes = _nodes(backend)
    batch = Batch(CLUSTER)
    batch.listed([_readiness(n, True, boot_id="b1") for n in nodes.values()], "100")
    EventResponse(ledger, catalog).respond(batch, "baseline")
    down = _readiness(nodes[name], False, boot_id="b1")
    return EventResponse(ledger, catalog).respond(
        Batch(CLUSTER, nodes={name: node_fields(down, "101")}, nodes_version="101"), "r1"
    )


def test_a_node_going_notready_is_held_pending_at_once_without_a_session(fleet):
    catalog, backend, ledger = fleet
    name = f"{CLUSTER}-{POOL}-1"
    report = _hold(catalog, backend, ledger, name)
    assert list(report.held) == [name] and report.admitted == {} and report.sessions == []
    assert _pending_value(backend, name) == HOLD_VALUE
    assert ledger.sessions(CLUSTER, POOL) == []
    [sig] = [s for s in ledger.node_signals(CLUSTER, name) if s["what"] == HOLD_VALUE]
    assert sig["response"] == "hold"


def test_back_without_a_reboot_the_hold_is_lifted(fleet):
    catalog, backend, ledger = fleet
    name = f"{CLUSTER}-{POOL}-1"
    _hold(catalog, backend, ledger, name)
    back = _readiness(_nodes(backend)[name], True, boot_id="b1")  # carries the hold's taint
    report = EventResponse(ledger, catalog).respond(
        Batch(CLUSTER, nodes={name: node_fields(back, "102")}, nodes_version="102"), "r2"
    )
    assert report.lifted == [name] and report.admitted == {}
    assert _pending_value(backend, name) is None
    assert ledger.sessions(CLUSTER, POOL) == []


def test_back_from_a_reboot_it_was_never_free_and_joins_a_session(fleet):
    catalog, backend, ledger = fleet
    name = f"{CLUSTER}-{POOL}-1"
    _hold(catalog, backend, ledger, name)
    back = _readiness(_nodes(backend)[name], True, boot_id="b2")
    # Ready again with a new boot id: held already, before the response reads it
    assert _pending_value(backend, name) == HOLD_VALUE
    report = EventResponse(ledger, catalog).respond(
        Batch(CLUSTER, nodes={name: node_fields(back, "102")}, nodes_version="102"), "r2"
    )
    assert list(report.admitted) == [name] and report.lifted == []
    assert _pending_value(backend, name) == "rebooted"
    [session] = ledger.sessions(CLUSTER, POOL)
    assert set(session.nodes) == {name}


def test_after_a_restart_the_ledger_knows_the_node_was_notready(fleet):
    catalog, backend, ledger = fleet
    name = f"{CLUSTER}-{POOL}-1"
    _hold(catalog, backend, ledger, name)
    # a new watcher relists (its first batch after a restart or 410 Gone): the node is back
    relist = Batch(CLUSTER)
    relist.listed([_readiness(n, True, boot_id="b1") for n in backend.list_nodes()], "300")
    report = EventResponse(Ledger(), catalog).respond(relist, "r3")
    assert report.lifted == [name] and report.admitted == {}
    assert _pending_value(backend, name) is None


def test_a_quarantined_node_going_notready_is_left_to_the_lifecycle(fleet):
    catalog, backend, ledger = fleet
    name = f"{CLUSTER}-{POOL}-2"
    nodes = _nodes(backend)
    batch = Batch(CLUSTER)
    batch.listed([_readiness(n, True, boot_id="b1") for n in nodes.values()], "100")
    EventResponse(ledger, catalog).respond(batch, "baseline")
    EventResponse(ledger, catalog).respond(
        Batch(CLUSTER, events={"e1": _event(name, XID_79)}, events_version="7"), "r1"
    )
    down = _readiness(_nodes(backend)[name], False, boot_id="b1")
    report = EventResponse(ledger, catalog).respond(
        Batch(CLUSTER, nodes={name: node_fields(down, "101")}, nodes_version="101"), "r2"
    )
    assert report.held == {} and _pending_value(backend, name) is None
    assert QUARANTINE_KEY in _taints(backend, name)


def test_an_older_version_never_moves_a_node_back(fleet):
    catalog, backend, ledger = fleet
    node = _nodes(backend)[f"{CLUSTER}-{POOL}-0"]
    batch = Batch(CLUSTER)
    batch.listed([replace(node, boot_id="b2")], "100")
    EventResponse(ledger, catalog).respond(batch, "baseline")
    old = Batch(CLUSTER, nodes={node.name: node_fields(replace(node, boot_id="b1"), "90")})
    report = EventResponse(ledger, catalog).respond(old, "r1")
    assert report.admitted == {}
    assert ledger.watched_nodes(CLUSTER)[node.name]["boot_id"] == "b2"


def test_a_relist_without_a_node_forgets_it(fleet):
    catalog, backend, ledger = fleet
    _baseline(catalog, backend, ledger)
    gone = f"{CLUSTER}-{POOL}-4"
    relist = Batch(CLUSTER)
    relist.listed([n for n in backend.list_nodes() if n.name != gone], "200")
    report = EventResponse(ledger, catalog).respond(relist, "r1")
    assert report.forgotten == [gone] and report.admitted == {}
    assert ledger.watched_nodes(CLUSTER)[gone]["gone"]


def test_a_bad_batch_is_refused_and_changes_nothing(fleet):
    catalog, backend, ledger = fleet
    with pytest.raises(ValueError, match="cluster"):
        Batch.from_dict({"nodes": {}})
    with pytest.raises(ValueError, match="version"):
        Batch.from_dict({"cluster": CLUSTER, "nodes": {"n": {"pool": POOL}}})
    from gpufleet.errors import GpufleetError

    with pytest.raises(GpufleetError):
        EventResponse(ledger, catalog).respond(Batch("no-such-cluster", relist=True), "r1")
    assert ledger.watched_nodes(CLUSTER) == {}


def _judged(catalog, backend, ledger, passed, quarantined=()):
    from gpufleet.services.validation.fabric_state import FabricSummary

    new = f"{CLUSTER}-{POOL}-5"
    _baseline(catalog, backend, ledger, leave_out=[new])
    r = EventResponse(ledger, catalog).respond(
        Batch(CLUSTER, nodes={new: node_fields(_nodes(backend)[new], "101")}), "r1"
    )
    sid = r.sessions[0]["session"]
    sessions = AdmissionSessions(catalog.pool(CLUSTER, POOL), ledger, backend)
    assert sessions.claim(sid, "adm-1") is not None
    assert sessions.claim(sid, "adm-2") is None  # one run validates a session
    summary = FabricSummary(
        cluster=CLUSTER,
        pool=POOL,
        passed=passed,
        state=None,
        page=False,
        transport="ib",
        busbw_gbps=None,
        quarantined=list(quarantined),
        reasons=[],
    )
    row = {"passed": passed, "details": {"passed_nodes": [new] if passed else []}}
    return new, sid, sessions, summary, row


def test_a_session_that_passed_releases_its_node(fleet):
    catalog, backend, ledger = fleet
    new, sid, sessions, summary, row = _judged(catalog, backend, ledger, passed=True)
    verdict = sessions.judge(sid, "adm-1", summary, row)
    assert list(verdict.released) == [new]
    assert PENDING_KEY not in _taints(backend, new)
    assert ledger.session_row(sid)["state"] == "done"


def test_a_bad_signal_while_pending_keeps_the_node_out_though_it_passed(fleet):
    catalog, backend, ledger = fleet
    new, sid, sessions, summary, row = _judged(catalog, backend, ledger, passed=True)
    EventResponse(ledger, catalog).respond(
        Batch(CLUSTER, events={"e9": _event(new, XID_79, uid="e9")}), "r2"
    )
    verdict = sessions.judge(sid, "adm-1", summary, row)
    assert verdict.released == {} and new in verdict.quarantined
    assert PENDING_KEY in _taints(backend, new)


def test_a_session_not_judged_carries_its_node_to_the_next(fleet):
    catalog, backend, ledger = fleet
    new, sid, sessions, summary, row = _judged(catalog, backend, ledger, passed=False)
    verdict = sessions.judge(sid, "adm-1", summary, row)
    assert list(verdict.carried) == [new]
    assert PENDING_KEY in _taints(backend, new)
    [nxt] = ledger.sessions(CLUSTER, POOL)
    assert nxt.id != sid and new in nxt.nodes


def test_the_gate_reads_signals_newer_than_the_pools_validation(fleet):
    from datetime import timedelta

    from gpufleet.domain.signals import Response, Signal, Source
    from gpufleet.services.launch.gate import gather_facts
    from gpufleet.services.nodes.drain import backend_clock
    from tests.support.fleet import validate

    catalog, backend, ledger = fleet
    validate(CLUSTER, POOL, run_id="seed", storage=False)
    node = f"{CLUSTER}-{POOL}-3"
    clock = backend_clock(backend)
    before = clock.now() - timedelta(days=1)
    clock.advance(60)
    for at, version in ((before, "1"), (clock.now(), "2")):
        ledger.record_signals(
            [
                Signal(
                    CLUSTER,
                    node,
                    Source.XID,
                    "79",
                    Response.QUARANTINE,
                    "Xid 79",
                    at,
                    POOL,
                    version=version,
                )
            ]
        )
    [facts] = gather_facts(catalog, ledger, CLUSTER, [POOL])
    assert list(facts.signalled) == [node] and "Xid 79" in facts.signalled[node]


def test_a_batch_after_a_gap_is_handled_but_not_acknowledged(fleet):
    """Batch N's run failed for good; batch N+1 begins after what was acknowledged: its changes
    are handled, but the cursor stays, so the watcher hands N's changes over again."""
    catalog, backend, ledger = fleet
    _baseline(catalog, backend, ledger)  # nodes acknowledged at 100
    node = f"{CLUSTER}-{POOL}-2"
    later = Batch(
        CLUSTER,
        events={"e2": _event(node, XID_79, uid="e2")},
        events_version="30",
        events_from="20",  # began at 20: 10..20 (batch N) was never handled
    )
    ledger.ack_watch(CLUSTER, "events", "10")
    report = EventResponse(ledger, catalog).respond(later, "r2")
    assert list(report.quarantined) == [node]
    assert ledger.watch_cursor(CLUSTER, "events") == "10"
    assert any("not acknowledged" in n for n in report.notes)
    follows = Batch(CLUSTER, events={}, events_version="30", events_from="10")
    EventResponse(ledger, catalog).respond(follows, "r3")
    assert ledger.watch_cursor(CLUSTER, "events") == "30"


def test_a_session_whose_run_died_is_taken_over_only_when_stale(fleet):
    from gpufleet.services.nodes.admission import STALE_S, orphaned_sessions
    from gpufleet.services.nodes.drain import backend_clock

    catalog, backend, ledger = fleet
    new, sid, sessions, summary, row = _judged(catalog, backend, ledger, passed=True)
    clock = backend_clock(backend)
    assert sessions.claim(sid, "adm-2") is None  # adm-1 validates it, not stale yet
    clock.advance(300 + STALE_S + 1)
    assert [s.id for s in orphaned_sessions(ledger, CLUSTER, clock.now())] == [sid]
    assert sessions.claim(sid, "adm-2") is not None
    assert ledger.session_row(sid)["run_id"] == "adm-2"
    assert list(sessions.judge(sid, "adm-2", summary, row).released) == [new]
