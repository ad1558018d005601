"""The order ``make test`` hands test files to its workers (``tests/conftest.py``): the files
of end-to-end tests first, each file's tests together. Checked on this run's own collection,
so it holds for whatever this run collected."""

from __future__ import annotations

from itertools import groupby
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_files_of_end_to_end_tests_come_first_and_each_file_stays_together(request):
    items = request.session.items
    runs = [path for path, _ in groupby(item.path for item in items)]
    assert len(runs) == len(set(runs)), "a file's tests are split"
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    flags = [path in slow for path in runs]
    assert flags == sorted(flags, reverse=True), [p.name for p in runs if p in slow]


def test_make_test_keeps_the_collection_order():
    recipe = (ROOT / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "--dist loadfile --no-loadscope-reorder" in recipe, recipe
