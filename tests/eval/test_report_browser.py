"""The report of two runs in headless Chromium (Debian's chromium + chromium-driver, driven by selenium):
the before/after table comes first, the plots are interactive (hover tooltip, drag-to-zoom and reset),
a run toggle hides that run in every panel, and the sample table filters. Skipped without chromium
(`make system-deps` or `apt-get install -y chromium chromium-driver`)."""

import importlib.util
import shutil
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("report_screenshot", Path(__file__).parents[2] / "benchmarks" / "report_screenshot.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
HAVE_CHROMIUM = bench.find_chromium() is not None and Path(CHROMEDRIVER).exists()

pytestmark = pytest.mark.skipif(not HAVE_CHROMIUM, reason="chromium and chromium-driver are not installed "
                                "(apt-get install -y chromium chromium-driver, or make system-deps)")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from selenium import webdriver  # the `test` extra; a missing selenium fails here rather than skipping
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    from tracerl.eval.report import build_comparison

    root = tmp_path_factory.mktemp("runs")
    runs = [bench.synthetic_run(root, steps=3, seed=s) for s in (0, 1)]
    index = build_comparison(runs, root / "cmp")
    opts = webdriver.ChromeOptions()
    opts.binary_location = bench.find_chromium()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000",
                "--disable-background-networking", "--no-first-run", f"--user-data-dir={root / 'profile'}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        driver.get(index.resolve().as_uri())
        WebDriverWait(driver, 30).until(lambda d: d.find_element("tag name", "body").get_attribute("data-plots-ready"))
        yield driver, [r.name for r in runs]
    finally:
        driver.quit()


def test_before_after_table_comes_first_and_scripts_run_cleanly(page):
    driver, (a, b) = page
    first = driver.execute_script("return document.querySelector('main').firstElementChild.id")
    first_table = driver.execute_script("return document.querySelector('table').id")
    assert (first, first_table) == ("before-after", "before-after-table")
    rows = driver.find_elements("css selector", "#before-after-table tbody tr")
    assert [r.find_elements("tag name", "td")[1].text for r in rows] == ["sft", "rl", "sft", "rl"]
    assert driver.find_element("id", "before-after").location["y"] < driver.find_element("id", "plots").location["y"]
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []  # no script error, no failed (network) load


def test_plots_hover_and_zoom(page):
    from selenium.webdriver.common.action_chains import ActionChains

    driver, (a, b) = page
    plots = driver.find_elements("css selector", "svg.tr-plot")
    assert len(plots) >= 8  # reward, entropy, KL, ESS, length, rates, tasks, SFT, time: each with data
    for svg in plots:
        assert svg.find_elements("css selector", "g.tr-series path.tr-line, g.tr-series rect.tr-bar")
    panel = plots[0].find_element("xpath", "..")
    overlay = plots[0].find_element("css selector", "rect.tr-overlay")
    tip = panel.find_element("css selector", ".tr-tip")
    assert not tip.is_displayed()
    ActionChains(driver).move_to_element(overlay).perform()  # the middle of 3 steps (1, 2, 3): step 2
    assert tip.is_displayed()
    assert tip.text.startswith("step 2") and f"{a}: reward/mean" in tip.text and f"{b}: reward/mean" in tip.text
    ticks = lambda: [t.text for t in plots[0].find_elements("css selector", "text.tr-tick")]  # noqa: E731
    before = ticks()
    reset = panel.find_element("css selector", "button.tr-reset")
    assert not reset.is_displayed()
    width = overlay.size["width"]
    (ActionChains(driver).move_to_element_with_offset(overlay, -width // 2 + 5, 0).click_and_hold()
     .move_by_offset(width // 2, 0).release().perform())  # drag over steps 1..2
    assert reset.is_displayed() and ticks() != before and "3" not in ticks()[-3:]  # step 3 zoomed out
    reset.click()
    assert not reset.is_displayed() and ticks() == before


def test_run_toggle_hides_that_run_in_every_panel(page):
    driver, (a, b) = page
    toggle = driver.find_element("css selector", f'button.tr-run[data-run="{b}"]')
    plots = driver.find_elements("css selector", "svg.tr-plot")

    def shown(run):
        return [sum(g.is_displayed() for g in svg.find_elements("css selector", f'g.tr-series[data-run="{run}"]'))
                for svg in plots]

    assert all(n > 0 for n in shown(b)) and all(n > 0 for n in shown(a))
    toggle.click()
    assert toggle.get_attribute("aria-pressed") == "false"
    assert shown(b) == [0] * len(plots) and all(n > 0 for n in shown(a))
    toggle.click()
    assert all(n > 0 for n in shown(b))


def test_sample_table_filters(page):
    from selenium.webdriver.support.ui import Select

    driver, (a, b) = page
    rows = driver.find_elements("css selector", "#samples tbody tr")
    assert len(rows) == 12  # 2 runs x 3 steps x (best, worst) of one environment
    visible = lambda: [r for r in rows if r.is_displayed()]  # noqa: E731
    Select(driver.find_element("id", "f-run")).select_by_value(b)
    assert {r.get_attribute("data-run") for r in visible()} == {b} and len(visible()) == 6
    box = driver.find_element("id", "f-rmin")
    box.send_keys("1")
    expected = [r for r in rows if r.get_attribute("data-run") == b and float(r.get_attribute("data-reward")) >= 1]
    assert expected and visible() == expected and driver.find_element("id", "f-count").text == f"{len(expected)} of 12 episodes"
    Select(driver.find_element("id", "f-env")).select_by_value("math_tool")
    assert visible() == expected
    driver.find_element("id", "f-reset").click()
    assert len(visible()) == 12
    Select(driver.find_element("id", "f-ending")).select_by_value("eos")
    assert all(r.get_attribute("data-ending") == "eos" for r in visible()) and visible()
