"""Parser tests: pure domain code, no Airflow. Fixture files live in tests/data/parsing/."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def data_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "data" / "parsing"
