"""The fleet in the Airflow UI, as a platform engineer sees it in a real Chromium.

Against a live api-server holding two nights (conftest.py): a clean one, then one with the
RDMA fabric of FLAGGED_POOL down (NCCL falls back to TCP sockets). Log in through the login
form, open "GPU fleet" from the navigation, see that pool flagged with the reason the nightly
recorded, open the pool and see its chart with the failing night below the baseline, and open
the nightly run's "Fleet report" tab. Full-page screenshots of each page go to
tests/browser/artifacts/ (fleet.png there is what docs/images/fleet.png is copied from).
"""

from __future__ import annotations

import json
import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def open_fleet_from_nav(page):
    """Click "GPU fleet" in the UI's navigation; the plugin page renders in an iframe."""
    page.goto("/")
    page.get_by_role("link", name="GPU fleet").or_(
        page.get_by_role("button", name="GPU fleet")
    ).first.click()
    frame = page.frame_locator("iframe")
    frame.locator("table#fleet").wait_for()
    return frame


def test_fleet_page_from_the_nav_flags_the_fabric_down_pool_with_its_reason(
    page, fleet_ui, artifacts
):
    faulty = fleet_ui.seed["nights"][1]
    assert faulty["state"] == "failed", faulty["tasks"]
    recorded = fleet_ui.seed["flagged_fabric"]
    assert not recorded["passed"] and recorded["transport"] == "socket", recorded

    frame = open_fleet_from_nav(page)
    page.screenshot(path=str(artifacts / "fleet.png"), full_page=True)
    rows = frame.locator("table#fleet tr[data-pool]")
    pools = rows.evaluate_all("rows => rows.map(r => [r.dataset.pool, r.dataset.ready])")
    assert len(pools) >= 3, pools
    flagged = frame.locator(f'tr[data-pool="{fleet_ui.seed["flagged_pool"]}"]')
    assert flagged.get_attribute("data-ready") == "no"
    why = " ".join(flagged.locator("td.why").inner_text().split())
    # the reason is the one the nightly wrote to the ledger (NCCL ran on TCP sockets, not on
    # the pool's RDMA), shown as written, not a generic "not ready"
    recorded_reasons = recorded["reasons"] + fleet_ui.seed["flagged_state"]["reason"].split("; ")
    assert any("socket" in reason for reason in recorded_reasons), recorded_reasons
    assert "socket" in why.lower(), why
    assert any(reason in why for reason in recorded_reasons), (why, recorded_reasons)
    # the pools the faulty night did not touch are ready
    others = [ready for pool, ready in pools if pool != fleet_ui.seed["flagged_pool"]]
    assert "yes" in others, pools


def test_pool_page_charts_the_failing_night_below_the_baseline(page, fleet_ui, artifacts):
    frame = open_fleet_from_nav(page)
    cluster_pool = fleet_ui.seed["flagged_pool"]
    frame.locator(f'tr[data-pool="{cluster_pool}"] a.pool-link').click()
    frame.locator("h1", has_text=cluster_pool).wait_for()
    frame.locator("#busbw-chart canvas").first.wait_for()
    page.screenshot(path=str(artifacts / "pool.png"), full_page=True)

    data = json.loads(frame.locator("script#pool-data").text_content())
    by_run = {night["run_id"]: night for night in data["nights"]}
    failing, clean = by_run[fleet_ui.faulty_run], by_run[fleet_ui.clean_run]
    assert not failing["passed"] and clean["passed"], data["nights"]
    assert (
        failing["busbw_gbps"]
        < data["baseline_gbps"]
        <= clean["busbw_gbps"] + (data.get("tolerance_gbps") or 0)
    ), data
    assert failing["busbw_gbps"] == pytest.approx(fleet_ui.seed["flagged_fabric"]["busbw_gbps"])
    marked = frame.locator(f'table#nights tr[data-run-id="{fleet_ui.faulty_run}"]')
    assert marked.get_attribute("data-passed") == "false"
    clean_row = frame.locator(f'table#nights tr[data-run-id="{fleet_ui.clean_run}"]')
    assert clean_row.get_attribute("data-passed") == "true"


def test_the_nightly_runs_report_tab_shows_the_report(page, fleet_ui, artifacts):
    run_id = fleet_ui.faulty_run
    page.goto(f"/dags/nightly_fabric_validation/runs/{run_id}")
    page.get_by_role("tab", name="Fleet report").or_(
        page.get_by_role("link", name="Fleet report")
    ).first.click()
    heading = page.frame_locator("iframe").locator("h1")
    heading.wait_for()
    page.screenshot(path=str(artifacts / "report.png"), full_page=True)
    text = heading.inner_text()
    assert "Nightly fabric validation" in text and run_id in text, text


def test_the_fleet_pages_need_a_login(anonymous_page, artifacts):
    response = anonymous_page.goto("/gpufleet/fleet")
    assert anonymous_page.locator("table#fleet").count() == 0
    assert response.status == 401 or re.search(r"/auth/login|/login", anonymous_page.url), (
        response.status,
        anonymous_page.url,
    )
