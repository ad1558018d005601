"""Which transport did NCCL actually use? Read it from ``NCCL_DEBUG=INFO`` output.

- ``transports``: the transport classes, a network name's class, which class is worse;
- ``lines``: the NCCL INFO lines that matter (needles, regexes) and cutting them out of bytes;
- ``facts``: what a scan has found so far (:class:`~.facts.LogFacts`), one recorder per line kind;
- ``scanner``: where each line is searched for, streaming and in constant memory;
- ``answer``: from the facts to :class:`NcclLogInfo` (transport, GPUDirect RDMA, ranks, version);
- ``reader``: the entry points, :func:`classify_nccl_log` over lines handed in and
  :func:`classify_nccl_log_file`, the only function here that opens a file;
- ``init_timings``: how long each rank's communicator init took, per phase (``Init timings``),
  and which ranks finished it (``Init COMPLETE``), from the lines handed in.

No Airflow, no clients, nothing of ours but ``gpufleet.errors`` and these modules.
"""

from gpufleet.parsing.nccl_log.answer import NcclLogInfo
from gpufleet.parsing.nccl_log.reader import classify_nccl_log, classify_nccl_log_file
from gpufleet.parsing.nccl_log.scanner import CHUNK_BYTES, HEAD_BYTES, WINDOW_AFTER, WINDOW_BEFORE
from gpufleet.parsing.nccl_log.transports import TRANSPORT_CLASSES, classify_network_name

__all__ = [
    "CHUNK_BYTES",
    "HEAD_BYTES",
    "TRANSPORT_CLASSES",
    "WINDOW_AFTER",
    "WINDOW_BEFORE",
    "NcclLogInfo",
    "classify_nccl_log",
    "classify_nccl_log_file",
    "classify_network_name",
]
