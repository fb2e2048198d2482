"""The pages in a real headless browser (Debian chromium + chromedriver through selenium)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from trojanscope.leaderboard.worker import Worker

from .helpers import ADMIN, submission_bytes

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip("headless browser test needs Debian chromium and chromium-driver "
                "(apt-get install -y chromium chromium-driver)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium (dev extra) to run browser tests")
pytest.importorskip("trojanscope.scoring.harness", reason="the scoring harness has not landed yet")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

WAIT_S = 20


def wait_text(browser, element_id: str, text: str):  # type: ignore[no-untyped-def]
    """The element once it shows ``text``: clicks that submit a form or follow a link return before the
    next page has loaded, so a bare find_element can read the old page (or none)."""
    WebDriverWait(browser, WAIT_S).until(EC.text_to_be_present_in_element((By.ID, element_id), text))
    return browser.find_element(By.ID, element_id)


@pytest.fixture
def browser():  # type: ignore[no-untyped-def]
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-dev-shm-usage", "--window-size=1280,900"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.mark.slow
def test_upload_score_and_leaderboard_in_browser(live_server, browser, client, setup_round, settings,
                                                 tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round(("alpha",), smoke_models=2)
    good = tmp_path / "good.zip"
    good.write_bytes(submission_bytes("good"))
    # index -> round page
    browser.get(live_server + "/")
    browser.find_element(By.LINK_TEXT, "Round r1").click()
    assert wait_text(browser, "round-status", "open").text == "open"
    # a wrong token is refused on the page and nothing is queued
    browser.find_element(By.ID, "token").send_keys("ts_1_" + "x" * 43)
    browser.find_element(By.ID, "file").send_keys(str(good))
    browser.find_element(By.ID, "submit").click()
    assert "does not belong to any team" in wait_text(browser, "error", "does not belong").text
    assert client.get("/api/teams/alpha").json()["submissions"] == []
    # the right token: redirected to the new submission's page
    browser.find_element(By.ID, "token").send_keys(tokens["alpha"])
    browser.find_element(By.ID, "file").send_keys(str(good))
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, WAIT_S).until(EC.url_contains("/submissions/1"))
    assert browser.current_url.endswith("/submissions/1")
    assert wait_text(browser, "submission-status", "queued").text == "queued"
    # score it, reload: the page shows each stage's scores and per-model rows under neutral names
    Worker(settings).run_until_idle()
    browser.refresh()
    assert wait_text(browser, "submission-status", "scored").text == "scored"
    api = client.get("/api/submissions/1").json()
    test_ce = next(s for s in api["stages"] if s["stage"] == "test")["scores"]["cross_entropy"]
    stages = browser.find_element(By.ID, "stages").text
    assert f"{test_ce:.4f}" in stages
    rows = browser.find_elements(By.CSS_SELECTOR, "#results-test tr")
    assert len(rows) == 1 + 4 and all(r.text.startswith("m-") for r in rows[1:])
    # the leaderboard shows the team's best with CE, CI, ROC-AUC, Brier, runtime and a link to the report
    browser.get(live_server + "/rounds/r1")
    table = browser.find_element(By.ID, "leaderboard")
    cells = [c.text for c in table.find_elements(By.CSS_SELECTOR, "tr")[1].find_elements(By.TAG_NAME, "td")]
    assert cells[1].startswith("alpha") and cells[2] == f"{test_ce:.4f}" and cells[-1] == "#1"
    shot = tmp_path / "leaderboard.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 5000
    if os.environ.get("TROJANSCOPE_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["TROJANSCOPE_SCREENSHOT"])
    table.find_element(By.LINK_TEXT, "alpha").click()
    WebDriverWait(browser, WAIT_S).until(EC.text_to_be_present_in_element((By.TAG_NAME, "h1"), "Team alpha"))
    assert "#1" in wait_text(browser, "team-submissions", "#1").text


@pytest.mark.slow
def test_api_docs_render_offline_and_the_organiser_signs_in(live_server, browser, client, setup_round,  # type: ignore[no-untyped-def]
                                                             settings) -> None:
    """/docs draws Swagger UI from the server's own assets (this machine has no route to a CDN); an unknown page
    is a page; the organiser signs in once and opens a test report."""
    browser.get(live_server + "/")
    browser.find_element(By.LINK_TEXT, "/docs").click()
    WebDriverWait(browser, WAIT_S).until(EC.presence_of_element_located((By.CSS_SELECTOR, ".swagger-ui .info .title")))
    assert "trojanscope leaderboard" in browser.find_element(By.CSS_SELECTOR, ".swagger-ui .info .title").text
    assert browser.find_elements(By.CSS_SELECTOR, ".opblock")  # the operations are listed
    assert all(not src or src.startswith(live_server) for src in
               (s.get_attribute("src") for s in browser.find_elements(By.TAG_NAME, "script")))
    browser.get(live_server + "/submissions/999")
    assert "submission 999 does not exist" in wait_text(browser, "error", "does not exist").text

    tokens = setup_round(("alpha",), smoke_models=1)
    client.post("/api/rounds/r1/submissions", headers={"Authorization": f"Bearer {tokens['alpha']}"},
                files={"file": ("s.zip", submission_bytes("good"), "application/zip")})
    Worker(settings).run_until_idle()
    browser.get(live_server + "/submissions/1/report/test/report.html")
    assert "organiser" in wait_text(browser, "error", "organiser").text  # a page saying why, not JSON
    browser.get(live_server + "/organiser")
    browser.find_element(By.ID, "token").send_keys(ADMIN)
    browser.find_element(By.ID, "sign-in").click()
    wait_text(browser, "organiser-signed-in", "organiser view")
    browser.get(live_server + "/submissions/1/report/test/report.html")
    WebDriverWait(browser, WAIT_S).until(EC.title_contains("python detector.py on"))
