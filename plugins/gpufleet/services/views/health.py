"""Read models of GPU health for people: what a pool's last ``health`` validation row
says, for the readiness table (``gpufleet status``, the fleet page), the pool page and
``/metrics``.

The nightly records one ledger row of kind ``health`` per pool and night: ``passed`` (every
checked node healthy), ``nodes_tested``, ``reasons`` (``<node>: <reason>`` per node that is not
healthy) and ``details``: ``levels`` (``dcgmi diag`` level -> nodes that ran it), ``nodes``
(node -> ``level``, ``action``, ``reasons``, ``notes``; the action one of
``gpufleet.domain.health.HealthAction``) and the cost figures every validation row carries.
``details`` are read defensively: what is malformed is left out, never an error. A pool with no
health row yet is "not checked", not a failure. Read from the ledger only.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeGuard

from gpufleet.domain.health import HealthAction
from gpufleet.services.views.cells import age_text, gpu_minutes, verdict_text

if TYPE_CHECKING:
    pass

NOT_CHECKED = "not checked"
# every action but healthy, least severe first (HealthAction's order): what /metrics counts
UNHEALTHY_ACTIONS = tuple(a.value for a in HealthAction if a is not HealthAction.HEALTHY)
_SEVERITY = {action.value: rank for rank, action in enumerate(HealthAction)}
_HEALTHY = HealthAction.HEALTHY.value


def _is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, the JSON's plain dict decided without the ABC (a fleet
    page asks it for every node of 2,000 pools)."""
    return type(value) is dict or isinstance(value, Mapping)


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return int(value)


def _texts(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def levels_of(details: Mapping[str, Any]) -> dict[int, int]:
    """``details["levels"]`` as level -> nodes that ran it, lowest level first."""
    raw = details.get("levels")
    out: dict[int, int] = {}
    for level, nodes in raw.items() if _is_mapping(raw) else ():
        try:
            key = int(level)
        except (TypeError, ValueError):
            continue
        count = _count(nodes)
        if count is not None:
            out[key] = out.get(key, 0) + count
    return dict(sorted(out.items()))


def unhealthy_nodes(details: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The nodes of ``details["nodes"]`` whose action is not ``healthy``, most severe action
    first, then by name: ``node``, ``level``, ``action``, ``reasons``, ``notes``. An action
    gpufleet does not know is shown as recorded (after the known ones)."""
    raw = details.get("nodes")
    out = []
    for node, entry in raw.items() if _is_mapping(raw) else ():
        if not _is_mapping(entry):
            continue
        action = str(entry.get("action") or "unknown")
        if action == _HEALTHY:
            continue
        out.append(
            {
                "node": str(node),
                "level": _count(entry.get("level")),
                "action": action,
                "reasons": _texts(entry.get("reasons")),
                "notes": _texts(entry.get("notes")),
            }
        )
    return sorted(out, key=lambda n: (-_SEVERITY.get(n["action"], -1), n["node"]))


def levels_text(levels: Mapping[int, int]) -> str:
    """``L1``, ``L1+L2``; ``-`` when no level was recorded."""
    return "+".join(f"L{level}" for level in levels) or "-"


def health_summary(row: dict[str, Any] | None, now: datetime) -> dict[str, Any] | None:
    """What a pool's last health row says (None: not checked yet): ``verdict`` (pass, FAIL,
    ERROR), ``levels`` (level -> nodes), ``nodes_checked``, ``unhealthy`` (their count),
    ``actions`` (action -> unhealthy nodes, most severe first), ``nodes`` (each unhealthy
    node), ``reasons``, the run and its age, and ``gpu_minutes_per_node``."""
    if row is None:
        return None
    raw = row.get("details")
    details = raw if _is_mapping(raw) else {}
    nodes = unhealthy_nodes(details)
    actions: dict[str, int] = {}
    for n in nodes:
        actions[n["action"]] = actions.get(n["action"], 0) + 1
    return {
        "run_id": row["run_id"],
        "verdict": verdict_text(row),
        "levels": levels_of(details),
        "nodes_checked": _count(row.get("nodes_tested")),
        "unhealthy": len(nodes),
        "actions": actions,
        "nodes": nodes,
        "reasons": list(row.get("reasons") or []),
        "finished_at": row["finished_at"],
        "age": age_text(now, row["finished_at"]),
        "gpu_minutes_per_node": gpu_minutes(row),
    }


def actions_text(actions: Mapping[str, int]) -> str:
    """``2 repair, 1 reboot``: unhealthy nodes per action, in the order given."""
    return ", ".join(f"{count} {action}" for action, count in actions.items())


def health_text(p: dict[str, Any]) -> str:
    """The readiness table's HEALTH column: ``pass L1 6 nodes 3h ago``, ``FAIL L1+L2 2/6
    unhealthy (1 reboot, 1 repair) 3h ago``, ``ERROR 3h ago``, or ``not checked``."""
    h = p.get("health")
    if not h:
        return NOT_CHECKED
    if h["verdict"] == "ERROR":
        return f"ERROR {h['age']}"
    checked = "?" if h["nodes_checked"] is None else h["nodes_checked"]
    what = f"{checked} nodes"
    if h["unhealthy"]:
        what = f"{h['unhealthy']}/{checked} unhealthy ({actions_text(h['actions'])})"
    return f"{h['verdict']} {levels_text(h['levels'])} {what} {h['age']}"
