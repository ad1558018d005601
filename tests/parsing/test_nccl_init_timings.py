"""NCCL communicator init timings (``Init timings`` / ``Init COMPLETE``) from NCCL INFO logs.

The corpus in tests/data/nccl_init/ holds lines from public logs, each with a .yaml sidecar
naming its source and the figures it must give; the shape tests follow NCCL's own printf
formats, release by release (``src/init.cc``)."""

# ruff: noqa: E501  (NCCL lines are wider than 100 columns)

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpufleet.domain.nccl_init import init_alarms
from gpufleet.parsing.nccl_log.init_timings import (
    PHASES,
    InitTimings,
    read_init_timings,
)

CORPUS = Path(__file__).resolve().parents[1] / "data" / "nccl_init"
SIDECARS = sorted(CORPUS.glob("*.yaml"))

V223 = "gpu-a:1201:1268 [1] NCCL INFO Init timings - ncclCommInitRank: rank 1 nranks 16 total 1.99 (kernels 0.33, alloc 1.26, bootstrap 0.08, allgathers 0.02, topo 0.07, graphs 0.02, connections 0.20, rest 0.01)"
V222 = "gpu-a:1201:1268 [1] NCCL INFO Init timings: rank 1 nranks 16 total 1.08 (kernels 0.51, bootstrap 0.22, allgathers 0.01, topo 0.28, graphs 0.04, connections 0.02, rest 0.00)"


def read_file(path: Path) -> InitTimings:
    with open(path, "rb") as handle:
        return read_init_timings(handle)


def both(path: Path) -> InitTimings:
    """Read as bytes (a binary file) and as text lines: they must agree."""
    from_bytes = read_file(path)
    with open(path, encoding="utf-8") as handle:
        from_text = read_init_timings(handle)
    assert from_bytes.as_dict() == from_text.as_dict()
    return from_bytes


def test_the_corpus_is_real_logs_each_with_its_source() -> None:
    logs = sorted(CORPUS.glob("*.log"))
    assert len(SIDECARS) >= 8
    assert {p.stem for p in logs} == {p.stem for p in SIDECARS}
    for sidecar in SIDECARS:
        meta = yaml.safe_load(sidecar.read_text())
        assert meta["source"].startswith("https://github.com/"), sidecar.name
        assert meta["shows"] and meta["expected"], sidecar.name


@pytest.mark.parametrize("sidecar", SIDECARS, ids=[p.stem for p in SIDECARS])
def test_each_public_log_gives_its_figures(sidecar: Path) -> None:
    expected = yaml.safe_load(sidecar.read_text())["expected"]
    got = both(sidecar.with_suffix(".log"))
    summary = got.summary()
    assert len(got.timings) == expected["timings"]
    assert len(got.completes) == expected["init_complete"]
    assert len(got.problems) == expected["problems"], got.problems
    if "shapes" in expected:
        assert got.shapes == expected["shapes"]
    for phase, seconds in expected.get("max", {}).items():
        assert summary[phase].max == pytest.approx(seconds), phase
    for phase, seconds in expected.get("median", {}).items():
        assert summary[phase].median == pytest.approx(seconds), phase
    for phase, where in expected.get("slowest", {}).items():
        assert summary[phase].where.startswith(where), phase
    for phase in expected.get("absent_phases", []):
        assert phase not in summary
    if "functions" in expected:
        assert sorted({t.function for t in got.timings}) == expected["functions"]
    if "hosts" in expected:
        assert len({c.host for c in got.completes}) == expected["hosts"]
    alarms = init_alarms(
        {p: (f.max, f.where) for p, f in summary.items()},
        {p: f.median for p, f in summary.items()},
    )
    assert [a.name for a in alarms] == expected["alarms"]


def test_phases_and_rest_add_up_to_the_total_on_every_public_line() -> None:
    for log in sorted(CORPUS.glob("*.log")):
        for t in read_file(log).timings:
            assert sum(t.phases.values()) == pytest.approx(t.total, abs=0.05), t.line


# ---- line prefixes, as people paste logs ---------------------------------------------------


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "[1,0]<stdout>:",  # mpirun --tag-output
        "0: ",  # srun -l / torchrun labels
        "[155] ",
        "gpu-a: ",  # pdsh
        "2025-03-04T11:02:11.433Z ",  # a log viewer's timestamp
        "  | 2025-05-16T16:39:51.208-07:00 | ",  # CloudWatch console copy
        '{"log":"',  # Docker's JSON log driver (the suffix below closes it)
    ],
)
def test_launcher_and_viewer_prefixes_are_skipped(prefix: str) -> None:
    suffix = '\\n","stream":"stdout"}' if prefix.startswith("{") else ""
    got = read_init_timings([prefix + V223 + suffix, prefix + V222 + suffix])
    assert got.problems == []
    assert [t.total for t in got.timings] == [1.99, 1.08]
    assert [t.shape for t in got.timings] == ["2.23+", "2.22"]
    assert {t.host for t in got.timings} == {"gpu-a"}
    assert got.timings[0].phases == {
        "kernels": 0.33,
        "alloc": 1.26,
        "bootstrap": 0.08,
        "allgathers": 0.02,
        "topo": 0.07,
        "graphs": 0.02,
        "connections": 0.20,
        "rest": 0.01,
    }
    assert tuple(got.timings[1].phases) == tuple(p for p in PHASES if p != "alloc")


def test_a_line_pasted_twice_is_one_rank() -> None:
    got = read_init_timings([V223, V223, f"{V223} | {V223}"])
    assert len(got.timings) == 1


def test_the_same_figures_from_two_threads_are_two_records() -> None:
    """Split communicators often print identical all-zero lines: their NCCL prefixes (host,
    pid, thread) tell them apart; only a repeat of one process's line is a copy."""
    zeros = "NCCL INFO Init timings - ncclCommSplit: rank 0 nranks 2 total 0.00 (kernels 0.00, alloc 0.00, bootstrap 0.00, allgathers 0.00, topo 0.00, graphs 0.00, connections 0.00, rest 0.00)"
    got = read_init_timings(
        [f"h:10:11 [0] {zeros}", f"h:10:12 [0] {zeros}", f"h:10:12 [0] {zeros}"]
    )
    assert len(got.timings) == 2


def test_a_rest_printed_negative_is_nccl_rounding_not_a_problem() -> None:
    line = V223.replace("connections 0.20, rest 0.01", "connections 0.21, rest -0.00")
    got = read_init_timings([line])
    assert got.problems == [] and got.timings[0].phases["rest"] == 0.0


# ---- every Init COMPLETE shape NCCL has printed (src/init.cc, 2.4 to 2.30) -----------------


@pytest.mark.parametrize(
    ("release", "line", "function", "nvml", "comm_id"),
    [
        (
            "2.4",
            "h:1:2 [3] NCCL INFO comm 0x7f01 rank 3 nranks 8 cudaDev 3 nvmlDev 3 - Init COMPLETE",
            None,
            3,
            None,
        ),
        (
            "2.5-2.15",
            "h:1:2 [3] NCCL INFO comm 0x7f01 rank 3 nranks 8 cudaDev 3 busId 3c000 - Init COMPLETE",
            None,
            None,
            None,
        ),
        (
            "2.16-2.18.1",
            "h:1:2 [3] NCCL INFO comm 0x7f01 rank 3 nranks 8 cudaDev 3 busId 3c000 commId 0x1a2b - Init COMPLETE",
            None,
            None,
            "1a2b",
        ),
        (
            "2.18.3-2.20",
            "h:1:2 [3] NCCL INFO comm 0x7f01 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 3c000 commId 0x1a2b - Init COMPLETE",
            None,
            3,
            "1a2b",
        ),
        (
            "2.21+",
            "h:1:2 [3] NCCL INFO ncclCommInitRank comm 0x7f01 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 3c000 commId 0x1a2b - Init COMPLETE",
            "ncclCommInitRank",
            3,
            "1a2b",
        ),
        (
            "2.21-2.22 split",
            "h:1:2 [3] NCCL INFO ncclCommSplit comm 0x7f01 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 3c000 parent 0x7f00 color 1 key 3 commId 0x1a2b - Init COMPLETE",
            "ncclCommSplit",
            3,
            "1a2b",
        ),
        (
            "2.23 split",
            "h:1:2 [3] NCCL INFO ncclCommSplit comm 0x7f01 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 3c000 parent 0x7f00 color -1 key 3 - Init COMPLETE",
            "ncclCommSplit",
            3,
            None,
        ),
        (
            "2.24-2.28 split",
            "h:1:2 [3] NCCL INFO ncclCommSplit comm 0x7f01 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 3c000 parent 0x7f00 splitCount 2 color 1 key 3 - Init COMPLETE",
            "ncclCommSplit",
            3,
            None,
        ),
        (
            "2.29+ shrink",
            "h:1:2 [3] NCCL INFO ncclCommShrink comm 0x7f01 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 3c000 parent 0x7f00 childCount 1 color 0 key 3 - Init COMPLETE",
            "ncclCommShrink",
            3,
            None,
        ),
    ],
)
def test_every_init_complete_shape(
    release: str, line: str, function: str | None, nvml: int | None, comm_id: str | None
) -> None:
    got = read_init_timings(["[1,0]<stdout>:" + line])
    assert got.problems == [], release
    (done,) = got.completes
    assert (done.rank, done.nranks, done.cuda_dev, done.host) == (3, 8, 3, "h")
    assert (done.function, done.nvml_dev, done.comm_id) == (function, nvml, comm_id)
    assert got.timings == [] and got.summary() == {}


def test_init_start_is_not_init_complete() -> None:
    start = "h:1:2 [3] NCCL INFO ncclCommInitRank comm 0x7f01 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 3c000 commId 0x1a2b - Init START"
    got = read_init_timings([start])
    assert got.completes == [] and got.problems == []


# ---- shapes not known and figures that do not hold: problems, never figures ----------------


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (V223.replace("rest 0.01)", "rest 0.01, plugin 0.30)"), "shape not known"),  # a new field
        (V223.replace("alloc 1.26, ", ""), "without alloc"),  # function but no alloc
        (V222.replace("kernels 0.51, ", "kernels 0.51, alloc 0.00, "), "without its function"),
        (V223.replace("total 1.99", "total nan"), "shape not known"),
        (V223.replace("total 1.99", "total 2.50"), "not the total"),
        (V222.replace("rest 0.00", "rest 18446744073.70"), "not the total"),  # 2.22's unsigned rest
        (V223.replace("bootstrap 0.08", "bootstrap -0.08"), "negative"),
        (V223.replace("rank 1 nranks 16", "rank 16 nranks 16"), "rank 16 in a communicator of 16"),
        (V223.replace("rank 1 nranks 16", "rank 0 nranks 0"), "communicator of 0"),
        (V223[: V223.index("graphs")], "shape not known"),  # cut off
    ],
)
def test_a_line_that_cannot_be_believed_is_a_problem_not_a_figure(line: str, why: str) -> None:
    got = read_init_timings([line])
    assert got.timings == []
    assert len(got.problems) == 1 and why in got.problems[0], got.problems


def test_an_init_complete_of_an_unknown_shape_is_a_problem() -> None:
    got = read_init_timings(
        ["h:1:2 [3] NCCL INFO ncclCommInitRank comm 0x7f01 rank 3 of 8 - Init COMPLETE"]
    )
    assert got.completes == [] and len(got.problems) == 1


def test_summary_is_over_the_ranks_that_printed_each_phase() -> None:
    got = read_init_timings([V223, V222.replace("rank 1 nranks 16", "rank 2 nranks 16")])
    summary = got.summary()
    assert summary["alloc"].ranks == 1  # 2.22 prints no alloc
    assert summary["kernels"].ranks == 2
    assert summary["kernels"].max == 0.51 and summary["kernels"].where == "rank 2 of 16 on gpu-a"
    assert summary["kernels"].median == pytest.approx(0.42)
    assert got.as_dict()["summary"]["total"]["max"] == 1.99


# ---- gpufleet parse nccl-init, run as a real process --------------------------------------


def gpufleet(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    root = Path(__file__).resolve().parents[2]
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(
        [str(root / "plugins"), *filter(None, [env.get("PYTHONPATH")])]
    )
    entry = "import sys; from gpufleet.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", entry, "parse", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_parse_nccl_init_prints_phases_and_alarms() -> None:
    proc = gpufleet("nccl-init", str(CORPUS / "nccl_1646_b200_kernels_jit.log"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["summary"]["kernels"]["max"] == 52.94
    assert out["summary"]["kernels"]["where"] == "rank 4 of 8 on b200-dgx-01"
    assert [a["name"] for a in out["alarms"]] == ["nccl-init-kernels"]
    assert out["alarms"][0]["limit_s"] == 5.0 and "52.94 s" in out["alarms"][0]["note"]
    assert len(out["ranks"]) == 3 and out["problems"] == []


def test_parse_nccl_init_from_stdin_without_alarms() -> None:
    data = (CORPUS / "nccl_tests_319_2node_h100.log").read_bytes()
    proc = gpufleet("nccl-init", "-", stdin=data)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["alarms"] == [] and out["summary"]["bootstrap"]["max"] == 0.87
    assert out["init_complete"]["ranks"] == 10


def test_parse_nccl_init_refuses_a_log_without_init_lines(tmp_path: Path) -> None:
    log = tmp_path / "transport.log"
    log.write_text("h:1:2 [0] NCCL INFO Using network IB\n")
    proc = gpufleet("nccl-init", str(log))
    assert proc.returncode == 2 and proc.stdout == b""
    err = proc.stderr.decode()
    assert err.count("\n") == 1 and "transport.log" in err and "Init timings" in err
