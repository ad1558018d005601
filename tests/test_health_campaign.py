"""The GPU health campaign (bench/health_campaign.py, issue 20) keeps its promises on a short run
of the shipped catalog (its pools rotate level 1 over 4 nights, issue 35): every GPU and NIC
fault found by the next nightly, the action the ladder gives for NVIDIA's (a climb on a node
acted on within the week), no healthy node taken out, no breaker tripped."""

from __future__ import annotations

import re

import pytest

from tests.support.campaigns import run_campaign

pytestmark = pytest.mark.slow


def test_a_short_campaign_finds_every_fault_and_takes_the_ladders_action():
    out = run_campaign("health_campaign", "--nights", "12", "--seed", "11")
    found = re.search(r"faults detected by the next nightly: (\d+) of (\d+)", out)
    assert found is not None and found.group(1) == found.group(2) != "0", out
    acted = re.search(
        r"actions taken as NVIDIA recommends \(within 3 nights\): (\d+) of (\d+)", out
    )
    assert acted is not None and acted.group(1) == acted.group(2) == found.group(2), out
    assert "(the ladder: " in out  # a node faulted again within the week climbed
    assert "healthy nodes taken out of service: 0 \n" in out
    # one fault at a time on a pool with none out never trips a pool breaker (its 24 h window
    # on the sim's clock: a ledger on the wall clock would count every night as one day)
    assert "breakers a person reset in the morning: 0\n" in out
    assert out.rstrip().endswith("PASS")
