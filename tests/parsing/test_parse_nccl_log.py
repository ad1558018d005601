"""Which transport NCCL used, read from NCCL_DEBUG=INFO logs."""

# ruff: noqa: E501  (verbatim NCCL / nccl-tests lines are wider than 100 columns)

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsing import (
    TRANSPORT_CLASSES,
    NcclLogInfo,
    classify_nccl_log,
    classify_nccl_log_file,
    classify_network_name,
    nccl_log,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "parsing"


def both(name: str) -> NcclLogInfo:
    """Classify a fixture through the file reader and the line iterator: they must agree."""
    path = DATA / name
    from_file = classify_nccl_log_file(path)
    with open(path, encoding="utf-8") as handle:
        from_lines = classify_nccl_log(handle)
    assert from_file == from_lines
    return from_file


@pytest.mark.parametrize(
    ("name", "transport", "network", "gdrdma", "version", "ranks"),
    [
        ("nccl_log_ib_2node_gdr.log", "ib", "IB", True, "2.21.5+cuda12.4", 16),
        ("nccl_log_roce_no_gdr.log", "roce", "IB", False, "2.19.3+cuda12.3", 4),
        ("nccl_log_socket_fallback.log", "socket", "Socket", False, "2.21.5+cuda12.4", 16),
        ("nccl_log_bootstrap_socket_trap_ib.log", "ib", "IB", True, "2.18.6+cuda12.2", 8),
        ("nccl_log_mixed_ib_socket.log", "socket", "Socket", False, "2.21.5+cuda12.4", 8),
        ("nccl_log_efa_aws_libfabric.log", "ofi-efa", "AWS Libfabric", True, "2.20.5+cuda12.2", 16),
        ("nccl_log_ofi_tcp.log", "ofi-tcp", "Libfabric", False, "2.23.4+cuda12.6", 4),
        ("nccl_log_gke_gib.log", "gib", "gIB", True, "2.25.1+cuda12.8", 16),
        ("nccl_log_gke_tcpx.log", "tcpx", "GPUDirectTCPX_v7", False, "2.18.1+cuda12.2", 16),
        ("nccl_log_gke_tcpxo_fastrak.log", "tcpxo", "FasTrak", True, "2.21.5+cuda12.4", 16),
        ("nccl_log_single_node.log", "none", "IB", None, "2.21.5+cuda12.4", 8),
        ("nccl_log_unknown_network_ucx.log", "ucx", "UCX", True, "2.19.3+cuda12.2", 8),
        ("nccl_log_no_network_info.log", "unknown", None, None, None, None),
    ],
)
def test_fixture_transport(name, transport, network, gdrdma, version, ranks):
    info = both(name)
    assert info.transport == transport
    assert info.network_name == network
    assert info.gdrdma is gdrdma
    assert info.nccl_version == version
    assert info.ranks == ranks
    assert info.evidence  # always says why


def test_link_layers():
    assert both("nccl_log_ib_2node_gdr.log").link_layer == "IB"
    assert both("nccl_log_roce_no_gdr.log").link_layer == "RoCE"
    assert both("nccl_log_socket_fallback.log").link_layer is None


def test_ofi_providers():
    efa = both("nccl_log_efa_aws_libfabric.log")
    assert efa.ofi_provider == "efa"
    assert any("Selected Provider is efa" in e for e in efa.evidence)
    assert both("nccl_log_ofi_tcp.log").ofi_provider == "tcp"


def test_bootstrap_socket_lines_do_not_decide():
    text = (DATA / "nccl_log_bootstrap_socket_trap_ib.log").read_text()
    assert "NET/Socket : Using [0]eth0" in text and "Bootstrap : Using eth0" in text
    info = both("nccl_log_bootstrap_socket_trap_ib.log")
    assert info.transport == "ib"
    assert not any("disagree" in e for e in info.evidence)


def test_mixed_ranks_report_the_worst_and_say_so():
    info = both("nccl_log_mixed_ib_socket.log")
    assert info.transport == "socket"
    assert info.ranks_seen == 8
    disagreement = [e for e in info.evidence if "disagree" in e]
    assert len(disagreement) == 1
    assert "IB (ib, 4 line(s))" in disagreement[0]
    assert "Socket (socket, 4 line(s))" in disagreement[0]
    assert any("NET/IB : No device found" in e for e in info.evidence)


def test_single_node_uses_no_network():
    info = both("nccl_log_single_node.log")
    assert info.transport == "none"
    assert info.gdrdma is None
    assert any("single node" in e for e in info.evidence)


def test_single_node_told_by_hosts_when_no_nnodes_line():
    """Without an ``nNodes`` line, every rank of the communicator on one host means one node."""

    def log(hosts: list[str]) -> list[str]:
        lines = [f"{hosts[0]}:10:11 [0] NCCL INFO Using network IB"]
        lines += [
            f"{host}:{10 + rank}:11 [{rank}] NCCL INFO ncclCommInitRank comm 0x1 rank {rank} "
            f"nranks {len(hosts)} cudaDev {rank} busId 1000 - Init START"
            for rank, host in enumerate(hosts)
        ]
        return lines

    info = classify_nccl_log(log(["n1", "n1"]))
    assert info.transport == "none"
    assert any("on host n1" in e for e in info.evidence)
    assert classify_nccl_log(log(["n1", "n2"])).transport == "ib"


def test_gdr_unknown_when_the_log_does_not_show_it():
    lines = [
        "n1:10:11 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
        "n1:10:11 [0] NCCL INFO Using network IB",
        "n1:10:11 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0",
    ]
    info = classify_nccl_log(lines)
    assert info.transport == "ib"
    assert info.gdrdma is None
    assert info.ranks == 16 and info.ranks_seen == 1


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("n1:10:11 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1", True),
        ("n1:10:11 [0] NCCL INFO Connected all rings, use ring PXN 1 GDR 0", False),
        (
            "n1:10:11 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 1b000 / HCA 0 "
            "(distance 4 <= 4), read 1 mode Default",
            True,
        ),
        (
            "n1:10:11 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 1b000 / HCA 0 "
            "(distance 7 > 5)",
            False,
        ),
        ("n1:10:11 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'", True),
        ("n1:10:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA", True),
        ("n1:10:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0", False),
        (
            "n1:10:11 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0(1)/GDRDMA/Shared",
            True,
        ),
    ],
)
def test_gdr_evidence_kinds(extra, expected):
    lines = [
        "n1:10:11 [0] NCCL INFO Using network IB",
        "n1:10:11 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0",
        extra,
    ]
    assert classify_nccl_log(lines).gdrdma is expected


def test_channel_lines_outrank_topology_lines():
    lines = [
        "n1:10:11 [0] NCCL INFO Using network IB",
        "n1:10:11 [0] NCCL INFO GPU Direct RDMA Enabled for GPU 1b000 / HCA 0 (distance 4 <= 4), read 1",
        "n1:10:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0",
    ]
    info = classify_nccl_log(lines)
    assert info.gdrdma is False
    assert "n1:10:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0" in info.evidence


def test_partial_gdr_near_init_is_named():
    lines = [
        "n1:10:11 [0] NCCL INFO Using network IB",
        "n1:10:11 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0",
        "n1:10:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
        "n1:10:11 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA",
        "n1:12:13 [2] NCCL INFO Channel 00/0 : 2[2] -> 10[2] [send] via NET/IB/1",
    ]
    info = classify_nccl_log(lines)
    assert info.gdrdma is True  # any channel with GDRDMA
    assert any("GDRDMA on 2 of 3 'via NET/' channel lines" in e for e in info.evidence)


def test_old_internal_network_wording_and_plugin_line():
    info = classify_nccl_log(
        [
            "host:1:1 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
            "host:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
            "host:1:1 [0] NCCL INFO Using internal Network Socket",
            "host:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE",
        ]
    )
    assert info.transport == "socket"
    assert info.network_name == "Socket"
    assert info.ranks == 2
    # "Using internal network plugin." is a plugin-loader message, not a network choice
    info = classify_nccl_log(
        [
            "h:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
            "h:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        ]
    )
    assert info.transport == "unknown"


def test_network_only_from_channel_lines():
    info = classify_nccl_log(
        [
            "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0",
            "h:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0",
        ]
    )
    assert info.transport == "socket"
    assert any("channel lines" in e for e in info.evidence)


def test_crlf_bytes_and_glued_timestamps():
    lines = [
        b"2025-05-16T16:39:51.208-07:00ip-10-36-29-253:79:79 [0] NCCL INFO NCCL version 2.21.5+cuda12.8\r\n",
        b"2025-05-16T16:39:51.209-07:00ip-10-36-29-253:79:90 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)\r\n",
        b"2025-05-16T16:39:51.210-07:00ip-10-36-29-253:79:90 [0] NCCL INFO Using network Libfabric\r\n",
    ]
    info = classify_nccl_log(lines)
    assert info.transport == "ofi-efa"
    assert info.network_name == "Libfabric"
    assert info.nccl_version == "2.21.5+cuda12.8"


def test_not_an_nccl_log_raises():
    with pytest.raises(ParseError, match="NCCL_DEBUG=INFO"):
        classify_nccl_log(["hello", "world"])
    with pytest.raises(ParseError):
        classify_nccl_log([])


@pytest.mark.parametrize(
    ("name", "layers", "providers", "expected"),
    [
        ("IB", [], [], "ib"),
        ("IB", ["IB"], [], "ib"),
        ("IB", ["RoCE"], [], "roce"),
        ("IBext_v8", ["IB"], [], "ib"),
        ("Socket", [], [], "socket"),
        ("AWS Libfabric", [], ["efa"], "ofi-efa"),
        ("Libfabric", [], ["tcp;ofi_rxm"], "ofi-tcp"),
        ("OFI", [], ["sockets"], "ofi-tcp"),
        ("Libfabric", [], ["efa", "tcp"], "ofi-tcp"),
        ("Libfabric", [], [], "libfabric"),
        ("AWS Libfabric", [], ["verbs"], "aws libfabric"),
        ("gIB", [], [], "gib"),
        ("GPUDirectTCPX_v7", [], [], "tcpx"),
        ("GPUDirectTCPXO", [], [], "tcpxo"),
        ("FasTrak", [], [], "tcpxo"),
        ("FastSocket", [], [], "fastsocket"),
        ("UCX", [], [], "ucx"),
    ],
)
def test_classify_network_name(name, layers, providers, expected):
    assert classify_network_name(name, layers, providers) == expected


def test_transport_classes_are_the_documented_set():
    assert set(TRANSPORT_CLASSES) == {
        "ib",
        "roce",
        "socket",
        "ofi-efa",
        "ofi-tcp",
        "gib",
        "tcpx",
        "tcpxo",
        "none",
        "unknown",
    }


# ------------------------------------------------------------------------------- streaming


def _noise(n: int, start: int = 0) -> list[str]:
    return [
        f"gpu-{i % 4}:{100 + i % 8}:{200 + i % 8} [{i % 8}] NCCL INFO AllReduce: opCount {i:x} "
        f"sendbuff 0x7f00 recvbuff 0x7f00 count 262144 datatype 7 op 0 root 0 comm 0x5617a0 "
        f"[nranks=16] stream 0x5617b0"
        for i in range(start, start + n)
    ]


def test_big_file_across_chunk_boundaries(tmp_path):
    """Facts on both sides of 8 MiB chunk edges, far beyond the head region, are all found."""
    chunk = nccl_log.CHUNK_BYTES
    line_len = len(_noise(1)[0]) + 1
    per_chunk = chunk // line_len
    lines: list[str] = []
    lines += _noise(per_chunk * 2 - 3)
    # NET/IB device line at the very end of chunk 2, its network line just after the edge
    lines.append(
        "gpu-9:7:8 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE; OOB eth0:1.2.3.4<0>"
    )
    lines += _noise(6, 10**6)
    lines.append("gpu-9:7:8 [0] NCCL INFO Using network IB")
    lines.append(
        "gpu-9:7:8 [0] NCCL INFO ncclCommInitRank comm 0x9 rank 5 nranks 16 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x1 - Init START"
    )
    lines.append(
        "gpu-9:7:8 [0] NCCL INFO comm 0x9 rank 5 nRanks 16 nNodes 2 localRanks 8 localRank 5 MNNVL 0"
    )
    lines += _noise(per_chunk * 2, 2 * 10**6)
    # much later, one rank fell back to sockets, and GDRDMA channel lines show up late
    lines.append("gpu-3:9:9 [3] NCCL INFO Using network Socket")
    lines += _noise(per_chunk, 4 * 10**6)
    lines.append("gpu-9:7:8 [0] NCCL INFO Channel 02/0 : 5[0] -> 13[0] [send] via NET/IB/0/GDRDMA")
    lines += _noise(1000, 6 * 10**6)
    path = tmp_path / "big.log"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size > 5 * chunk

    info = classify_nccl_log_file(path)
    assert info.transport == "socket"  # the late fallback is not missed
    assert info.link_layer == "RoCE"  # found by looking back across the chunk edge
    assert info.gdrdma is True
    assert info.ranks == 16
    assert any("disagree" in e for e in info.evidence)
    assert classify_nccl_log(iter(lines)) == info


def test_very_long_line_and_missing_final_newline(tmp_path):
    path = tmp_path / "long.log"
    path.write_bytes(
        b"x" * (nccl_log.CHUNK_BYTES + 123)
        + b"\nh:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:1.1.1.1<0>"
        + b"\nh:1:2 [0] NCCL INFO Using network IB"
    )
    info = classify_nccl_log_file(path)
    assert info.transport == "ib"
    assert info.link_layer == "IB"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")
def test_file_reader_joins_a_line_that_arrives_in_pieces(tmp_path):
    """A pipe hands over what has been written so far: a line cut mid-word is joined again."""
    fifo = tmp_path / "nccl.pipe"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "wb", buffering=0) as pipe:
            pipe.write(b"h:1:2 [0] NCCL INFO Using netw")
            time.sleep(0.3)  # the reader takes the first piece alone
            pipe.write(b"ork IB\n")

    writer = threading.Thread(target=write)
    writer.start()
    try:
        info = classify_nccl_log_file(fifo)
    finally:
        writer.join(timeout=10)
    assert info.transport == "ib"
    assert info.network_name == "IB"
