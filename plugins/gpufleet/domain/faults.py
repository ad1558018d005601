"""The simulated fleet's fault vocabulary: what can be injected, and how a fault is written.

Pure: the catalog (``sim.faults``), the CLI (``gpufleet sim inject``) and the DAG Param
(``sim_faults``) all speak it; the sim backend acts on it.
"""

from __future__ import annotations

FAULT_KINDS = ("fabric-down", "bad-node", "lustre-slow", "capacity-short", "api-errors")
