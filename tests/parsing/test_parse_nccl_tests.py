"""nccl-tests output: text tables of several generations, launcher prefixes, JSON, truncation."""

# ruff: noqa: E501  (verbatim NCCL / nccl-tests lines are wider than 100 columns)

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsing import (
    NcclRun,
    SizeRow,
    gpu_model_from_device_name,
    parse_nccl_tests,
    parse_nccl_tests_any,
    parse_nccl_tests_json,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "parsing"
GIB = 1 << 30
MIB = 1 << 20


def load(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def only_run(text: str) -> NcclRun:
    result = parse_nccl_tests_any(text)
    assert len(result.runs) == 1
    return result.runs[0]


# ------------------------------------------------------------------------------- current format


def test_current_format_h200_two_nodes():
    run = only_run(load("nccl_tests_allreduce_h200_2node.txt"))
    assert run.collective == "all_reduce_perf"
    assert run.ranks == 16
    assert run.gpu_model == "H200"
    assert len(run.rows) == 14
    assert run.largest_size_bytes == 8 * GIB
    assert run.busbw_at_largest_gbps == pytest.approx(355.70)
    assert run.max_busbw_gbps == pytest.approx(355.70)
    assert run.avg_busbw_gbps == pytest.approx(269.024)
    assert run.wrong == 0
    assert run.out_of_bounds == 0
    assert run.truncated is False
    assert run.notes == ()
    assert run.problems == () and run.invalid_rows == ()


def test_rows_keep_every_column():
    run = only_run(load("nccl_tests_allreduce_h200_2node.txt"))
    first = run.rows[0]
    assert first == SizeRow(
        size_bytes=1048576,
        count=262144,
        dtype="float",
        redop="sum",
        root=-1,
        oop_time_us=43.52,
        oop_algbw_gbps=24.09,
        oop_busbw_gbps=45.17,
        oop_wrong=0,
        ip_time_us=44.09,
        ip_algbw_gbps=23.78,
        ip_busbw_gbps=44.59,
        ip_wrong=0,
    )
    assert first.best_busbw_gbps == pytest.approx(45.17)
    assert first.best_time_us == pytest.approx(43.52)
    # a 5-digit time is printed with one decimal by getFloatStr
    assert run.rows[-1].oop_time_us == pytest.approx(45279.9)


def test_plateau_and_latency_helpers():
    run = only_run(load("nccl_tests_allreduce_h200_2node.txt"))
    assert run.busbw_at_or_above(2 * GIB) == pytest.approx([354.81, 355.40, 355.70])
    assert run.busbw_at_or_above(16 * GIB) == []
    assert run.latency_up_to(2 * MIB) == [(1048576, 43.52), (2097152, 49.05)]
    assert run.latency_up_to(1024) == []


def test_open_mpi_tagged_output():
    run = only_run(load("nccl_tests_allreduce_p5_ompi_tagged.txt"))
    assert run.collective is None  # the output never names the binary
    assert run.ranks == 16
    assert run.gpu_model == "H100"
    assert len(run.rows) == 32
    assert run.rows[0].size_bytes == 8
    assert run.largest_size_bytes == 16 * GIB
    assert run.busbw_at_largest_gbps == pytest.approx(481.56)
    assert run.avg_busbw_gbps == pytest.approx(159.638)
    assert run.truncated is False


def test_per_iteration_columns_and_timestamps():
    run = only_run(load("nccl_tests_reduce_scatter_per_iter_timestamps.txt"))
    assert run.collective == "reduce_scatter_perf"
    assert run.ranks == 16
    assert run.gpu_model == "B200"
    assert [r.size_bytes for r in run.rows] == [256 * MIB, 512 * MIB, GIB, 2 * GIB]
    last = run.rows[-1]
    # in-place values come from after the four per-iteration columns, not from them
    assert last.oop_busbw_gbps == pytest.approx(680.67)
    assert last.ip_busbw_gbps == pytest.approx(671.93)
    assert last.ip_wrong == 0
    assert run.avg_busbw_gbps == pytest.approx(657.048)


# ------------------------------------------------------------------------------- older formats


def test_old_float_error_column_within_and_beyond_tolerance():
    run = only_run(load("nccl_tests_old_error_column_v100.txt"))
    assert run.ranks == 8
    assert run.gpu_model == "V100"
    assert all(r.root is None and r.redop == "sum" for r in run.rows)
    assert len(run.rows) == 25
    by_size = {r.size_bytes: r for r in run.rows}
    # "2e-07"/"1e-06" are within the float tolerance (1e-5): not wrong elements
    assert by_size[16].oop_wrong == 0
    # "3e-03" exceeds it: flagged as (at least) one wrong element
    assert by_size[MIB].ip_wrong == 1
    assert by_size[MIB].oop_wrong == 0
    assert run.wrong == 1
    assert run.busbw_at_largest_gbps == pytest.approx(64.84)


def test_broadcast_without_redop_and_with_checking_off():
    run = only_run(load("nccl_tests_broadcast_no_redop_c0.txt"))
    assert run.ranks == 2
    assert run.gpu_model == "V100"
    assert len(run.rows) == 29
    assert all(r.redop is None and r.root == 0 for r in run.rows)
    assert all(r.oop_wrong is None and r.ip_wrong is None for r in run.rows)
    assert run.wrong is None  # every cell is N/A (-c 0)
    assert run.largest_size_bytes == 2 * GIB
    assert run.busbw_at_largest_gbps == pytest.approx(2.96)
    assert run.truncated is False


def test_single_rank_reports_zero_bus_bandwidth_not_none():
    run = only_run(load("nccl_tests_single_rank.txt"))
    assert run.ranks == 1
    assert run.gpu_model == "L4"
    assert run.max_busbw_gbps == 0.0
    assert run.busbw_at_largest_gbps == 0.0
    assert run.avg_busbw_gbps == 0.0
    assert run.wrong == 0


# ------------------------------------------------------------------------------- many runs, cuts


def test_two_runs_second_truncated_mid_row():
    result = parse_nccl_tests(load("nccl_tests_srun_two_runs_truncated.txt"))
    assert [r.collective for r in result.runs] == ["all_reduce_perf", "all_gather_perf"]
    first, second = result.runs
    assert first.truncated is False
    assert first.ranks == 16 and first.gpu_model == "A100"
    assert first.largest_size_bytes == 4 * GIB
    assert first.busbw_at_largest_gbps == pytest.approx(181.71)
    assert first.avg_busbw_gbps == pytest.approx(173.884)
    assert first.wrong is None
    assert second.truncated is True
    assert second.avg_busbw_gbps is None and second.out_of_bounds is None
    assert len(second.rows) == 6  # the 2 GiB row was cut and is dropped, not half-read
    assert second.largest_size_bytes == GIB
    assert second.busbw_at_largest_gbps == pytest.approx(169.16)
    assert all(r.redop == "none" for r in second.rows)
    assert any("footer" in p for p in second.problems)
    assert any("incomplete" in p for p in second.problems)


def test_new_column_header_after_rows_starts_a_new_run():
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
    row = "     1048576        262144     float     sum      -1    43.52   24.09   45.17       0    44.09   23.78   44.59       0"
    text = "\n".join([header, row, header, row.replace("45.17", "50.00")])
    result = parse_nccl_tests(text)
    assert len(result.runs) == 2
    assert [r.max_busbw_gbps for r in result.runs] == pytest.approx([45.17, 50.0])
    assert all(r.truncated for r in result.runs)  # neither has a footer


def test_binary_name_line_names_the_run():
    text = "\n".join(
        [
            "+ mpirun -np 16 /opt/nccl-tests/build/all_gather_perf_mpi -b 1M -e 1G -f 2",
            "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
            "     1048576        262144     float    none      -1    43.52   24.09   22.58       0    44.09   23.78   22.29       0",
            "# Out of bounds values : 0 OK",
            "# Avg bus bandwidth    : 22.58",
            "+ /opt/nccl-tests/build/alltoall_perf -b 1M -e 1M",
            "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
            "     1048576         16384     float    none      -1    93.11   11.26   10.56       0    92.80   11.30   10.59       0",
            "# Out of bounds values : 0 OK",
            "# Avg bus bandwidth    : 10.575",
        ]
    )
    result = parse_nccl_tests(text)
    assert [r.collective for r in result.runs] == ["all_gather_perf", "alltoall_perf"]
    assert [r.truncated for r in result.runs] == [False, False]
    assert result.runs[1].avg_busbw_gbps == pytest.approx(10.575)


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "  ",
        "0: ",
        " 12: ",
        "[1,0]<stdout>:",
        "[gpu-node-7:48211] ",
        "node7: ",
        "2025-03-04T11:02:10.225Z ",
        "2025-03-04T11:02:10.225831234Z stdout F ",
    ],
)
def test_launcher_prefixes_are_stripped(prefix):
    lines = [
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#  Rank  0 Group  0 Pid   1234 on     node-a device  0 [0000:18:00] NVIDIA H100 80GB HBM3",
        "#  Rank  1 Group  0 Pid   1234 on     node-a device  1 [0000:2a:00] NVIDIA H100 80GB HBM3",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong   ",
        "           8             2     float     sum      -1    10.10    0.00    0.00       0     9.90    0.00    0.00       0   ",
        "          16             4     float     sum      -1    10.20    0.00    0.00       0    10.00    0.00    0.00       0\r",
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 0.001 ",
    ]
    run = only_run("\n".join(prefix + line for line in lines))
    assert run.ranks == 2
    assert run.gpu_model == "H100"
    assert [r.size_bytes for r in run.rows] == [8, 16]
    assert run.rows[1].ip_time_us == pytest.approx(10.0)
    assert run.truncated is False


def test_interleaved_tags_inside_rows():
    run = only_run(load("nccl_tests_interleaved_tags.txt"))
    assert run.ranks == 2 and run.gpu_model == "A10G"
    assert [r.size_bytes for r in run.rows] == [MIB << i for i in range(5)]
    assert run.busbw_at_largest_gbps == pytest.approx(12.23)
    assert run.rows[0].ip_busbw_gbps == pytest.approx(9.09)


def test_no_footer_is_truncated_with_a_note():
    text = "\n".join(load("nccl_tests_allreduce_h200_2node.txt").splitlines()[:34])
    run = only_run(text)
    assert run.truncated is True
    assert len(run.rows) == 8
    assert any("footer" in problem for problem in run.problems)


def test_headerless_rows_are_inferred():
    text = (
        "     1048576        262144     float     sum      -1    43.52   24.09   45.17       0"
        "    44.09   23.78   44.59       0\n"
        "     2097152        524288     float     sum    49.05   42.76   80.17  2e-07"
        "    49.68   42.21   79.15  0e+00\n"
    )
    result = parse_nccl_tests(text)
    first, second = result.runs[0].rows
    assert first.root == -1 and first.oop_wrong == 0
    assert second.root is None and second.oop_wrong == 0 and second.ip_busbw_gbps == 79.15
    assert any("inferred" in n for n in result.runs[0].notes)


def test_device_list_cut_short_leaves_ranks_unknown():
    text = "\n".join(
        [
            "# nThread 1 nGpus 16 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
            "#  Rank  0 Group  0 Pid   1234 on     node-a device  0 [0000:18:00] NVIDIA H200",
            "#  Rank  1 Group  0 Pid   1234 on     node-a device  1 [0000:2a:00] NVIDIA H200",
            "#  Rank  2 Group  0 Pid   1234 on     node-a device  2 [0000:3a:0...",
            "           8             2     float     sum      -1    10.10    0.00    0.00       0     9.90    0.00    0.00       0",
        ]
    )
    run = only_run(text)
    assert run.ranks is None
    assert run.gpu_model == "H200"


def test_mixed_gpu_models_are_not_guessed():
    text = "\n".join(
        [
            "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
            "#  Rank  0 Group  0 Pid   1234 on     node-a device  0 [0000:18:00] NVIDIA H100 80GB HBM3",
            "#  Rank  1 Group  0 Pid   4321 on     node-b device  0 [0000:18:00] NVIDIA A100-SXM4-80GB",
            "           8             2     float     sum      -1    10.10    0.00    0.00       0     9.90    0.00    0.00       0",
        ]
    )
    run = only_run(text)
    assert run.ranks == 2
    assert run.gpu_model is None
    assert any("mixed GPU models" in n for n in run.notes)


def test_wrong_counts_with_some_na_cells_sum_the_known_ones():
    rows = (
        "     1048576        262144     float     sum      -1    43.52   24.09   45.17       3"
        "    44.09   23.78   44.59     N/A\n"
        "     2097152        524288     float     sum      -1    49.05   42.76   80.17  1e+06"
        "    49.68   42.21   79.15       0\n"
        "     4194304       1048576     float     sum      -1    60.09   68.90  129.19       0"
        "    60.87   68.90  129.19       0\n"
    )
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
    run = only_run(header + rows)
    assert [r.oop_wrong for r in run.rows] == [3, 1_000_000, 0]  # %g prints a million as 1e+06
    assert run.rows[0].ip_wrong is None
    assert run.wrong == 1_000_003


def test_error_marked_with_star_and_type_tolerances():
    header = "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
    rows = (
        "          64            32    half     sum    10.00    0.01    0.01  4e-02    10.00    0.01    0.01  6e-02\n"
        "          64            32  double     sum    10.00    0.01    0.01  1e-13    10.00    0.01    0.01  1e-10\n"
        "          64            16   int32     sum    10.00    0.01    0.01  0e+00    10.00    0.01    0.01  1e+00\n"
        "          64            16   float     sum    10.00    0.01    0.01  1e-06*   10.00    0.01    0.01    N/A\n"
    )
    run = only_run(header + rows)
    assert [(r.oop_wrong, r.ip_wrong) for r in run.rows] == [(0, 1), (0, 1), (0, 1), (1, None)]


# ------------------------------------------------------------------------------- JSON


def test_nthread_header_starts_a_new_run():
    """Two outputs one after the other, told apart only by their ``# nThread`` headers."""

    def output(ranks: int) -> list[str]:
        return [
            "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
            *(
                f"#  Rank {r:2d} Group  0 Pid   1234 on     node-a device {r:2d} [0000:18:00] NVIDIA H100 80GB HBM3"
                for r in range(ranks)
            ),
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
            "           8             2     float     sum      -1    10.10    0.00    0.00       0     9.90    0.00    0.00       0",
            "# Out of bounds values : 0 OK",
            "# Avg bus bandwidth    : 0.001",
        ]

    result = parse_nccl_tests("\n".join(output(4) + output(2)))
    assert [r.ranks for r in result.runs] == [4, 2]
    assert [r.truncated for r in result.runs] == [False, False]


def test_footer_needs_both_lines():
    head = load("nccl_tests_allreduce_h200_2node.txt").split("# Out of bounds")[0]
    for footer, missing in (
        ("# Out of bounds values : 0 OK\n", "Avg bus bandwidth"),
        ("# Avg bus bandwidth    : 269.024\n", "Out of bounds values"),
    ):
        run = only_run(head + footer)
        assert run.truncated is True
        assert any(missing in problem for problem in run.problems)


def test_headerless_old_error_column_is_read_as_an_error_not_a_count():
    """Without a header, exponent-formatted cells mean the old float ``error`` column: 3e-01 is
    beyond the float tolerance, so (at least) one wrong element -- not ``round(0.3) == 0``."""
    text = (
        "     1048576        262144     float     sum    43.52   24.09   45.17  3e-01"
        "    44.09   23.78   44.59  0e+00\n"
    )
    row = parse_nccl_tests(text).runs[0].rows[0]
    assert row.oop_wrong == 1
    assert row.ip_wrong == 0


def test_json_matches_the_text_run():
    text_run = only_run(load("nccl_tests_allreduce_h200_2node.txt"))
    json_run = only_run(load("nccl_tests_allreduce_h200.json"))
    assert json_run.collective == "all_reduce_perf"
    assert json_run.ranks == 16
    assert json_run.gpu_model == "H200"
    assert json_run.truncated is False
    assert json_run.out_of_bounds == 0
    assert json_run.wrong == 0
    assert len(json_run.rows) == len(text_run.rows)
    assert json_run.busbw_at_largest_gbps == pytest.approx(text_run.busbw_at_largest_gbps, abs=0.01)
    assert json_run.avg_busbw_gbps == pytest.approx(text_run.avg_busbw_gbps, abs=0.001)
    assert json_run.rows[0].root == -1 and json_run.rows[0].redop == "sum"


def test_json_accepts_objects_and_counts_ranks_per_process():
    doc = json.loads(load("nccl_tests_allreduce_h200.json"))
    doc["config"]["ngpus"] = 8
    doc["config"]["devices"] = doc["config"]["devices"][:2]  # 2 processes x 8 GPUs
    run = parse_nccl_tests_json(doc).runs[0]
    assert run.ranks == 16
    del doc["config"]["devices"]
    assert parse_nccl_tests_json([doc]).runs[0].ranks is None


def test_truncated_json_is_repaired_up_to_the_last_complete_record():
    run = only_run(load("nccl_tests_allgather_truncated.json"))
    assert run.collective == "all_gather_perf"
    assert run.truncated is True
    assert len(run.rows) == 10
    assert run.largest_size_bytes == 512 * MIB
    assert run.busbw_at_largest_gbps == pytest.approx(167.360941)
    assert run.ranks == 16  # 2 processes x 1 thread x 8 GPUs
    assert run.gpu_model == "H100"
    assert run.avg_busbw_gbps is None


def test_json_collective_from_args_else_from_experiment_name():
    doc = json.loads(load("nccl_tests_allreduce_h200.json"))
    doc["args"][0] = "/opt/nccl-tests/build/all_gather_perf_mpi"
    assert parse_nccl_tests_json(doc).runs[0].collective == "all_gather_perf"
    del doc["args"]
    assert parse_nccl_tests_json(doc).runs[0].collective is None
    doc["results"][0]["experiment_name"] = "reduce_scatter_perf"
    assert parse_nccl_tests_json(doc).runs[0].collective == "reduce_scatter_perf"


def test_json_null_wrong_means_checking_was_off():
    doc = json.loads(load("nccl_tests_allreduce_h200.json"))
    for item in doc["results"]:
        item["out_of_place"]["nwrong"] = None
        item["in_place"]["nwrong"] = None
    run = parse_nccl_tests_json(json.dumps(doc)).runs[0]
    assert run.wrong is None
    assert run.problems == ()  # null is "not checked", not an impossible value


# ------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "text",
    ["", "hello world\n", "NCCL version 2.21.5+cuda12.4\n", "Segmentation fault (core dumped)\n"],
)
def test_garbage_raises_parse_error(text):
    with pytest.raises(ParseError):
        parse_nccl_tests_any(text)


def test_json_without_results_raises():
    with pytest.raises(ParseError, match="no nccl-tests results"):
        parse_nccl_tests_any('{"foo": 1}')
    with pytest.raises(ParseError):
        parse_nccl_tests_json("{not json")


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA A100-SXM4-40GB", "A100"),
        ("Tesla V100-SXM2-32GB", "V100"),
        ("A100-SXM4-40GB", "A100"),
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
        ("", None),
        (None, None),
    ],
)
def test_gpu_model_from_device_name(name, model):
    assert gpu_model_from_device_name(name) == model
