"""Verdicts on real-format output: transport first, then correctness, plateau and latency."""

from __future__ import annotations

import pytest

from gpufleet.backends.sim.output import LinkModel, fio_json, nccl_info_log, nccl_tests_text
from gpufleet.config.baselines import find_baseline
from gpufleet.domain.verdicts import PairVerdict, judge_pair, judge_pool, judge_storage
from gpufleet.parsing import StorageResult, classify_nccl_log, parse_fio_json, parse_nccl_tests

BASE = find_baseline("H200", 8, 2, "all_reduce", "gib")
NODES = ("n0", "n1")


def run_of(busbw: float, latency: float, max_bytes: int = 8 * 2**30, text_edit=None):
    text = nccl_tests_text(
        collective="all_reduce",
        hosts=list(NODES),
        gpus_per_node=8,
        gpu_model="H200",
        link=LinkModel(busbw, latency),
        max_bytes=max_bytes,
    )
    if text_edit:
        text = text_edit(text)
    return parse_nccl_tests(text).runs[0]


def log_of(network: str, gdrdma: bool = True, **kw):
    lines = []
    for i, host in enumerate(NODES):
        lines += nccl_info_log(
            host=host,
            first_rank=8 * i,
            gpus_per_node=8,
            nranks=16,
            network=network,
            gdrdma=gdrdma,
            **kw,
        ).splitlines()
    return classify_nccl_log(lines)


def judge(run, log, **kw):
    args = {"expected_transport": "gib", "expect_gdrdma": True, "baseline": BASE, "tolerance": 0.9}
    args.update(kw)
    return judge_pair(NODES, run=run, log=log, **args)


def test_baseline_is_the_seed_figure():
    assert BASE.busbw_gbps == 355 and "355" in BASE.source


def test_healthy_pair_passes_with_its_figures():
    v = judge(run_of(355, 31), log_of("gIB"))
    assert v.passed, v.reasons
    assert v.transport == "gib" and v.gdrdma is True and v.wrong == 0
    assert 340 < v.busbw_gbps < 360 and 25 < v.small_latency_us < 40
    assert "gib with GDRDMA" in v.reasons[0]


def test_socket_fallback_fails_even_with_full_bandwidth():
    v = judge(run_of(350, 31), log_of("Socket"))
    assert not v.passed
    assert v.reasons == (
        "NCCL used socket instead of the expected gib: a silent fallback to TCP sockets",
    )


def test_latency_catches_tcp_that_matches_bandwidth():
    v = judge(run_of(350, 210), log_of("gIB"))
    assert not v.passed and "small-message latency" in v.reasons[0]


def test_low_plateau_fails_and_footer_average_is_not_used():
    v = judge(run_of(200, 31), log_of("gIB"))
    assert not v.passed
    assert "below 319.5 GB/s (90% of the 355 GB/s baseline)" in v.reasons[0]
    healthy = run_of(355, 31)
    assert healthy.avg_busbw_gbps < 0.9 * 355  # the footer would have failed a healthy pair
    assert judge(healthy, log_of("gIB")).passed


def test_gdrdma_missing_fails():
    v = judge(run_of(355, 31), log_of("gIB", gdrdma=False))
    assert not v.passed and v.reasons == ("GPUDirect RDMA was not used",)


def test_wrong_results_fail():
    def corrupt(text):
        lines = text.splitlines()
        lines[-6] = lines[-6][:-5] + "    3"  # in-place #wrong of a large size
        return "\n".join(lines) + "\n"

    v = judge(run_of(355, 31, text_edit=corrupt), log_of("gIB"))
    assert not v.passed and "3 wrong results" in " ".join(v.reasons)


def test_unchecked_results_fail_closed():
    def unchecked(text):  # what -c 0 prints: N/A in both #wrong columns of every row
        out = []
        for line in text.splitlines():
            cells = line.split()
            if cells and cells[0].isdigit():
                cells[8] = cells[12] = "N/A"
                line = "  ".join(cells)
            out.append(line)
        return "\n".join(out) + "\n"

    v = judge(run_of(355, 31, text_edit=unchecked), log_of("gIB"))
    assert not v.passed and any("not checked" in r for r in v.reasons)


def test_no_large_messages_cannot_pass():
    v = judge(run_of(355, 31, max_bytes=64 * 2**20), log_of("gIB"))
    assert not v.passed and "no message size of at least 1024 MiB" in v.reasons[0]


def test_missing_inputs_fail_closed():
    assert not judge(None, log_of("gIB")).passed
    assert "transport is unknown" in judge(run_of(355, 31), None).reasons[0]
    assert "no baseline" in judge(run_of(355, 31), log_of("gIB"), baseline=None).reasons[0]
    v = judge(run_of(355, 31), log_of("gIB"), failure="pod x failed: OOMKilled")
    assert not v.passed and v.reasons[0] == "pod x failed: OOMKilled"


def test_storage_verdicts():
    ok = [
        parse_fio_json(fio_json(host=f"n{i}", write_mib_s=4400, read_mib_s=4500)) for i in range(4)
    ]
    v = judge_storage(ok, expected_mb_s=18000, tolerance=0.9)
    assert v.passed and v.read_mb_s == pytest.approx(4 * 4500 * 2**20 / 1e6, rel=0.02)
    slow = [StorageResult(read_mib_s=1000.0, write_mib_s=900.0, read_iops=None, write_iops=None)]
    v = judge_storage(slow, expected_mb_s=18000, tolerance=0.9)
    assert not v.passed
    assert v.reasons[0] == (
        "read throughput 1,049 MB/s is below 16,200 MB/s (90% of the 18,000 MB/s tier x capacity)"
    )
    missing = [StorageResult(read_mib_s=None, write_mib_s=20000.0, read_iops=None, write_iops=None)]
    assert (
        "read throughput is missing"
        in judge_storage(missing, expected_mb_s=100, tolerance=0.9).reasons[0]
    )
    assert not judge_storage([], expected_mb_s=100, tolerance=0.9).passed


def pv(a, b, passed, transport="gib", busbw=350.0):
    return PairVerdict((a, b), passed, ("x",), transport, True, busbw, 31.0, 0)


def test_pool_verdicts():
    common = {"pool_nodes": 6, "max_quarantine_share": 0.2, "expected_transport": "gib"}
    tested = [f"n{i}" for i in range(6)]
    all_fail = judge_pool(
        tested=tested,
        pass1=[pv("n0", "n1", False, "socket"), pv("n2", "n3", False, "socket")],
        bad={},
        inconclusive=["n0"],
        untested=[],
        **common,
    )
    assert not all_fail.passed and all_fail.page and all_fail.state == "degraded"
    assert "transport observed: socket (expected gib)" in all_fail.reasons
    one_bad = judge_pool(
        tested=tested,
        pass1=[pv("n0", "n1", True), pv("n2", "n3", False)],
        bad={"n2": "low busbw"},
        inconclusive=[],
        untested=[],
        **common,
    )
    assert one_bad.passed and one_bad.quarantine == {"n2": "low busbw"}
    too_many = judge_pool(
        tested=tested,
        pass1=[pv("n0", "n1", True), pv("n2", "n3", False), pv("n4", "n5", False)],
        bad={"n2": "x", "n4": "y"},
        inconclusive=[],
        untested=[],
        **common,
    )
    assert not too_many.passed and too_many.quarantine == {} and too_many.page
    stuck = judge_pool(
        tested=tested,
        pass1=[pv("n0", "n1", True), pv("n2", "n3", False)],
        bad={},
        inconclusive=["n2"],
        untested=[],
        **common,
    )
    assert not stuck.passed and "could not localize n2" in stuck.reasons[0]
    assert not judge_pool(
        tested=[], pass1=[], bad={}, inconclusive=[], untested=[], **common
    ).passed


def _repeat_last_row(text: str) -> str:
    """Replay the largest size's row once more (a log collector that repeated a line)."""
    lines = text.splitlines()
    rows = [i for i, line in enumerate(lines) if line.strip()[:1].isdigit()]
    last = rows[-1]
    return "\n".join([*lines[: last + 1], lines[last], *lines[last + 1 :]]) + "\n"


def test_a_run_the_parser_does_not_trust_fails_even_when_not_truncated():
    run = run_of(355, 31, text_edit=_repeat_last_row)
    assert run.problems and not run.truncated  # sizes repeated: flagged, figures otherwise fine
    v = judge(run, log_of("gIB"))
    assert not v.passed
    assert any("cannot be trusted" in r and "repeat" in r.lower() for r in v.reasons), v.reasons


def test_a_refused_row_fails_the_pair_with_its_reason():
    def negative_busbw(text: str) -> str:
        lines = text.splitlines()
        last = [i for i, line in enumerate(lines) if line.strip()[:1].isdigit()][-1]
        cells = lines[last].split()
        cells[-2] = "-" + cells[-2]  # the in-place busbw of the largest size
        lines[last] = "  ".join(cells)
        return "\n".join(lines) + "\n"

    run = run_of(355, 31, text_edit=negative_busbw)
    v = judge(run, log_of("gIB"))
    assert not v.passed
    assert any("cannot be trusted" in r for r in v.reasons), v.reasons


def test_a_contradictory_nccl_log_fails_the_pair():
    text = "\n".join(
        line.replace("nranks 16", "nranks 2") if " rank 7 " in line else line
        for line in nccl_info_log(
            host="n0", first_rank=0, gpus_per_node=8, nranks=16, network="gIB", gdrdma=True
        ).splitlines()
    )
    log = classify_nccl_log(
        text.splitlines()
        + nccl_info_log(
            host="n1", first_rank=8, gpus_per_node=8, nranks=16, network="gIB", gdrdma=True
        ).splitlines()
    )
    assert log.problems, "the parser should refuse rank 7 of a 2-rank communicator"
    v = judge(run_of(355, 31), log)
    assert not v.passed
    assert any("NCCL log cannot be trusted" in r for r in v.reasons), v.reasons


def test_storage_with_a_job_that_reported_an_error_fails_with_the_reason():
    import json

    text = fio_json(host="c0", write_mib_s=9000, read_mib_s=9500)
    good = parse_fio_json(text)
    head, brace, body = text.partition("{")  # fio prints a line before its JSON
    report = json.loads(brace + body)
    failed = dict(report["jobs"][0], jobname="seqwrite-eio", error=5)
    report["jobs"].append(failed)
    bad = parse_fio_json(head + json.dumps(report))
    assert bad.problems  # the errored job is named and left out
    assert judge_storage([good, good], expected_mb_s=18000, tolerance=0.9).passed
    v = judge_storage([good, bad], expected_mb_s=18000, tolerance=0.9)
    assert not v.passed
    assert any("cannot be trusted" in r and "seqwrite-eio" in r for r in v.reasons), v.reasons


def test_the_guard_always_allows_one_node_and_counts_those_still_out():
    tested = [f"n{i}" for i in range(4)]
    common = {"pool_nodes": 4, "max_quarantine_share": 0.2, "expected_transport": "gib"}
    pass1 = [pv("n0", "n1", True), pv("n2", "n3", False)]
    one = judge_pool(
        tested=tested, pass1=pass1, bad={"n2": "low"}, inconclusive=[], untested=[], **common
    )
    assert one.passed and one.quarantine == {"n2": "low"}  # 25% > 20%, but one is allowed
    second = judge_pool(
        tested=tested,
        pass1=pass1,
        bad={"n2": "low"},
        inconclusive=[],
        untested=[],
        already_out=["n3"],
        **common,
    )
    assert not second.passed and second.page and second.quarantine == {}
    assert "(1 more already quarantined)" in second.reasons[0]


def test_a_pair_verdict_survives_its_row():
    """What a task's state and the ledger keep of a pair (``as_row``) reads back whole."""
    verdict = PairVerdict(
        nodes=("n0", "n1"),
        passed=False,
        reasons=("NCCL used socket",),
        transport="socket",
        gdrdma=False,
        busbw_gbps=21.5,
        small_latency_us=210.0,
        wrong=0,
        nccl_version="2.27.7",
    )
    assert PairVerdict.from_row(verdict.as_row(1)) == verdict
