"""The dashboard's charts in a real browser: drawn from the JSON, and redrawn as work finishes.

Uses the browser, live server and logged-in console of ``test_admin_browser``
(skipped there, with one line, where Chromium is missing). A real
``runworkers --burst`` finishes the job, so the chart moves because a worker
did something, not because a row was written for it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from django_jobs.timeseries import MINUTES
from tests import test_admin_browser
from tests.testapp import tasks

pytestmark = pytest.mark.postgres

live_server = test_admin_browser.live_server
browser = test_admin_browser.browser
console = test_admin_browser.console
screenshots = test_admin_browser.screenshots
Console = test_admin_browser.Console

SUCCEEDED_BARS = "#dj-chart-throughput rect.dj-s-succeeded"


def succeeded_in_the_hour(page: Console) -> int:
    return sum(
        int(rect.get_attribute("data-value") or 0)
        for rect in page.driver.find_elements(By.CSS_SELECTOR, SUCCEEDED_BARS)
    )


def open_dashboard(page: Console) -> None:
    page.open("/admin/django_jobs/job/dashboard/")
    page.wait_for("#dj-charts[data-updated]")


def test_browser__the_dashboard_draws_a_chart_of_each_minute_of_the_hour(
    console: Console, screenshots: Path
) -> None:
    open_dashboard(console)

    find = console.driver.find_elements
    assert len(find(By.CSS_SELECTOR, "#dj-chart-throughput g.dj-bar")) == MINUTES
    depth = find(By.CSS_SELECTOR, "#dj-chart-depth polyline.dj-s-depth")
    assert [len((line.get_attribute("points") or "").split()) for line in depth] == [MINUTES]
    assert len(find(By.CSS_SELECTOR, "#dj-chart-failures polyline")) == 2
    # No claim in the hour: the latency chart has gaps only, and says so in its table.
    assert find(By.CSS_SELECTOR, "#dj-chart-latency polyline") == []
    labelled = find(By.CSS_SELECTOR, "#dj-charts svg[role=img][aria-labelledby]")
    assert len(labelled) == 4
    rows = find(By.CSS_SELECTOR, "#dj-chart-depth table tbody tr")
    assert len(rows) == MINUTES
    console.save(screenshots, "admin-dashboard-charts.png")


def test_browser__the_charts_move_when_a_job_finishes_without_a_page_reload(
    console: Console, run_burst: Callable[..., str]
) -> None:
    open_dashboard(console)
    assert succeeded_in_the_hour(console) == 0
    console.driver.execute_script("window.djSamePage = true;")

    tasks.add.enqueue(1, 2)
    run_burst()

    WebDriverWait(console.driver, 30).until(lambda _: succeeded_in_the_hour(console) == 1)
    assert console.driver.execute_script("return window.djSamePage === true;")
    latency = console.driver.find_elements(By.CSS_SELECTOR, "#dj-chart-latency .dj-s-p50")
    assert latency != []
    # Percentiles are bucket bounds, and the numbers say so.
    now = console.driver.find_element(By.CSS_SELECTOR, "#dj-chart-latency .dj-now")
    assert now.text.startswith("p50 ≤ ")
