"""nccl-tests figures that cannot be true are refused, never counted, and the run says so.

A row with a negative or non-finite figure, or a ``#wrong`` that is not a whole non-negative
count, is an ``invalid`` row: it is not in ``rows`` (so no figure, maximum or sum sees it), it
is listed in ``invalid_rows`` with its reasons, the run is ``truncated`` (its figures are not
the whole table) and ``problems`` names it. JSON that no benchmark writes (non-finite numbers,
integers of thousands of digits, nesting thousands deep) is a :class:`ParseError`.
"""

# ruff: noqa: E501  (verbatim nccl-tests lines are wider than 100 columns)

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.errors import ParseError
from gpufleet.parsing import NcclRun, parse_nccl_tests, parse_nccl_tests_any, parse_nccl_tests_json

DATA = Path(__file__).resolve().parents[1] / "data" / "parsing"

HEADER = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
FOOTER = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 50.0\n"


def row(
    size: int,
    busbw: str = "45.17",
    wrong: str = "0",
    time: str = "43.52",
    algbw: str = "24.09",
    ip_wrong: str = "0",
) -> str:
    return f"{size:>12}  {size // 4:>12}     float     sum      -1  {time:>7}  {algbw:>6}  {busbw:>6}  {wrong:>6}    44.09   23.78   44.59  {ip_wrong:>6}"


def table(*rows: str, footer: str = FOOTER) -> str:
    return HEADER + "\n" + "\n".join(rows) + "\n" + footer


def only(text: str) -> NcclRun:
    result = parse_nccl_tests_any(text)
    assert len(result.runs) == 1
    return result.runs[0]


def json_doc() -> dict:
    return json.loads((DATA / "nccl_tests_allreduce_h200.json").read_text())


def assert_refused(run: NcclRun, size: int, *words: str) -> None:
    """The row of ``size`` is refused: not a figure, listed with a reason, the run says so."""
    assert all(r.size_bytes != size for r in run.rows)
    refused = [r for r in run.invalid_rows if r.size_bytes == size]
    assert refused, run.invalid_rows
    reasons = " ".join(refused[0].reasons).lower()
    for word in words:
        assert word.lower() in reasons, reasons
    assert run.truncated is True
    assert any("invalid" in p for p in run.problems), run.problems


# ------------------------------------------------------------------------------- text table


def test_a_clean_table_has_no_problems():
    run = only(table(row(1 << 20), row(2 << 20)))
    assert run.invalid_rows == () and run.problems == () and run.truncated is False


@pytest.mark.parametrize(
    ("cells", "words"),
    [
        ({"busbw": "-45.17"}, ("busbw", "negative")),
        ({"algbw": "-24.09"}, ("algbw", "negative")),
        ({"time": "-43.52"}, ("time", "negative")),
        ({"busbw": "nan"}, ("busbw", "finite")),
        ({"busbw": "-nan"}, ("busbw", "finite")),
        ({"algbw": "inf"}, ("algbw", "finite")),
        ({"time": "inf"}, ("time", "finite")),
        ({"wrong": "-3"}, ("#wrong", "negative")),
        ({"wrong": "0.4"}, ("#wrong", "whole")),
        ({"wrong": "nan"}, ("#wrong", "finite")),
    ],
)
def test_an_impossible_cell_makes_the_row_invalid(cells, words):
    run = only(table(row(1 << 20), row(2 << 20, **cells), row(4 << 20)))
    assert_refused(run, 2 << 20, *words)
    assert [r.size_bytes for r in run.rows] == [1 << 20, 4 << 20]


def test_negative_busbw_is_never_the_maximum_or_a_plateau_figure():
    run = only(table(row(1 << 30, busbw="-900.0"), row(2 << 30, busbw="-800.0")))
    assert run.max_busbw_gbps is None
    assert run.busbw_at_largest_gbps is None
    assert run.busbw_at_or_above(1 << 30) == []


def test_a_negative_wrong_count_does_not_cancel_a_positive_one():
    run = only(table(row(1 << 20, wrong="3"), row(2 << 20, wrong="-3")))
    assert run.wrong == 3
    assert_refused(run, 2 << 20, "#wrong")


def test_a_fractional_wrong_count_is_not_rounded_to_zero():
    run = only(table(row(1 << 20, wrong="0.4")))
    assert run.wrong is None  # no trustworthy count at all, not "0 wrong"
    assert_refused(run, 1 << 20, "#wrong")


def test_negative_size_in_the_text_table_is_an_invalid_row_not_ignored():
    text = table(row(1 << 20), row(2 << 20).replace(f"{2 << 20:>12}", f"{-(2 << 20):>12}", 1))
    run = only(text)
    assert [r.size_bytes for r in run.rows] == [1 << 20]
    assert any("size" in " ".join(r.reasons) for r in run.invalid_rows)
    assert run.truncated is True


def test_footer_average_that_is_not_a_number_marks_the_run():
    for value in ("nan", "-nan", "inf", "-12.5"):
        run = only(
            table(
                row(1 << 20),
                footer=f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {value}\n",
            )
        )
        assert run.avg_busbw_gbps is None
        assert run.truncated is True, value
        assert any("Avg bus bandwidth" in p for p in run.problems), run.problems


@pytest.mark.parametrize(
    ("sizes", "word"),
    [
        ([1 << 20, 4 << 20, 2 << 20], "order"),
        ([1 << 20, 2 << 20, 2 << 20], "repeated"),
    ],
)
def test_sizes_out_of_order_or_repeated_are_flagged(sizes, word):
    run = only(table(*(row(s) for s in sizes)))
    assert any(word in p for p in run.problems), run.problems


def test_sizes_restart_for_each_data_type_and_zero_sizes_repeat_legitimately():
    """``-d all`` restarts the sizes for every type; small all_gather sizes round down to 0."""
    rows = [
        row(0).replace("float", "int8 "),
        row(0).replace("float", "int8 "),
        row(1 << 20).replace("float", "int8 "),
        row(1 << 20),
        row(2 << 20),
    ]
    run = only(table(*rows))
    assert run.problems == ()


def test_problems_do_not_leak_into_the_next_run():
    bad = table(row(1 << 20, busbw="-1.0"))
    good = table(row(1 << 20))
    first, second = parse_nccl_tests(bad + good).runs
    assert first.invalid_rows and first.truncated
    assert second.invalid_rows == () and second.problems == () and second.truncated is False


# ------------------------------------------------------------------------------- JSON report


@pytest.mark.parametrize(
    ("side", "key", "value", "word"),
    [
        ("out_of_place", "bus_bw", -355.7, "bus_bw"),
        ("in_place", "alg_bw", -1.0, "alg_bw"),
        ("out_of_place", "time", -5.0, "time"),
        ("out_of_place", "bus_bw", "nan", "bus_bw"),  # nccl-tests writes NaN as the string "nan"
        ("out_of_place", "bus_bw", "fast", "bus_bw"),
        ("in_place", "nwrong", 2.5, "nwrong"),
        ("in_place", "nwrong", -3.0, "nwrong"),
        ("in_place", "nwrong", "nan", "nwrong"),
    ],
)
def test_json_impossible_value_makes_the_row_invalid(side, key, value, word):
    doc = json_doc()
    target = doc["results"][-1]
    target[side][key] = value
    run = parse_nccl_tests_json(doc).runs[0]
    assert_refused(run, target["size"], word)


def test_json_fractional_nwrong_is_not_read_as_checking_off():
    doc = json_doc()
    doc["results"][0]["in_place"]["nwrong"] = 2.5
    run = parse_nccl_tests_json(doc).runs[0]
    assert run.wrong == 0  # the other rows' counts; the 2.5 row is refused, not None
    assert run.invalid_rows and run.truncated


@pytest.mark.parametrize("size", [-1048576, 1048576.5, "big", None, 2**64, 1e30])
def test_json_size_must_be_a_whole_non_negative_number(size):
    doc = json_doc()
    if size is None:
        del doc["results"][0]["size"]
    else:
        doc["results"][0]["size"] = size
    run = parse_nccl_tests_json(doc).runs[0]
    assert len(run.rows) == len(doc["results"]) - 1
    assert len(run.invalid_rows) == 1 and "size" in " ".join(run.invalid_rows[0].reasons)
    assert run.truncated is True


@pytest.mark.parametrize(
    ("key", "value"), [("ngpus", -8), ("nthreads", -1), ("ngpus", 0), ("ngpus", 1.5)]
)
def test_json_impossible_config_gives_no_rank_count_and_says_why(key, value):
    doc = json_doc()
    doc["config"][key] = value
    doc["config"]["nthreads" if key == "ngpus" else "ngpus"] = -1 if value == -8 else 1
    run = parse_nccl_tests_json(doc).runs[0]
    assert run.ranks is None
    assert any(key in p for p in run.problems), run.problems


def test_json_impossible_summary_values_mark_the_run():
    doc = json_doc()
    doc["average_bus_bandwidth"]["bandwidth"] = "nan"
    run = parse_nccl_tests_json(doc).runs[0]
    assert run.avg_busbw_gbps is None and run.truncated is True
    doc = json_doc()
    doc["out_of_bounds"]["count"] = -1
    run = parse_nccl_tests_json(doc).runs[0]
    assert run.out_of_bounds is None and run.truncated is True
    assert any("out_of_bounds" in p for p in run.problems)


def test_json_sizes_out_of_order_are_flagged():
    doc = json_doc()
    doc["results"][0], doc["results"][1] = doc["results"][1], doc["results"][0]
    run = parse_nccl_tests_json(doc).runs[0]
    assert any("order" in p for p in run.problems)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"results": [{"size": 1e999999, "out_of_place": {"bus_bw": 1.0}}]}', ("finite",)),
        ('{"results": [{"size": 8, "out_of_place": {"bus_bw": NaN}}]}', ("finite",)),
        ('{"results": [{"size": 8, "out_of_place": {"bus_bw": -Infinity}}]}', ("finite",)),
        ('{"results": [{"size": 8, "out_of_place": {"bus_bw": inf}}]}', ("finite",)),
        ('{"results": [{"size": ' + "9" * 100_000 + "}]}", ("digits",)),
        ('{"results": [{"size": ' + "9" * 100 + "}]}", ("digits",)),
        ("[" * 200_000, ("nested",)),
        ('{"config": ' * 100_000, ("nested",)),
    ],
)
def test_json_no_benchmark_writes_is_a_parse_error(text, words):
    with pytest.raises(ParseError) as caught:
        parse_nccl_tests_any(text)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 300
    for word in words:
        assert word in message.lower(), message
