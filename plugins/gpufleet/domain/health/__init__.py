"""GPU health: NVIDIA's Xid catalog as data, and one action per node from the node's
own signals.

Pure: no I/O. :func:`decide_health` reads what the parsers in ``gpufleet.parsing.health``
return (an ``XidLog``, an ``NvidiaSmiMemoryReport``, an ``NvlinkErrorReport``, a
``DcgmDiagResult``; the layers keep the domain from importing them, so they are read by their
fields) and a ``throttling`` flag, and returns a :class:`HealthDecision`: one of
:class:`HealthAction` with a one-line reason naming the signal, the GPU and NVIDIA's recommended
action, every finding behind it, and its :class:`HealthVerdict` (``pass``, ``degraded``,
``could_not_run``, ``fail``: one vocabulary from parser to gate). The most severe finding wins,
in the order of :class:`HealthAction`: ``healthy`` < ``could_not_run`` < ``reset_gpu`` <
``reboot`` < ``needs_human`` < ``repair``.
A reboot resets every GPU, so it settles a reset; a person is asked before anything would be
reset or rebooted over evidence they should see; a repair (the cloud's reportHostAsFaulty or the
node group's replacement) moves the machine to other hardware, which settles all of them.

The rules and their sources:

- **Fails closed**: anything that did not run or could not be read is a
  ``could_not_run`` finding: each signal's ``not_run`` (``parsing.health.not_run.NotRun``: a
  tool DCGM found in use, a section cut off or timed out) and ``problems`` (text of a shape its
  parser does not know), a DCGM run where no test ran (none printed, every one skipped), one at
  another level than asked, a test failing only with DCGM's internal-error ids
  (:data:`DCGM_ERROR_ACTIONS`), and no signal at all. Only a real failure finding outranks it;
  a node with healthy findings and one that could not run is ``could_not_run``: checked again
  (:mod:`~gpufleet.domain.health.retry` for ``DCGM_ST_IN_USE``), never healthy, never a
  burn-in, never quarantined as hardware. ``degraded`` is a healthy node with a degrading note:
  a DCGM warning, NVLink error counters (NVIDIA names no threshold for either); other notes
  (an Xid NVIDIA says restart the application for, a test skipped on one GPU while others ran,
  a rows remapped count) leave it ``pass``.
- **Xid events**: each code's NVIDIA resolution bucket (immediate action), from NVIDIA's "Xid
  Catalog" (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), in
  :data:`XID_CATALOG`. ``IGNORE`` and ``RESTART_APP`` leave the node healthy (a note: the GPU is
  fine, the application restarts); ``RESET_GPU`` -> ``reset_gpu``; ``RESTART_BM`` -> ``reboot``;
  ``CONTACT_SUPPORT`` -> ``needs_human``. The workflows: ``WORKFLOW_XID_48`` and
  ``WORKFLOW_NVLINK_ERR`` -> ``reset_gpu`` (the catalog's text for Xid 48 and 74: "A GPU reset
  or node reboot is needed to clear this error"); ``WORKFLOW_XID_45`` follows the other Xids of
  the GPU when there are any ("Not Solo: IGNORE (follow other Xid)"), and alone asks for a
  Fabric Manager restart ("Solo: RESTART_FM"), which gpufleet does not do: ``needs_human``;
  ``XID_154`` carries the recovery action in its text ("GPU recovery action changed from 0x0
  (None) to 0x2 (Node Reboot Required)"), read by :data:`RECOVERY_ACTIONS`. A code not in the
  catalog is ``needs_human``: look it up. The driver's own "fallen off the bus" message with
  no Xid line is read by the parser as an Xid 79; a GPU the driver could not initialise
  (``RmInitAdapter failed``, the log's ``init_failures``) is ``needs_human``.
- **Row remapping** (``nvidia-smi -q -d ROW_REMAPPER``), after NVIDIA's "GPU Memory Error
  Management" (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/row-remapping.html and
  .../error-recovery-and-response-flags.html): a pending remap "will happen at the next GPU
  reset" -> ``reset_gpu``; a remapping failure is an RMA condition ("RMA Policy Thresholds for
  Row-Remapping") -> ``repair``.
- **Uncorrectable (double-bit) ECC** (the *volatile* counters: this boot's errors; the
  aggregate ones outlive every repair): DRAM errors are what the row remapper repairs, so with a
  remap pending they are explained -> ``reset_gpu`` (the reset activates the remap). Otherwise
  (SRAM, which no remap repairs, or DRAM with no remap pending or after a failure) -> ``repair``,
  gpufleet's rule. NVIDIA is gentler on a single error: the catalog's Xid 48 text asks for a
  GPU reset, and sends SRAM errors to the RMA flow only past the SRAM threshold flag
  (``sram_threshold_exceeded``); gpufleet does not wait for the threshold.
- **Page retirement** (``nvidia-smi -q -d PAGE_RETIREMENT``, GPUs before Ampere): a pending
  retirement (NVIDIA's "Dynamic Page Retirement": the page is blacklisted when the driver
  reloads) -> ``reset_gpu``; retired pages at DCGM's limits (63 in all, or more than 15 for
  double-bit errors: NVIDIA/DCGM ``common/DcgmGPUHardwareLimits.h``) -> ``repair``.
- **NVLink** (``nvidia-smi nvlink -e``): a link shown ``<inactive>`` is down -> ``repair``
  (gpufleet's rule: NVLink and NVSwitch are the machine's hardware; NVIDIA's own triage, DCGM's
  ``DCGM_FR_NVLINK_DOWN``, resets the GPU and reruns the diagnostics first, which an Xid 74 in
  the same log asks for anyway); NVML's "all links are inactive" for a GPU -> ``repair`` (a
  GPU model without NVLink never prints it). Non-zero error counters are a degrading note:
  NVIDIA names no threshold for them here.
- **dcgmi diag**: a test that fails on a GPU, or naming no GPU (the whole node: DCGM 2.x/3.x
  ``Fail - All``, DCGM 4.x ``pcie | Fail`` over ``GPUn: Pass`` lines) -> ``repair``, named
  with its level and test
  (DCGM's suggestion for hardware failures: "Run a field diagnostic on the GPU"), unless DCGM's
  own error ids say otherwise (:data:`DCGM_ERROR_ACTIONS`: configuration it tells a person to
  fix -> ``needs_human``; "Drain the GPU and reset it or reboot the node", or a pending row
  remap -> ``reset_gpu``; DCGM's own internal errors -> ``could_not_run``). A warning ->
  healthy, with a degrading note. Ids and next steps from DCGM's
  ``dcgm_errors.h`` (NVIDIA/DCGM ``dcgmlib/dcgm_errors.h``; NVIDIA/go-dcgm vendors it).
- **Thermal throttling** (the clocks slowed by a HW or SW thermal slowdown, not a power cap) ->
  ``repair``. NVIDIA's guidance is about the machine, not the GPU: DCGM's next step for
  ``DCGM_FR_CLOCK_THROTTLE_THERMAL`` is "Verify that the cooling on this machine is functional,
  including external, thermal material interface, fans" (``dcgm_errors.h``), and NVSentinel
  treats a GPU past its HW-slowdown temperature as fatal: cordon, ``CONTACT_SUPPORT``
  (https://docs.nvidia.com/nvsentinel/runbooks/gpu-thermal-margin.md). A reset or a reboot
  leaves the cooling as it was, and a cloud tenant reaches a host's cooling only through the
  provider's repair; meanwhile the node is slow, and a slow node slows every collective it is
  in.

The same rules decide on what a busy node's dcgm-exporter serves (:func:`decide_passive`,
``passive``: the last Xid, row remaps, volatile ECC, NVLink state, thermal slowdown), read
passively while a job holds the GPUs.

Left out of the catalog: none of the codes asked for (13, 31, 43, 45, 48, 61, 62, 63, 64, 74,
79, 92, 94, 95, 119, 120, 140, 154) lacked a bucket in NVIDIA's catalog; 46 is added. Xid 61
(``PMU_BREAKPOINT``) is "Unused" on A100, H100, B100 and GB200: the catalog's bucket for unused
codes, ``CONTACT_SUPPORT``.
"""

from gpufleet.domain.health.catalog import (
    BURN_IN_TESTS,
    DCGM_ERROR_ACTIONS,
    RECOVERY_ACTIONS,
    XID_CATALOG,
    Finding,
    HealthAction,
    HealthDecision,
    HealthVerdict,
    XidEntry,
    repair_kind,
    verdict_of,
)
from gpufleet.domain.health.decide import burn_in_ran, counts_as_burn_in, decide_health
from gpufleet.domain.health.passive import PASSIVE, decide_passive

__all__ = [
    "BURN_IN_TESTS",
    "DCGM_ERROR_ACTIONS",
    "PASSIVE",
    "RECOVERY_ACTIONS",
    "XID_CATALOG",
    "Finding",
    "HealthAction",
    "HealthDecision",
    "HealthVerdict",
    "XidEntry",
    "burn_in_ran",
    "counts_as_burn_in",
    "decide_health",
    "decide_passive",
    "repair_kind",
    "verdict_of",
]
