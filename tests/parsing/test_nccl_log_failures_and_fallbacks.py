"""NCCL logs of runs that had no RDMA, or tried it and failed: a host without libibverbs (NCCL
2.3, nccl-tests at ``NCCL_DEBUG=WARN``), a RoCE run that ends in an ``ibv_modify_qp`` timeout,
and a single-node NVLS run.

The fixtures are modelled on public pastes (tests/data/parsing/README.md names each source).
"""

# ruff: noqa: E501  (verbatim NCCL lines are wider than 100 columns)

from __future__ import annotations

from gpufleet.parsing import classify_nccl_log, classify_nccl_log_file
from tests.support.nccl_logs import both, lines_of

# ------------------------------------------------------------------- no libibverbs: sockets

V2_3 = "nccl_log_v2_3_no_libibverbs_socket.log"
WARN_BROADCAST = "nccl_log_v2_9_warn_level_broadcast_socket.log"


def test_v2_3_host_without_libibverbs_is_socket():
    info = both(V2_3)
    assert (info.transport, info.network_name, info.gdrdma) == ("socket", "Socket", False)
    assert info.nccl_version == "2.3.5+cuda9.0"
    assert (info.ranks, info.ranks_seen) == (4, 4)
    assert info.failures == ()


def test_v2_3_at_warn_level_the_libibverbs_failure_decides():
    """The same run logged at NCCL_DEBUG=WARN: no INFO line, so no network line at all; each
    process failing to load libibverbs could not start NCCL's IB transport: sockets."""
    warn_only = [ln for ln in lines_of(V2_3) if "NCCL INFO" not in ln]
    assert warn_only and not any("Using internal Network" in ln for ln in warn_only)
    info = classify_nccl_log(warn_only)
    assert (info.transport, info.network_name, info.gdrdma) == ("socket", "Socket", False)
    assert info.ranks_seen == 4  # every process that failed to load libibverbs
    assert any("Failed to open libibverbs.so" in e for e in info.evidence), info.evidence


def test_warn_level_nccl_tests_broadcast_on_sockets():
    """nccl-tests at NCCL_DEBUG=WARN on hosts without libibverbs: NCCL 2.9 prints no
    'Using network' line at WARN, so its absence says nothing; the IB transport could not load."""
    info = both(WARN_BROADCAST)
    assert (info.transport, info.network_name, info.gdrdma) == ("socket", "Socket", False)
    assert info.nccl_version == "2.9.6+cuda11.2"
    assert info.ranks_seen == 2
    assert any("NCCL_DEBUG=WARN" in e for e in info.evidence), info.evidence
    assert any("Failed to open libibverbs.so" in e for e in info.evidence), info.evidence


def test_a_libibverbs_failure_in_an_info_log_cut_before_its_network_line_stays_unknown():
    """At INFO level NCCL >= 2.7 prints 'Using network'; without it the log was cut, and a
    libibverbs failure alone does not say which network (a plugin may carry the data)."""
    lines = [
        "NCCL version 2.21.5+cuda12.4",
        "n1:10:11 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "n1:10:11 [0] NCCL INFO Failed to open libibverbs.so[.1]",
    ]
    info = classify_nccl_log(lines)
    assert info.transport == "unknown"
    assert any("cut short" in e for e in info.evidence)


def test_a_using_network_line_outranks_a_libibverbs_failure():
    lines = lines_of(WARN_BROADCAST)
    lines.append("sock-node-1:14926:14930 [0] NCCL INFO Using network Libfabric")
    assert classify_nccl_log(lines).network_name == "Libfabric"


# ------------------------------------------------------------------- RoCE connection failure

ROCE_FAIL = "nccl_log_roce_modify_qp_timeout.log"


def test_roce_run_that_failed_to_connect_says_so():
    info = both(ROCE_FAIL)
    assert (info.transport, info.network_name, info.link_layer) == ("roce", "IBext_v8", "RoCE")
    assert info.failures, info.evidence
    assert all("ibv_modify_qp" in f and "Connection timed out" in f for f in info.failures)
    assert any("connection failure" in e for e in info.evidence), info.evidence
    assert info.problems == ()  # a failed connection is not a contradictory log


def test_roce_failure_in_a_log_cut_before_its_network_line():
    """Only the device lines and the failure survive: NCCL was connecting over its IB transport
    (ibv_modify_qp) on RoCE devices, and failed -- not 'unknown'."""
    lines = [ln for ln in lines_of(ROCE_FAIL) if "Using network" not in ln and "via NET/" not in ln]
    info = classify_nccl_log(lines)
    assert (info.transport, info.link_layer) == ("roce", "RoCE")
    assert info.failures
    assert any("ibv_modify_qp" in e for e in info.evidence), info.evidence


def test_a_failure_at_the_end_of_a_long_log_is_found(tmp_path):
    """The failure of a run that could not connect ends its log, megabytes past the init
    windows: the scanner looks for it in the log's last bytes."""
    lines = lines_of(ROCE_FAIL)
    cut = next(i for i, ln in enumerate(lines) if "Call to ibv_" in ln)
    noise = "node-01:4242:4300 [0] NCCL INFO comm 0x5600 rank 0 nranks 16 cudaDev 0 busId 1b000 - Abort COMPLETE"
    long_log = [*lines[:cut], *[noise] * 60_000, *lines[cut:]]  # ~6 MiB between init and end
    path = tmp_path / "long.log"
    path.write_text("\n".join(long_log) + "\n", encoding="utf-8")
    assert path.stat().st_size > 4 << 20
    for info in (classify_nccl_log_file(path), classify_nccl_log(long_log)):
        assert any("ibv_modify_qp" in f for f in info.failures), info.evidence


def test_failures_are_empty_for_clean_logs():
    for name in ("nccl_log_ib_2node_gdr.log", "nccl_log_roce_no_gdr.log", V2_3):
        assert both(name).failures == (), name


# ------------------------------------------------------------------- NVLS, one node

NVLS = "nccl_log_nvls_single_node.log"


def test_single_node_nvls_run_uses_no_network():
    info = both(NVLS)
    assert info.transport == "none"
    assert info.gdrdma is None
    assert info.ranks == 8
    assert info.nccl_version == "2.24.3+cuda12.2"
    assert any("single node" in e and "nNodes 1" in e for e in info.evidence), info.evidence
    assert info.failures == ()


def _nvls_v2_19_unprefixed(*, rings: bool = True) -> list[str]:
    """A single-node NVLS run of NCCL 2.19 (8 x H100, one process per GPU) as pasted without
    NCCL's ``host:pid:tid [dev] NCCL INFO`` prefixes, as NVIDIA/nccl#1584 was. NCCL before 2.20
    prints no ``nNodes`` line (``src/init.cc``); its channel lines are NCCL's own wording
    (``src/transport/p2p.cc``, ``src/transport/generic.cc``, ``src/transport/nvls.cc``)."""
    lines = ["NCCL version 2.19.3+cuda12.3"]
    for rank in range(8):
        lines += [
            f"NVLS multicast support is available on dev {rank}",
            f"ncclCommInitRank comm 0x55d9{rank:04x} rank {rank} nranks 8 cudaDev {rank} "
            f"nvmlDev {rank} busId {rank + 1}8000 commId 0x8f0c55e1a9b2d374 - Init START",
            f"Channel 00/0 : {rank}[{rank}] -> {(rank + 1) % 8}[{(rank + 1) % 8}] via P2P/IPC/read",
            f"NVLS comm 0x55d9{rank:04x} headRank {rank} nHeads 8 buffSize 1048576 "
            "memSize 2097152 nvlsPerRankSize 201326592 nvlsTotalSize 1610612736",
        ]
        if rings:
            lines.append("Connected all rings")
        lines.append(
            f"ncclCommInitRank comm 0x55d9{rank:04x} rank {rank} nranks 8 cudaDev {rank} "
            f"nvmlDev {rank} busId {rank + 1}8000 commId 0x8f0c55e1a9b2d374 - Init COMPLETE"
        )
    return lines


def test_unprefixed_single_node_nvls_run_before_nnodes_lines_uses_no_network():
    """Issue 31: read ``unknown`` before. Every rank of the communicator seen, each connected
    within the node, no ``via NET/`` line: no connection crossed a node."""
    info = classify_nccl_log(_nvls_v2_19_unprefixed())
    assert info.transport == "none", info.evidence
    assert any("connected within the node" in e for e in info.evidence), info.evidence


def test_unprefixed_run_without_its_connections_logged_stays_unknown():
    """The same init lines with no channel or ring line: nothing says where the connections went."""
    lines = [line for line in _nvls_v2_19_unprefixed(rings=False) if "via P2P" not in line]
    assert classify_nccl_log(lines).transport == "unknown"


def test_unprefixed_run_with_a_rank_missing_is_not_called_single_node():
    lines = [line for line in _nvls_v2_19_unprefixed() if " rank 7 " not in line]
    assert classify_nccl_log(lines).transport == "unknown"


def test_pod_log_of_a_socket_run_with_cross_node_communicators_is_socket():
    """Issue 31: a socket run in Kubernetes read ``none``. One pod's log (NCCL 2.6, which prints
    no ``Using network`` line) holds its host's 8 ranks of an 8-rank communicator, all on one
    host, and rank 0 of each 2-rank communicator whose other rank runs in the other pod (a
    hybrid-sharded job's inter-node groups). Those span nodes: the transport each process
    initialised (``NET/Socket : Using``) decides."""
    host = "trainer-worker-0"
    lines = [
        f"{host}:{20 + r}:{20 + r} [{r}] NCCL INFO NET/Socket : Using [0]eth0:10.4.0.7<0>"
        for r in range(8)
    ]
    lines += [f"{host}:20:20 [0] NCCL INFO NCCL version 2.6.4+cuda10.2"]
    for r in range(8):
        lines.append(
            f"{host}:{20 + r}:{40 + r} [{r}] NCCL INFO comm 0x7f{r:02x} rank {r} nranks 8 cudaDev {r} "
            f"busId {r + 1}8000 - Init COMPLETE"
        )
        lines.append(
            f"{host}:{20 + r}:{50 + r} [{r}] NCCL INFO comm 0x8f{r:02x} rank 0 nranks 2 cudaDev {r} "
            f"busId {r + 1}8000 - Init COMPLETE"
        )
    info = classify_nccl_log(lines)
    assert info.transport == "socket", info.evidence
    # the same pod's log without the cross-node communicators is one node's run
    local = [line for line in lines if "nranks 2" not in line]
    assert classify_nccl_log(local).transport == "none"
