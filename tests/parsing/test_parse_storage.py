"""fio JSON and IOR text: MiB/s and IOPS per direction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsing import StorageResult, parse_fio_json, parse_ior

DATA = Path(__file__).resolve().parents[1] / "data" / "parsing"


def load(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_fio_two_jobs_summed_despite_leading_warnings():
    result = parse_fio_json(load("fio_seqread_two_jobs_noise.json"))
    # (1342177280 + 1287651328) B/s / 2**20
    assert result.read_mib_s == pytest.approx(2508.0)
    assert result.read_iops == pytest.approx(2508.0)  # 1 MiB blocks
    assert result.write_mib_s is None  # nothing was written
    assert result.write_iops is None


def test_fio_group_reporting_mixed_random():
    result = parse_fio_json(load("fio_randrw_group_reporting.json"))
    assert result.read_mib_s == pytest.approx(393.216, rel=1e-6)
    assert result.write_mib_s == pytest.approx(168.521142, rel=1e-6)
    assert result.read_iops == pytest.approx(100663.296094)
    assert result.write_iops == pytest.approx(43141.4125)


def test_fio_old_versions_only_have_kib_per_second():
    result = parse_fio_json(load("fio_old_kib_only.json"))
    assert result == StorageResult(
        read_mib_s=None, write_mib_s=512.0, read_iops=None, write_iops=512.0
    )


def test_fio_prefers_bw_bytes_over_bw():
    doc = {
        "jobs": [
            {
                "jobname": "j",
                "read": {"io_bytes": 1, "bw_bytes": 1048576, "bw": 999999, "iops": 1.0},
            }
        ]
    }
    assert parse_fio_json(json.dumps(doc)).read_mib_s == 1.0


def test_fio_client_server_uses_the_all_clients_aggregate():
    per_client = {"read": {"io_bytes": 10, "bw_bytes": 100 * 2**20, "iops": 100.0}}
    doc = {
        "fio version": "fio-3.35",
        "client_stats": [
            {"jobname": "seq", "hostname": "c1", **per_client},
            {"jobname": "seq", "hostname": "c2", **per_client},
            {
                "jobname": "All clients",
                "read": {"io_bytes": 20, "bw_bytes": 200 * 2**20, "iops": 200.0},
            },
        ],
    }
    result = parse_fio_json("fio: some warning\n" + json.dumps(doc) + "\ntrailing text\n")
    assert result.read_mib_s == 200.0
    assert result.read_iops == 200.0


@pytest.mark.parametrize(
    "text",
    ["", "fio: engine libaio not loadable\n", '{"not": "fio"}', "{broken json\n", "[1, 2]"],
)
def test_fio_garbage_raises(text):
    with pytest.raises(ParseError):
        parse_fio_json(text)


def test_ior_max_lines_and_summary_iops():
    result = parse_ior(load("ior_easy_lustre.txt"))
    assert result.write_mib_s == pytest.approx(8450.12)
    assert result.read_mib_s == pytest.approx(12011.88)
    assert result.write_iops == pytest.approx(8450.12)  # Max(OPs), 1 MiB transfers
    assert result.read_iops == pytest.approx(12011.88)


def test_ior_results_table_only_takes_the_best_iteration():
    result = parse_ior(load("ior_results_table_only.txt"))
    assert result.write_mib_s == pytest.approx(2210.64)
    assert result.read_mib_s == pytest.approx(3120.87)
    assert result.write_iops == pytest.approx(552.68)
    assert result.read_iops == pytest.approx(780.24)


def test_ior_max_lines_alone_and_write_only():
    result = parse_ior("Max Write: 1234.56 MiB/sec (1294.51 MB/sec)\n")
    assert result == StorageResult(
        read_mib_s=None, write_mib_s=1234.56, read_iops=None, write_iops=None
    )


def test_ior_several_tests_keep_the_best():
    text = (
        "Max Write: 100.00 MiB/sec (104.86 MB/sec)\nMax Read:  300.00 MiB/sec (314.57 MB/sec)\n"
        "Max Write: 150.00 MiB/sec (157.29 MB/sec)\nMax Read:  250.00 MiB/sec (262.14 MB/sec)\n"
    )
    result = parse_ior(text)
    assert (result.write_mib_s, result.read_mib_s) == (150.0, 300.0)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "IOR-3.3.0: MPI Coordinated Test of Parallel I/O\n",
        "ior ERROR: open64 failed, errno 2\n",
    ],
)
def test_ior_garbage_raises(text):
    with pytest.raises(ParseError):
        parse_ior(text)


# ------------------------------------------------------------------------------- refusals


def _two_jobs(second_error=0, second_bw=100 * 2**20, first_bw=100 * 2**20):
    def job(name, error, bw):
        return {
            "jobname": name,
            "error": error,
            "read": {"io_bytes": 10, "bw_bytes": bw, "iops": 100.0},
        }

    return json.dumps({"jobs": [job("ok", 0, first_bw), job("bad", second_error, second_bw)]})


def test_fio_job_that_reported_an_error_is_not_counted_and_is_named():
    result = parse_fio_json(_two_jobs(second_error=5))
    assert result.read_mib_s == pytest.approx(100.0)  # the failed job's figures are not added
    assert result.read_iops == pytest.approx(100.0)
    assert any("'bad'" in p and "error 5" in p for p in result.problems), result.problems


def test_fio_every_job_failed_is_a_parse_error_naming_them():
    doc = json.loads(_two_jobs(second_error=5))
    doc["jobs"][0]["error"] = 2
    with pytest.raises(ParseError, match="error"):
        parse_fio_json(json.dumps(doc))


@pytest.mark.parametrize("value", [-1048576, "fast"])
def test_fio_impossible_bandwidth_makes_the_job_invalid(value):
    result = parse_fio_json(_two_jobs(second_bw=value))
    assert result.read_mib_s == pytest.approx(100.0)
    assert any("'bad'" in p and "bw_bytes" in p for p in result.problems), result.problems


@pytest.mark.parametrize(
    "text",
    [
        '{"jobs": [{"jobname": "j", "read": {"io_bytes": 1, "bw_bytes": 1e999}}]}',
        '{"jobs": [{"jobname": "j", "read": {"io_bytes": 1, "bw_bytes": NaN}}]}',
        '{"jobs": [{"jobname": "j", "read": {"io_bytes": 1, "bw_bytes": ' + "7" * 50_000 + "}}]}",
        '{"a":' * 100_000,
    ],
)
def test_fio_json_no_benchmark_writes_is_a_one_line_parse_error(text):
    with pytest.raises(ParseError) as caught:
        parse_fio_json(text)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300


def test_a_clean_fio_result_has_no_problems():
    assert parse_fio_json(load("fio_randrw_group_reporting.json")).problems == ()


IOR_SUMMARY_HEADER = (
    "Summary of all tests:\n"
    "Operation   Max(MiB)   Min(MiB)  Mean(MiB)     StdDev   Max(OPs)   Min(OPs)  Mean(OPs)     "
    "StdDev    Mean(s) Stonewall(s) Stonewall(MiB) Test# #Tasks tPN reps fPP reord reordoff "
    "reordrand seed segcnt   blksiz    xsize aggs(MiB)   API RefNum\n"
)
IOR_SUMMARY_ROW = (
    "{op}        {v}    8391.05    8417.85      24.43    {v}    8391.05    8417.85      24.43    "
    "7.78510         NA            NA     0     16   8    3   1     1        1         0    0      "
    "1 4294967296  1048576   65536.0 POSIX      0\n"
)


def test_ior_cut_off_summary_row_is_not_a_figure():
    read_row = IOR_SUMMARY_ROW.format(op="read", v="9000.00")
    text = IOR_SUMMARY_HEADER + read_row + "write        1234.5"
    result = parse_ior(text)
    assert result.read_mib_s == pytest.approx(9000.0)
    assert result.write_mib_s is None  # the cut row is not read as 1234.5 MiB/s
    assert any("cut" in p for p in result.problems), result.problems


def test_ior_only_a_cut_off_row_is_a_parse_error():
    with pytest.raises(ParseError, match="cut"):
        parse_ior(IOR_SUMMARY_HEADER + "write        1234.5")


def test_ior_cut_off_results_row_is_not_a_figure():
    lines = load("ior_results_table_only.txt").splitlines()
    cut = [ln for ln in lines if not ln.startswith("write     2188.20")]
    cut.append("write     9999.99    2499.99")  # killed mid-row: better than any real iteration
    result = parse_ior("\n".join(cut))
    assert result.write_mib_s == pytest.approx(2210.64)
    assert any("cut" in p for p in result.problems)


@pytest.mark.parametrize("value", ["-1234.56", "nan", "inf"])
def test_ior_impossible_max_line_is_refused(value):
    text = (
        f"Max Write: {value} MiB/sec (1294.51 MB/sec)\nMax Read:  300.00 MiB/sec (314.57 MB/sec)\n"
    )
    result = parse_ior(text)
    assert result.write_mib_s is None
    assert result.read_mib_s == pytest.approx(300.0)
    assert any("Max Write" in p for p in result.problems), result.problems
