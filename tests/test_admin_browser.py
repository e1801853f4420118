"""The repair console in a real browser: Debian's Chromium, driven by Selenium.

Each test logs in, works the admin the way an operator does (filters, opens a
job, clicks a verb, types a reason) and reads the result off the page. They
need ``/usr/bin/chromium`` and ``/usr/bin/chromedriver`` (Debian packages
``chromium`` and ``chromium-driver``); without them the module is skipped with
one line, except under ``CI``, where a missing browser is a failure.

Screenshots go to the test's temporary directory; with
``DJANGO_JOBS_SCREENSHOTS=docs/img`` they replace the ones in the docs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import django
import pytest
from django.contrib.auth.models import User
from django.test.utils import override_settings
from django.utils import timezone
from pytest_django.live_server_helper import LiveServer

from django_jobs.models import Attempt, Dependency, Job, JobEvent
from django_jobs.states import AttemptOutcome, JobState
from tests.test_admin import lease, make_job, make_worker

pytestmark = pytest.mark.postgres

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "correct horse battery staple"

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    if os.environ.get("CI"):
        raise RuntimeError(
            "CI needs /usr/bin/chromium and /usr/bin/chromedriver for the admin browser tests "
            "(apt-get install chromium chromium-driver)."
        )
    pytest.skip(
        "chromium/chromedriver not installed (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def live_server() -> Iterator[LiveServer]:
    """pytest-django's live server, serving the admin's CSS so pages look as they do in use.

    The test settings have no ``staticfiles`` app, so the files are copied
    into a ``STATIC_ROOT`` that Django's test server serves itself.
    """
    static_root = Path(tempfile.mkdtemp(prefix="dj-admin-static-"))
    shutil.copytree(
        Path(django.__file__).parent / "contrib/admin/static", static_root, dirs_exist_ok=True
    )
    shutil.copytree(ROOT / "django_jobs/static", static_root, dirs_exist_ok=True)
    with override_settings(STATIC_URL="/static/", STATIC_ROOT=str(static_root)):
        server = LiveServer("localhost")
        yield server
        server.stop()
    shutil.rmtree(static_root, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    profile = tempfile.mkdtemp(prefix="dj-admin-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1440,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(argument)
    # Both paths are given, so Selenium Manager has nothing to look up or download.
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def console(browser: WebDriver, live_server: LiveServer) -> Console:
    User.objects.create_superuser("ops", "ops@example.com", PASSWORD)
    browser.delete_all_cookies()
    page = Console(browser, live_server.url)
    page.log_in("ops")
    return page


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    target = os.environ.get("DJANGO_JOBS_SCREENSHOTS")
    return (ROOT / target) if target else tmp_path


class Console:
    """What an operator sees and clicks, in the words of the page."""

    def __init__(self, driver: WebDriver, base: str) -> None:
        self.driver = driver
        self.base = base

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def log_in(self, username: str) -> None:
        self.open("/admin/login/?next=/admin/")
        self.driver.find_element(By.NAME, "username").send_keys(username)
        self.driver.find_element(By.NAME, "password").send_keys(PASSWORD)
        self.driver.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        self.wait_for("#user-tools")

    def wait_for(self, css: str) -> Any:
        return WebDriverWait(self.driver, 10).until(
            expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css))
        )

    def click_link(self, text: str) -> None:
        self.driver.find_element(By.LINK_TEXT, text).click()

    def messages(self) -> list[str]:
        self.wait_for("ul.messagelist")
        return [li.text for li in self.driver.find_elements(By.CSS_SELECTOR, "ul.messagelist li")]

    def row_ids(self) -> list[str]:
        return [
            cell.text
            for cell in self.driver.find_elements(By.CSS_SELECTOR, "#result_list th.field-short_id")
        ]

    def job_state(self) -> str:
        return self.driver.find_element(By.CSS_SELECTOR, ".field-state_badge .dj-badge").text

    def select_rows(self, *jobs: Job) -> None:
        for job in jobs:
            self.driver.find_element(
                By.CSS_SELECTOR, f"input.action-select[value='{job.pk}']"
            ).click()

    def run_action(self, label: str) -> None:
        Select(self.driver.find_element(By.NAME, "action")).select_by_visible_text(label)
        self.driver.find_element(By.CSS_SELECTOR, "button[name=index]").click()

    def confirm(self, reason: str = "") -> None:
        if reason:
            self.wait_for("#id_note").send_keys(reason)
        self.driver.find_element(By.NAME, "_confirm").click()

    def press(self, verb: str) -> None:
        self.driver.find_element(By.CSS_SELECTOR, f".object-tools .dj-verb-{verb}").click()

    def buttons(self) -> list[str]:
        return [
            element.get_attribute("class") or ""
            for element in self.driver.find_elements(By.CSS_SELECTOR, ".object-tools .dj-verb > *")
        ]

    def save(self, directory: Path, name: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.driver.set_window_size(1600, 1000)
        height = self.driver.execute_script("return document.body.scrollHeight")
        self.driver.set_window_size(1600, max(800, min(int(height) + 40, 2400)))
        self.driver.execute_script("window.scrollTo(0, 0)")
        self.driver.save_screenshot(str(directory / name))
        self.driver.set_window_size(1440, 1000)


def a_day_of_trouble() -> dict[str, Job]:
    """A handful of jobs an operator would meet on a bad day."""
    now = timezone.now()
    jobs = {
        "failed": make_job(
            JobState.FAILED,
            task_name="tests.testapp.tasks.add",
            tenant="acme",
            attempts=1,
            max_attempts=1,
            args=[2, "two"],
            kwargs={"currency": "EUR", "retry": False},
            last_error="Traceback (most recent call last):\nTypeError: unsupported operand",
            enqueued_at=now - timedelta(minutes=42),
            finished_at=now - timedelta(minutes=41),
        ),
        "exhausted": make_job(
            JobState.EXHAUSTED,
            task_name="tests.testapp.tasks.record_once",
            tenant="globex",
            attempts=3,
            max_attempts=3,
            last_error="TimeoutError: payment gateway did not answer in 30 s",
            enqueued_at=now - timedelta(hours=2),
            finished_at=now - timedelta(minutes=5),
        ),
        "running": make_job(
            JobState.RUNNING,
            task_name="tests.testapp.tasks.record",
            tenant="acme",
            attempts=1,
            progress_done=640,
            progress_total=1000,
            progress_message="rows exported",
            enqueued_at=now - timedelta(minutes=3),
        ),
        "queued": make_job(tenant="initech", enqueued_at=now - timedelta(seconds=50)),
        "scheduled": make_job(
            tenant="initech",
            queue="other",
            run_after=now + timedelta(minutes=30),
            enqueued_at=now - timedelta(seconds=20),
        ),
        "quarantined": make_job(
            JobState.QUARANTINED,
            tenant="umbrella",
            attempts=3,
            last_error="lost 3 times in a row: held as poison",
            enqueued_at=now - timedelta(hours=5),
        ),
        "succeeded": make_job(
            JobState.SUCCEEDED,
            tenant="acme",
            attempts=1,
            result={"receipt": "R-2041", "total": "19.90"},
            enqueued_at=now - timedelta(minutes=8),
            finished_at=now - timedelta(minutes=7),
        ),
    }
    start = now - timedelta(minutes=41, seconds=3)
    Attempt.objects.create(
        job=jobs["failed"],
        number=1,
        worker_id=None,
        worker_name="web-1:4242",
        outcome=AttemptOutcome.FAILED,
        started_at=start,
        finished_at=start + timedelta(seconds=1.3),
        error_type="builtins.TypeError",
        error_message="unsupported operand type(s) for +: 'int' and 'str'",
        traceback=(
            "Traceback (most recent call last):\n"
            '  File "tests/testapp/tasks.py", line 27, in add\n'
            "    return a + b\n"
            "TypeError: unsupported operand type(s) for +: 'int' and 'str'"
        ),
    )
    # The receipt of the order whose charge exhausted: it waits for that job.
    jobs["waiting"] = make_job(
        JobState.WAITING,
        task_name="tests.testapp.tasks.record",
        tenant="globex",
        waiting_on=1,
        enqueued_at=now - timedelta(hours=2),
    )
    Dependency.objects.create(job=jobs["waiting"], depends_on=jobs["exhausted"])
    busy = make_worker(host="worker-a", pid=311, queues=["default", "other"])
    make_worker(host="worker-b", pid=977, heartbeat_age=95)
    lease(jobs["running"], busy)
    return jobs


def test_browser__an_operator_filters_the_list_and_opens_a_failed_job(
    console: Console, screenshots: Path
) -> None:
    jobs = a_day_of_trouble()
    console.driver.find_element(By.CSS_SELECTOR, "tr.model-job th a").click()  # from the index
    console.wait_for("#result_list")
    console.save(screenshots, "admin-job-list.png")

    console.click_link("Failed")

    assert console.row_ids() == [str(jobs["failed"].pk)[:8]]
    console.click_link(str(jobs["failed"].pk)[:8])
    console.wait_for(".field-args_json")
    page = console.driver.page_source
    assert "unsupported operand type(s) for +: 'int' and 'str'" in page
    assert (
        '"currency": "EUR"'
        in console.driver.find_element(By.CSS_SELECTOR, ".field-kwargs_json pre").text
    )
    console.driver.find_element(By.CSS_SELECTOR, ".dj-traceback summary").click()
    console.save(screenshots, "admin-job-page.png")


def test_browser__the_dashboard_is_one_click_from_the_jobs_section(
    console: Console, screenshots: Path
) -> None:
    a_day_of_trouble()
    console.driver.find_element(By.CSS_SELECTOR, "div.app-django_jobs caption a").click()

    console.driver.find_element(By.CSS_SELECTOR, ".dj-dashboard-module a").click()

    console.wait_for("#dj-workers")
    stale = console.driver.find_elements(By.CSS_SELECTOR, "#dj-workers tr.dj-stale")
    assert [row.get_attribute("data-host") for row in stale] == ["worker-b"]
    default = console.driver.find_element(By.CSS_SELECTOR, "tr.dj-queue[data-queue=default]")
    assert default.find_element(By.CSS_SELECTOR, ".dj-due").text == "1"
    console.save(screenshots, "admin-dashboard.png")


def test_browser__bulk_retry_reports_what_changed_and_what_was_refused(console: Console) -> None:
    jobs = a_day_of_trouble()
    console.open("/admin/django_jobs/job/")
    console.select_rows(jobs["failed"], jobs["succeeded"])

    console.run_action("Retry selected jobs")

    messages = console.messages()
    assert messages[0] == "1 job retried."
    assert messages[1].startswith(
        f"1 job refused: Cannot retry job {jobs['succeeded'].pk}: it is succeeded"
    )
    assert Job.objects.get(pk=jobs["failed"].pk).state == JobState.QUEUED


@pytest.mark.parametrize(
    ("label", "done"), [("Quarantine", "1 job quarantined."), ("Discard", "1 job discarded.")]
)
def test_browser__bulk_quarantine_and_discard_take_a_reason_on_a_confirmation_page(
    console: Console, label: str, done: str
) -> None:
    jobs = a_day_of_trouble()
    console.open("/admin/django_jobs/job/")
    console.select_rows(jobs["exhausted"])
    console.run_action(f"{label} selected jobs")

    console.confirm(reason="gateway down; reprocess tomorrow")

    assert console.messages() == [done]
    event = JobEvent.objects.get(job=jobs["exhausted"])
    assert (event.actor, event.note) == ("ops", "gateway down; reprocess tomorrow")


@pytest.mark.parametrize(
    ("job", "verb", "reason", "message", "state"),
    [
        ("failed", "retry", "", "Job retried: it is now Queued.", "Queued"),
        ("running", "cancel", "", "Job cancelled: it is now Cancelling.", "Cancelling"),
        ("quarantined", "release", "", "Job released: it is now Queued.", "Queued"),
        (
            "exhausted",
            "quarantine",
            "bad payload",
            "Job quarantined: it is now Quarantined.",
            "Quarantined",
        ),
        (
            "exhausted",
            "discard",
            "refunded by hand",
            "Job discarded: it is now Discarded.",
            "Discarded",
        ),
        ("scheduled", "run_now", "", "Job made due now: it is now Queued.", "Queued"),
    ],
)
def test_browser__each_button_on_the_job_page_changes_the_job_and_says_so(
    console: Console, job: str, verb: str, reason: str, message: str, state: str
) -> None:
    jobs = a_day_of_trouble()
    console.open(f"/admin/django_jobs/job/{jobs[job].pk}/change/")
    console.press(verb)
    if reason:
        console.confirm(reason=reason)

    assert console.messages() == [message]
    assert console.job_state() == state


def test_browser__an_operator_follows_a_waiting_job_to_the_job_it_waits_for_and_retries_it(
    console: Console,
) -> None:
    jobs = a_day_of_trouble()
    console.open(f"/admin/django_jobs/job/{jobs['waiting'].pk}/change/")
    assert console.job_state() == "Waiting"

    console.driver.find_element(By.CSS_SELECTOR, ".field-waits_for a").click()
    console.wait_for(".field-state_badge")
    reached = (console.job_state(), console.driver.current_url)
    console.press("retry")

    assert reached == (
        "Exhausted",
        f"{console.base}/admin/django_jobs/job/{jobs['exhausted'].pk}/change/",
    )
    assert console.messages() == ["Job retried: it is now Queued."]


def test_browser__an_operator_without_retry_job_sees_no_retry_button(
    console: Console, live_server: LiveServer
) -> None:
    from django.contrib.auth.models import Permission

    jobs = a_day_of_trouble()
    viewer = User.objects.create_user("viewer", password=PASSWORD, is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename__in=["view_job", "discard_job"]))
    console.driver.delete_all_cookies()
    console.log_in("viewer")

    console.open(f"/admin/django_jobs/job/{jobs['failed'].pk}/change/")

    assert console.buttons() == ["dj-verb-discard"]


def test_browser__rerun_opens_the_new_job_which_links_back_to_the_original(
    console: Console,
) -> None:
    jobs = a_day_of_trouble()
    console.open(f"/admin/django_jobs/job/{jobs['succeeded'].pk}/change/")

    console.press("rerun")

    assert console.messages() == ["Job rerun: this is the new job."]
    copy = Job.objects.get(rerun_of=jobs["succeeded"].pk)
    assert console.driver.current_url == f"{console.base}/admin/django_jobs/job/{copy.pk}/change/"
    assert console.job_state() == "Queued"
    console.driver.find_element(By.CSS_SELECTOR, ".field-rerun_of_link a").click()
    console.wait_for(".field-reruns a")
    assert console.job_state() == "Succeeded"


def test_browser__select_all_across_pages_confirms_the_count_then_retries_every_match(
    console: Console,
) -> None:
    now = timezone.now()
    Job.objects.bulk_create(
        Job(
            task_name="tests.testapp.tasks.add",
            state=JobState.FAILED,
            attempts=1,
            max_attempts=1,
            run_after=now,
            enqueued_at=now - timedelta(seconds=i),
            updated_at=now,
        )
        for i in range(101)  # one more than a page
    )
    console.open("/admin/django_jobs/job/?state=failed")
    console.driver.find_element(By.ID, "action-toggle").click()
    console.driver.find_element(By.CSS_SELECTOR, ".actions .question a").click()

    console.run_action("Retry selected jobs")
    across = console.wait_for(".dj-across")
    counts = (across.get_attribute("data-matched"), across.get_attribute("data-applicable"))
    console.confirm()

    assert counts == ("101", "101")
    assert console.messages() == ["101 of 101 matching jobs retried; 0 skipped."]
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.QUEUED}
