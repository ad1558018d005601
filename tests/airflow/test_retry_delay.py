"""A deployment sets how long a failed gpufleet task waits before its first retry."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpufleet.airflow.dagkit import default_args, retry_delay


def test_the_default_first_retry_waits_30_seconds_and_backs_off(monkeypatch):
    monkeypatch.delenv("AIRFLOW__GPUFLEET__RETRY_DELAY_SECONDS", raising=False)
    args = default_args("x")
    assert args["retry_delay"] == timedelta(seconds=30)
    assert args["retry_exponential_backoff"] is True


def test_the_airflow_setting_changes_it(monkeypatch):
    monkeypatch.setenv("AIRFLOW__GPUFLEET__RETRY_DELAY_SECONDS", "1.5")
    assert default_args("x")["retry_delay"] == timedelta(seconds=1.5)


@pytest.mark.parametrize("raw", ["nan", "-1", "601", "inf", "soon"])
def test_a_delay_that_is_no_bounded_number_is_refused_naming_the_setting(monkeypatch, raw):
    monkeypatch.setenv("AIRFLOW__GPUFLEET__RETRY_DELAY_SECONDS", raw)
    with pytest.raises(ValueError, match=r"\[gpufleet\] retry_delay_seconds .*" + raw):
        retry_delay()
