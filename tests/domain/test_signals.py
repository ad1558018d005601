"""The rules that turn a cluster's reports into signals (gpufleet.domain.signals)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.events import NodeCondition
from gpufleet.domain.health.catalog import A
from gpufleet.domain.signals import (
    HOLD_VALUE,
    MAINTENANCE_LABEL,
    PREDICTION_LABEL,
    RANK,
    Response,
    Signal,
    Source,
    by_node,
    coalesce,
    condition_signals,
    label_signals,
    lifecycle_signal,
    newer_bad_signals,
    xid_signal,
)

T0 = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Node:
    name: str
    pool: str | None = "p"
    uid: str | None = "u1"
    boot_id: str | None = "b1"
    provider_id: str | None = "sim://c/n"
    unschedulable: bool = False
    conditions: tuple = ()
    pending: str | None = None


def _ready(status: str) -> tuple:
    return (NodeCondition("Ready", status),)


UP, DOWN = _ready("True"), _ready("False")


def test_xid_79_quarantines_with_nvidias_words():
    s = xid_signal("c", "n1", [79], "GPU has fallen off the bus.", T0, pool="p")
    assert s is not None
    assert s.response is Response.QUARANTINE
    assert s.what == "79"
    assert s.action is not None and s.action is not A.HEALTHY
    assert "79" in s.reason
    assert s.bad


def test_xid_the_catalog_says_restart_the_app_is_a_note():
    # Xid 13 (graphics engine exception): NVIDIA's catalog says restart the application
    s = xid_signal("c", "n1", [13], "", T0)
    assert s is not None
    assert s.response is Response.NOTE
    assert not s.bad


def test_xid_most_severe_code_decides():
    s = xid_signal("c", "n1", [13, 79], "", T0)
    assert s is not None and s.what == "79" and s.response is Response.QUARANTINE


def test_xid_unknown_code_goes_to_a_person_not_healthy():
    s = xid_signal("c", "n1", [9999], "", T0)
    assert s is not None and s.response is Response.QUARANTINE and s.action is A.NEEDS_HUMAN


def test_no_codes_no_signal():
    assert xid_signal("c", "n1", [], "", T0) is None


def test_problem_condition_quarantines_and_recovery_is_a_note():
    bad = NodeCondition("AcceleratedHardwareReady", "False", "NvidiaXidError", "Xid 79")
    good = NodeCondition("AcceleratedHardwareReady", "True")
    [s] = condition_signals("c", "n1", [good], [bad], T0)
    assert s.response is Response.QUARANTINE and s.source is Source.CONDITION
    assert "NvidiaXidError" in s.reason
    [r] = condition_signals("c", "n1", [bad], [good], T0)
    assert r.response is Response.NOTE


def test_npd_problem_conditions_are_true_when_bad():
    [s] = condition_signals("c", "n1", [], [NodeCondition("KernelDeadlock", "True")], T0)
    assert s.response is Response.QUARANTINE
    assert condition_signals("c", "n1", [], [NodeCondition("KernelDeadlock", "False")], T0) == []


def test_unknown_condition_and_ready_take_nothing_out():
    after = [NodeCondition("SomethingNew", "False"), NodeCondition("Ready", "False")]
    assert condition_signals("c", "n1", [], after, T0) == []


def test_unchanged_condition_says_nothing_again():
    bad = NodeCondition("KernelDeadlock", "True")
    assert condition_signals("c", "n1", [bad], [bad], T0) == []


def test_prediction_label_false_quarantines_and_clearing_is_a_note():
    [s] = label_signals("c", "n1", {}, {PREDICTION_LABEL: "false"}, T0)
    assert s.response is Response.QUARANTINE and s.source is Source.PREDICTION
    [c] = label_signals("c", "n1", {PREDICTION_LABEL: "false"}, {PREDICTION_LABEL: "true"}, T0)
    assert c.response is Response.NOTE
    assert label_signals("c", "n1", {}, {PREDICTION_LABEL: "true"}, T0) == []


def test_maintenance_is_a_note_not_a_quarantine():
    [s] = label_signals("c", "n1", {}, {MAINTENANCE_LABEL: "1733083200"}, T0)
    assert s.response is Response.NOTE and s.source is Source.MAINTENANCE


def test_lifecycle():
    n = Node("n1")
    assert lifecycle_signal("c", None, n, T0).what == "appeared"
    assert lifecycle_signal("c", None, n, T0).response is Response.ADMIT
    assert lifecycle_signal("c", n, None, T0).response is Response.FORGET
    assert lifecycle_signal("c", n, Node("n1", boot_id="b2"), T0).what == "rebooted"
    assert lifecycle_signal("c", n, Node("n1", uid="u2"), T0).what == "replaced"
    assert lifecycle_signal("c", n, Node("n1", provider_id="sim://c/m"), T0).what == "replaced"
    assert lifecycle_signal("c", n, n, T0) is None
    assert lifecycle_signal("c", None, None, T0) is None


def test_uncordon_admits_only_while_gpufleet_holds_the_node_out():
    cordoned, open_ = Node("n1", unschedulable=True), Node("n1")
    assert lifecycle_signal("c", cordoned, open_, T0) is None
    s = lifecycle_signal("c", cordoned, open_, T0, held_out=True)
    assert s is not None and s.what == "uncordoned" and s.response is Response.ADMIT


def test_a_node_in_service_going_notready_is_held_at_once():
    s = lifecycle_signal("c", Node("n1", conditions=UP), Node("n1", conditions=DOWN), T0)
    assert s is not None and s.response is Response.HOLD and s.what == HOLD_VALUE
    unknown = Node("n1", conditions=_ready("Unknown"))  # the node controller's lost heartbeat
    assert lifecycle_signal("c", Node("n1", conditions=UP), unknown, T0).response is Response.HOLD


def test_no_hold_out_of_service_already_pending_or_still_notready():
    up, down = Node("n1", conditions=UP), Node("n1", conditions=DOWN)
    assert lifecycle_signal("c", up, down, T0, held_out=True) is None  # the lifecycle has it
    pending = Node("n1", conditions=DOWN, pending="rebooted")  # in a session: not re-held
    assert lifecycle_signal("c", up, pending, T0) is None
    assert lifecycle_signal("c", down, down, T0) is None
    assert lifecycle_signal("c", Node("n1"), down, T0) is None  # Ready not known before


def test_back_without_a_reboot_lifts_only_gpufleets_own_hold():
    down = Node("n1", conditions=DOWN)
    back = Node("n1", conditions=UP, pending=HOLD_VALUE)
    s = lifecycle_signal("c", down, back, T0)
    assert s is not None and s.response is Response.LIFT
    other = Node("n1", conditions=UP, pending="appeared")  # a new node's: its session decides
    assert lifecycle_signal("c", down, other, T0) is None
    assert lifecycle_signal("c", down, Node("n1", conditions=UP), T0) is None


def test_back_from_a_reboot_is_admitted_and_an_unknown_boot_keeps_the_hold():
    down = Node("n1", conditions=DOWN)
    rebooted = Node("n1", boot_id="b2", conditions=UP, pending=HOLD_VALUE)
    s = lifecycle_signal("c", down, rebooted, T0)
    assert s is not None and s.what == "rebooted" and s.response is Response.ADMIT
    # a boot id missing on either side is never taken for "no reboot"
    for before, after in (
        (Node("n1", boot_id=None, conditions=DOWN), Node("n1", conditions=UP, pending=HOLD_VALUE)),
        (down, Node("n1", boot_id=None, conditions=UP, pending=HOLD_VALUE)),
        (
            Node("n1", boot_id=None, conditions=DOWN),
            Node("n1", boot_id=None, conditions=UP, pending=HOLD_VALUE),
        ),
    ):
        assert lifecycle_signal("c", before, after, T0) is None


def test_a_hold_ranks_below_admission_and_quarantine():
    assert RANK[Response.NOTE] < RANK[Response.LIFT] < RANK[Response.FORGET]
    assert RANK[Response.FORGET] < RANK[Response.HOLD] < RANK[Response.ADMIT]
    assert RANK[Response.ADMIT] < RANK[Response.QUARANTINE]


def _sig(node="n1", what="79", response=Response.QUARANTINE, at=T0, version="1"):
    return Signal("c", node, Source.XID, what, response, "r", at, version=version)


def test_a_burst_is_one_signal():
    burst = [_sig(at=T0 + timedelta(seconds=i), version=str(i)) for i in range(50)]
    [one] = coalesce(burst)
    assert one.count == 50
    assert one.observed_at == T0
    assert one.version == "49"


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["n1", "n2", "n3"]),
            st.sampled_from(["79", "48", "13"]),
            st.sampled_from(list(Response)),
            st.integers(0, 1000),
        ),
        max_size=40,
    )
)
def test_coalesce_keeps_every_node_and_its_most_urgent_response(items):
    signals = [_sig(n, w, r, T0 + timedelta(seconds=v), str(v)) for n, w, r, v in items]
    out = coalesce(signals)
    assert {s.key for s in out} == {s.key for s in signals}
    assert sum(s.count for s in out) == len(signals)
    assert by_node(out) == by_node(signals)


def test_newer_bad_signal_than_validation_is_named():
    bad = {"n1": (T0, "Xid 79"), "n2": (T0 - timedelta(hours=1), "Xid 48")}
    got = newer_bad_signals(T0 - timedelta(minutes=5), bad)
    assert list(got) == ["n1"] and "Xid 79" in got["n1"]
    assert set(newer_bad_signals(None, bad)) == {"n1", "n2"}
    assert newer_bad_signals(T0, bad) == {}


def test_both_spellings_of_the_prediction_label_are_read():
    from gpufleet.domain.signals import PREDICTION_LABELS

    for key in PREDICTION_LABELS:
        [s] = label_signals("c", "n1", {}, {key: "false"}, T0)
        assert s.response is Response.QUARANTINE and key in s.reason
