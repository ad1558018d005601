"""NCCL logs as people paste them: launcher prefixes, log-viewer copies, NCCL before 2.7 (no
``Using network`` line), aws-ofi-nccl on a TCP provider; and contradictory facts refused.

The fixtures are modelled on public pastes (tests/data/parsing/README.md names each source).
"""

# ruff: noqa: E501  (verbatim NCCL lines are wider than 100 columns)

from __future__ import annotations

import pytest

from gpufleet.parsing import classify_nccl_log
from tests.support.nccl_logs import both, lines_of

# ------------------------------------------------------------------------------- NCCL < 2.7


@pytest.mark.parametrize(
    ("name", "transport", "network", "version", "gdrdma"),
    [
        ("nccl_log_v2_5_rank_labels_ib.log", "ib", "IB", "2.5.6+cuda10.1", None),
        ("nccl_log_v2_4_no_ib_device_socket.log", "socket", "Socket", "2.4.7+cuda9.2", False),
        ("nccl_log_v2_6_ompi_tagged_ofi_tcp.log", "ofi-tcp", "OFI", "2.6.4+cuda10.1", False),
    ],
)
def test_old_nccl_without_a_using_network_line(name, transport, network, version, gdrdma):
    info = both(name)
    assert info.transport == transport
    assert info.network_name == network
    assert info.nccl_version == version
    assert info.gdrdma is gdrdma
    assert any("no 'Using network' line" in e for e in info.evidence), info.evidence


def test_old_nccl_ib_link_layer_and_processes():
    info = both("nccl_log_v2_5_rank_labels_ib.log")
    assert info.link_layer == "IB"
    assert info.ranks_seen == 16  # every process that initialised the network


def test_old_nccl_ofi_tcp_provider_is_tcp_not_efa():
    info = both("nccl_log_v2_6_ompi_tagged_ofi_tcp.log")
    assert info.ofi_provider == "tcp;ofi_rxm"
    assert info.transport != "ofi-efa"
    assert any("Selected Provider is tcp;ofi_rxm" in e for e in info.evidence)


def test_v2_4_bootstrap_socket_line_is_not_a_socket_choice():
    """NCCL 2.4 logs its bootstrap as ``NET/Socket : Using``; the same process then initialising
    NET/IB chose IB. The head of the log (before any channel line) must not read as sockets."""
    full = both("nccl_log_v2_4_socket_bootstrap_ib.log")
    assert (full.transport, full.gdrdma, full.ranks) == ("ib", False, 8)
    lines = lines_of("nccl_log_v2_4_socket_bootstrap_ib.log")
    head = lines[: next(i for i, ln in enumerate(lines) if "via NET/" in ln)]
    info = classify_nccl_log(head)
    assert info.transport == "ib"
    assert info.network_name == "IB"
    assert not any("disagree" in e for e in info.evidence)


def test_old_nccl_one_process_fell_back_to_sockets():
    lines = lines_of("nccl_log_v2_5_rank_labels_ib.log")
    fallback = [
        "[16] ib-node-03:6001:6001 [0] NCCL INFO NET/IB : No device found.",
        "[16] ib-node-03:6001:6001 [0] NCCL INFO NET/Socket : Using [0]eth0:10.100.0.13<0>",
    ]
    info = classify_nccl_log(lines + fallback)
    assert info.transport == "socket"
    assert any("disagree" in e for e in info.evidence)


def test_modern_log_cut_before_its_using_network_line_stays_honest():
    """A modern process initialises both IB and Socket; with no ``Using network`` line the
    initialised networks alone do not make it a socket run."""
    lines = [
        "n1:10:11 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>",
        "n1:10:11 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
    ]
    assert classify_nccl_log(lines).transport != "socket"


def test_a_current_version_without_its_using_network_line_is_unknown():
    """NCCL >= 2.7 prints ``Using network``; without it the log was cut, and the initialised
    transports alone do not say which one carried the data."""
    lines = [
        "NCCL version 2.21.5+cuda12.4",
        "n1:10:11 [0] NCCL INFO NET/IB : No device found.",
        "n1:10:11 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
    ]
    info = classify_nccl_log(lines)
    assert info.transport == "unknown"
    assert any("cut short" in e for e in info.evidence)
    assert classify_nccl_log(lines[1:]).transport == "socket"  # no version: read as NCCL < 2.7


def test_old_nccl_lines_far_beyond_the_head_are_read():
    """A socket fallback logged megabytes into an old log (no windows to search around) counts."""
    lines = lines_of("nccl_log_v2_5_rank_labels_ib.log")
    noise = (
        "[3] ib-node-01:5333:5502 [3] NCCL INFO AllReduce: opCount 1f sendbuff 0x7f00 count 262144"
    )
    lines += [noise] * 40_000  # about 3.4 MB
    lines.append(
        "[16] ib-node-03:6001:6001 [0] NCCL INFO NET/Socket : Using [0]eth0:10.100.0.13<0>"
    )
    assert classify_nccl_log(lines).transport == "socket"


def test_a_using_network_line_outranks_old_wording():
    lines = lines_of("nccl_log_v2_4_no_ib_device_socket.log")
    lines.append("ip-10-0-0-20:45380:45448 [0] NCCL INFO Using network IB")
    info = classify_nccl_log(lines)
    assert info.transport == "ib"


# ------------------------------------------------------------------------------- prefixes


def test_log_viewer_two_column_copy():
    """CloudWatch's console copies "| time | line", sometimes the time glued to the line and the
    line repeated after " | ": the network name is read once, without the copy."""
    info = both("nccl_log_cloudwatch_two_column_efa.log")
    assert info.transport == "ofi-efa"
    assert info.network_name == "Libfabric"
    assert info.ofi_provider == "efa"
    assert info.gdrdma is True
    assert info.ranks == 2
    assert info.nccl_version == "2.21.5+cuda12.8"


def test_two_column_copy_of_an_ib_log_is_ib():
    text = "n1:10:11 [0] NCCL INFO Using network IB"
    info = classify_nccl_log([f"  | 2025-05-16T16:39:51.208-07:00{text} | {text}"])
    assert (info.transport, info.network_name) == ("ib", "IB")


@pytest.mark.parametrize(
    "suffix",
    ['\\n","stream":"stdout","time":"2025-01-01T00:00:00.1Z"}', "\x1b[0m", "\t(rank 0)"],
)
def test_what_a_log_collector_appends_is_not_part_of_the_name(suffix):
    info = classify_nccl_log([f"n1:10:11 [0] NCCL INFO Using network IB{suffix}"])
    assert (info.transport, info.network_name) == ("ib", "IB")


IB_RUN = [
    "{host}:101:201 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
    "{host}:101:201 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>",
    "{host}:101:201 [0] NCCL INFO Using network IB",
    "{host}:101:201 [0] NCCL INFO ncclCommInitRank comm 0x1 rank {rank} nranks 2 cudaDev 0 busId 1000 - Init START",
]


@pytest.mark.parametrize(
    "prefix",
    [
        "[1,{rank}]<stdout>:",
        "[{rank}] ",
        "{rank}: ",
        "worker-{rank}: ",
        "[default{rank}]:",
        "2025-05-16T16:39:51.{rank}08Z ",
        "2025-05-16T16:39:51.{rank}08123456Z stdout F ",
        "2025-05-16T16:39:51.{rank}08Z",  # glued: a copy from a log viewer
        "  | 2025-05-16T16:39:51.{rank}08Z | ",
    ],
)
def test_launcher_and_viewer_prefixes(prefix):
    """Two ranks on two hosts, then on one host: prefixes change neither answer."""
    two_hosts = [
        prefix.format(rank=r) + ln.format(host=f"node-{'ab'[r]}", rank=r)
        for r in (0, 1)
        for ln in IB_RUN
    ]
    info = classify_nccl_log(two_hosts)
    assert (info.transport, info.link_layer, info.ranks, info.ranks_seen) == ("ib", "IB", 2, 2)
    one_host = [
        prefix.format(rank=r) + ln.format(host="node-a", rank=r) for r in (0, 1) for ln in IB_RUN
    ]
    single = classify_nccl_log(one_host)
    assert single.transport == "none", single.evidence
    assert any("on host node-a" in e for e in single.evidence)


# ------------------------------------------------------------------------------- contradictions


@pytest.mark.parametrize(
    ("bad", "word"),
    [
        (
            "n1:10:11 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 7 nranks 2 cudaDev 0 busId 1000 - Init START",
            "rank 7",
        ),
        (
            "n1:10:11 [0] NCCL INFO comm 0x1 rank 7 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
            "rank 7",
        ),
        (
            "n1:10:11 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 0 localRanks 1 localRank 0 MNNVL 0",
            "nNodes 0",
        ),
        (
            "n1:10:11 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 3 localRanks 1 localRank 0 MNNVL 0",
            "nNodes 3",
        ),
        (
            "n1:10:11 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 3 localRank 0 MNNVL 0",
            "localRanks 3",
        ),
        (
            "n1:10:11 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 1 MNNVL 0",
            "localRank 1 with localRanks 1",
        ),
        (
            "n1:10:11 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 0 cudaDev 0 busId 1000 - Init START",
            "nranks 0",
        ),
    ],
)
def test_contradictory_facts_are_refused_and_named(bad, word):
    good = [
        "n1:10:11 [0] NCCL INFO Using network IB",
        "n1:10:11 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
        "n2:10:11 [0] NCCL INFO comm 0x1 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
    ]
    clean = classify_nccl_log(good)
    assert clean.problems == ()
    info = classify_nccl_log([*good, bad])
    assert info.ranks == 2 and info.ranks_seen == 2  # the contradictory line is not believed
    assert info.transport == "ib"
    assert any(word in p for p in info.problems), info.problems


def test_nnodes_zero_does_not_make_a_single_node_answer():
    lines = [
        "n1:10:11 [0] NCCL INFO Using network IB",
        "n1:10:11 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 0 localRanks 1 localRank 0 MNNVL 0",
        "n2:10:11 [0] NCCL INFO comm 0x1 rank 1 nRanks 2 nNodes 0 localRanks 1 localRank 0 MNNVL 0",
    ]
    info = classify_nccl_log(lines)
    assert info.transport == "ib"
    assert info.problems


def test_clean_fixtures_have_no_problems():
    for name in (
        "nccl_log_ib_2node_gdr.log",
        "nccl_log_single_node.log",
        "nccl_log_v2_5_rank_labels_ib.log",
        "nccl_log_cloudwatch_two_column_efa.log",
    ):
        assert both(name).problems == (), name
