"""``gpufleet parse ...`` run as a real process: stdout JSON, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "parsing"


# what the ``gpufleet`` console script runs (pyproject: gpufleet = "gpufleet.cli:main")
ENTRY = "import sys; from gpufleet.cli import main; sys.exit(main())"


def gpufleet(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "plugins"), *filter(None, [env.get("PYTHONPATH")])]
    )
    return subprocess.run(
        [sys.executable, "-c", ENTRY, "parse", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )


RUN_KEYS = {
    "collective",
    "ranks",
    "gpu_model",
    "largest_size_bytes",
    "busbw_at_largest_gbps",
    "max_busbw_gbps",
    "avg_busbw_gbps",
    "wrong",
    "out_of_bounds",
    "truncated",
    "invalid_rows",
    "problems",
}


def test_nccl_tests_text():
    proc = gpufleet("nccl-tests", str(DATA / "nccl_tests_srun_two_runs_truncated.txt"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert list(out) == ["runs"]
    assert [set(run) for run in out["runs"]] == [RUN_KEYS, RUN_KEYS]
    first, second = out["runs"]
    assert first["collective"] == "all_reduce_perf"
    assert first["busbw_at_largest_gbps"] == pytest.approx(181.71)
    assert first["wrong"] is None and first["truncated"] is False
    assert second["truncated"] is True and second["avg_busbw_gbps"] is None


def test_nccl_tests_json_from_stdin():
    proc = gpufleet("nccl-tests", "-", stdin=(DATA / "nccl_tests_allreduce_h200.json").read_bytes())
    assert proc.returncode == 0, proc.stderr
    (run,) = json.loads(proc.stdout)["runs"]
    assert run["ranks"] == 16 and run["gpu_model"] == "H200"
    assert run["largest_size_bytes"] == 8 << 30
    assert run["busbw_at_largest_gbps"] == pytest.approx(355.701236)


def test_nccl_log():
    proc = gpufleet("nccl-log", str(DATA / "nccl_log_roce_no_gdr.log"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {"transport", "gdrdma", "nccl_version", "ranks", "network_name", "problems"} <= set(out)
    assert out["problems"] == []
    assert out["transport"] == "roce"
    assert out["gdrdma"] is False
    assert out["nccl_version"] == "2.19.3+cuda12.3"
    assert out["failures"] == []
    failed = json.loads(
        gpufleet("nccl-log", str(DATA / "nccl_log_roce_modify_qp_timeout.log")).stdout
    )
    assert failed["transport"] == "roce" and "ibv_modify_qp failed" in failed["failures"][0]
    assert out["ranks"] == 4
    assert out["network_name"] == "IB"


def test_nccl_log_from_stdin():
    proc = gpufleet("nccl-log", "-", stdin=(DATA / "nccl_log_gke_gib.log").read_bytes())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["transport"] == "gib"


def test_fio_and_ior():
    proc = gpufleet("fio", str(DATA / "fio_seqread_two_jobs_noise.json"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "read_mib_s": 2508.0,
        "write_mib_s": None,
        "read_iops": 2508.0,
        "write_iops": None,
        "problems": [],
    }
    proc = gpufleet("ior", str(DATA / "ior_easy_lustre.txt"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"read_mib_s", "write_mib_s", "read_iops", "write_iops", "problems"}
    assert out["write_mib_s"] == pytest.approx(8450.12)
    assert out["read_mib_s"] == pytest.approx(12011.88)


@pytest.mark.parametrize("kind", ["nccl-tests", "nccl-log", "fio", "ior"])
def test_garbage_exits_2_with_one_line(kind, tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_text("this is not benchmark output\nat all\n")
    proc = gpufleet(kind, str(junk))
    assert proc.returncode == 2
    assert proc.stdout == b""
    err = proc.stderr.decode()
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("gpufleet: ") and "junk.txt" in err


@pytest.mark.parametrize("kind", ["nccl-tests", "nccl-log", "fio", "ior"])
def test_missing_file_exits_2(kind, tmp_path):
    proc = gpufleet(kind, str(tmp_path / "nope.log"))
    assert proc.returncode == 2
    assert proc.stderr.decode().strip() == f"gpufleet: {tmp_path / 'nope.log'}: no such file"


def test_garbage_on_stdin_names_stdin():
    proc = gpufleet("fio", "-", stdin=b"\x00\x01 binary junk")
    assert proc.returncode == 2
    assert proc.stderr.decode().startswith("gpufleet: stdin: ")


def test_kind_is_required():
    proc = gpufleet()
    assert proc.returncode == 2
    # a usage error is one line naming what is missing and where help is
    assert proc.stderr.decode().strip().splitlines() == [
        "gpufleet parse: the following arguments are required: KIND (see gpufleet parse --help)"
    ]


def test_invalid_rows_and_problems_are_shown(tmp_path):
    header = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong\n"
    )
    rows = (
        "     1048576        262144     float     sum      -1    43.52   24.09   45.17       0"
        "    44.09   23.78   44.59       0\n"
        "     2097152        524288     float     sum      -1    49.05   42.76  -80.17       0"
        "    49.68   42.21   79.15      -3\n"
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : nan\n"
    )
    path = tmp_path / "out.txt"
    path.write_text(header + rows)
    proc = gpufleet("nccl-tests", str(path))
    assert proc.returncode == 0, proc.stderr
    (run,) = json.loads(proc.stdout)["runs"]
    assert run["truncated"] is True
    assert run["max_busbw_gbps"] == pytest.approx(45.17)
    assert run["wrong"] == 0
    assert [r["size_bytes"] for r in run["invalid_rows"]] == [2097152]
    assert any("busbw" in reason for reason in run["invalid_rows"][0]["reasons"])
    assert any("#wrong" in reason for reason in run["invalid_rows"][0]["reasons"])
    assert any("Avg bus bandwidth" in p for p in run["problems"])


@pytest.mark.parametrize(
    ("content", "word"),
    [
        ("[" * 200_000, "nested"),
        ('{"results": [{"size": ' + "9" * 100_000 + "}]}", "digits"),
        ('{"results": [{"size": 1e999999, "busbw": -1e999999}]}', "finite"),
    ],
)
def test_hostile_json_is_one_line_naming_the_problem(tmp_path, content, word):
    path = tmp_path / "x.json"
    path.write_text(content)
    proc = gpufleet("nccl-tests", str(path))
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert err.count("\n") == 1 and "Traceback" not in err
    assert word in err.lower() and "unexpected" not in err, err


HEALTH = DATA / "health"


def test_dcgm_json_and_text():
    proc = gpufleet("dcgm", str(HEALTH / "dcgm_diag_v4_entities.json"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {
        "source",
        "dcgm_version",
        "driver_version",
        "tests",
        "failing_gpus",
        "problems",
    }
    assert (out["source"], out["dcgm_version"], out["failing_gpus"]) == ("json", "4.1.1", [1])
    software = out["tests"][0]
    assert software["status"] == "fail"
    assert software["gpus"][1]["error_codes"] == [29]
    proc = gpufleet("dcgm", "-", stdin=(HEALTH / "dcgm_diag_v3_text_pcie_fail.txt").read_bytes())
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["source"] == "text" and out["failing_gpus"] == [2] and out["problems"] == []


def test_xid_events():
    proc = gpufleet("xid", str(HEALTH / "xid_mixed_prefixes.log"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["problems"] == []
    first = out["events"][0]
    assert first == {
        "pci_bus": "0000:3b:00",
        "xid": 79,
        "pid": None,
        "process": None,
        "message": "GPU has fallen off the bus.",
        "logged_at": "[ 5107.644336]",
    }
    assert [e["xid"] for e in out["events"][1:]] == [13, 63, 94, 31]


@pytest.mark.parametrize("kind", ["dcgm", "xid"])
def test_health_garbage_exits_2_with_one_line(kind, tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_text("this is not benchmark output\nat all\n")
    proc = gpufleet(kind, str(junk))
    assert proc.returncode == 2 and proc.stdout == b""
    err = proc.stderr.decode()
    assert err.startswith("gpufleet: ") and "junk.txt" in err and err.count("\n") == 1, err


def assert_tool_failure_is_read(kind: str, what: str) -> None:
    """The tool's own failure is read: its check could not run (exit 0, ``not_run``), which is
    not an unreadable input (an empty one exits 2)."""
    failed = gpufleet(kind, "-", stdin=b"No devices were found\n")
    assert failed.returncode == 0, failed.stderr
    assert json.loads(failed.stdout)["not_run"] == [
        {"what": what, "why": "No devices were found", "code": None}
    ]
    empty = gpufleet(kind, "-", stdin=b"")
    assert empty.returncode == 2 and empty.stdout == b""
    assert empty.stderr.decode() == "gpufleet: stdin: is empty\n"


def test_nvidia_smi_remap_and_ecc():
    proc = gpufleet("nvidia-smi", str(HEALTH / "nvidia_smi_a100_remap_pending.txt"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["problems"] == []
    first = out["gpus"][0]
    assert (first["pci_bus"], first["remap_pending"], first["remapped_correctable"]) == (
        "00000000:10:1C.0",
        True,
        1,
    )
    assert first["ecc_volatile"]["dram_correctable"] == 177
    assert first["bank_histogram"]["max"] == 639
    assert_tool_failure_is_read("nvidia-smi", "nvidia-smi -q")


def test_nvlink_error_counters():
    proc = gpufleet("nvlink", str(HEALTH / "nvlink_h100_replay_crc.txt"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["problems"] == []
    assert [gpu["index"] for gpu in out["gpus"]] == [0, 1]
    second = out["gpus"][1]
    assert (second["name"], second["uuid"]) == (
        "NVIDIA H100 80GB HBM3",
        "GPU-00000000-1111-4000-8000-000000000001",
    )
    assert second["links"][5] == {
        "link": 5,
        "inactive": False,
        "not_supported": False,
        "counters": {"replay": 37, "recovery": 1, "crc": 12},
        "state": None,
        "speed_gbps": None,
    }
    assert_tool_failure_is_read("nvlink", "nvidia-smi nvlink")


def test_nvlink_garbage_file_exits_2_with_one_line(tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_text("this is not benchmark output\nat all\n")
    proc = gpufleet("nvlink", str(junk))
    assert proc.returncode == 2 and proc.stdout == b""
    err = proc.stderr.decode()
    assert err.startswith("gpufleet: ") and "junk.txt" in err and err.count("\n") == 1, err
