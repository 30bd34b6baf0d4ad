#!/usr/bin/env python3
"""dashboard.py — the dashboard in a real browser (headless Chromium through
WebDriver): it renders what /v1/stats says, draws throughput while
kvtier-bench runs, shows empty states, changes the policy with the admin
token and shows the API's 400 next to the field, fits a narrow screen
without sideways scrolling, and says so when the daemon stops answering.

    dashboard.py PORT TOKEN SCREENSHOT_DIR BENCH_CMD...

Prints TAP-like "ok"/"not ok" lines; exits non-zero when one failed.
"""
import json
import os
import subprocess
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

PORT, TOKEN, SHOTS = sys.argv[1], sys.argv[2], sys.argv[3]
BENCH = sys.argv[4:]
BASE = f"http://127.0.0.1:{PORT}"
failed = 0


def check(name, cond, detail=""):
    global failed
    print(("ok - " if cond else "not ok - ") + name + ("" if cond else f": {detail}"))
    failed += 0 if cond else 1


def stats():
    with urllib.request.urlopen(BASE + "/v1/stats") as r:
        return json.load(r)


def refreshes(d):
    return int(d.execute_script("return Number(document.body.dataset.refreshes || 0)"))


def wait_refresh(d, n=1):
    """Waits (bounded) until the page has refreshed n more times."""
    start = refreshes(d)
    WebDriverWait(d, 15, 0.05).until(lambda x: refreshes(x) >= start + n)


def text(d, id_, by=By.ID):
    """The element's text; the tier cards are rebuilt each refresh, so one found just before
    a refresh goes stale: find it again (a refresh is a second apart)."""
    for _ in range(3):
        try:
            return d.find_element(by, id_).text
        except StaleElementReferenceException:
            continue
    return d.find_element(by, id_).text


def shot(d, name):
    d.save_screenshot(os.path.join(SHOTS, name + ".png"))


opts = Options()
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
          "--window-size=1280,1000"):
    opts.add_argument(a)
opts.binary_location = "/usr/bin/chromium"
d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
try:
    d.get(BASE + "/")
    wait_refresh(d)
    check("the page loads from / and refreshes", refreshes(d) >= 1)
    check("empty state: no clients yet", d.find_element(By.ID, "no-clients").is_displayed())
    check("empty state: no namespaces yet", d.find_element(By.ID, "no-namespaces").is_displayed())
    check("empty state: no buffers", d.find_element(By.ID, "no-buffers").is_displayed())
    check("write-behind: L1's dirty share and the writer, with L2",
          "dirty" in text(d, "writebehind") and "writer" in text(d, "writebehind") and
          not d.find_element(By.ID, "no-writebehind").is_displayed(), text(d, "writebehind"))
    check("L2 is shown with its state", "READY" in text(d, "tier-l2").upper(), text(d, "tiers"))
    check("L3 is shown with its state", "READY" in text(d, "tier-l3").upper(), text(d, "tiers"))
    # Issue 37, item 9: what the dashboard drew wrong.
    used = text(d, "#tier-l3 [data-field=used]", By.CSS_SELECTOR)
    check("L3 without a cap reads as such, not \"of 0 B\"", used.endswith("(no cap)"), used)
    legend = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#hits-legend .k")]
    check("the hit chart has a series per configured tier, and only those",
          legend == ["L1", "L2", "L3"], legend)
    icon = d.execute_script("return document.querySelector('link[rel=icon]').href")
    with urllib.request.urlopen(icon) as r:
        check("the page has a favicon", r.status == 200 and b"<svg" in r.read(), icon)
    shot(d, "empty")

    # Live traffic: throughput is drawn while the bench runs.
    bench = subprocess.Popen(BENCH, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    drawn = False
    deadline = time.time() + 60
    while bench.poll() is None and time.time() < deadline:
        wait_refresh(d)
        load = d.execute_script(
            "return Math.max(0, ...history.map(h => h.load + h.store))")
        drawn = drawn or load > 0
        if drawn and text(d, "clients") != "0":
            shot(d, "traffic")
    out = bench.communicate()[0].decode()
    check("kvtier-bench ran and verified", "verified: every byte" in out, out[-300:])
    check("throughput was drawn from live traffic", drawn)

    # After the traffic: the numbers on the page are /v1/stats' within one refresh.
    wait_refresh(d, 2)
    s = stats()
    dp = s["dataplane"]
    check("blocks stored match /v1/stats",
          text(d, "blocks-stored").replace(",", "") == str(dp["blocks_stored"]),
          f'{text(d, "blocks-stored")} vs {dp["blocks_stored"]}')
    check("blocks loaded match /v1/stats",
          text(d, "blocks-loaded").replace(",", "") == str(dp["blocks_loaded"]),
          f'{text(d, "blocks-loaded")} vs {dp["blocks_loaded"]}')
    items = text(d, "#tier-l1 [data-field=items]", By.CSS_SELECTOR).replace(",", "")
    check("L1 items match /v1/stats", items == str(s["l1"]["items"]), f'{items} vs {s["l1"]["items"]}')
    rows = d.find_elements(By.CSS_SELECTOR, "#namespaces tbody tr")
    check("the bench's namespace is listed", any("kvtier-bench" in r.text for r in rows),
          [r.text for r in rows])
    inside = d.execute_script(
        "const t = document.getElementById('namespaces'), c = t.closest('.card');"
        "return t.parentElement.getBoundingClientRect().right <= c.getBoundingClientRect().right + 1")
    check("the namespace table stays inside its card", inside)
    with urllib.request.urlopen(BASE + "/v1/namespaces") as r:
        bench_ns = [n for n in json.load(r)["namespaces"] if n["model"].startswith("kvtier-bench")][0]
    quota = max(bench_ns["l1_bytes"], 1 << 20)
    req = urllib.request.Request(f'{BASE}/v1/namespaces/{bench_ns["id"]}', method="PUT",
                                 data=json.dumps({"l1_quota_bytes": quota}).encode(),
                                 headers={"Authorization": "Bearer " + TOKEN,
                                          "Content-Type": "application/json"})
    urllib.request.urlopen(req).close()
    wait_refresh(d)
    cells = [c.text for r in d.find_elements(By.CSS_SELECTOR, "#namespaces tbody tr")
             if "kvtier-bench" in r.text for c in r.find_elements(By.TAG_NAME, "td")]
    check("the namespace's L1 quota is shown with its use", "%" in cells[7] and cells[9] == "none",
          cells)
    lat = {r.find_elements(By.TAG_NAME, "td")[0].text: r.text
           for r in d.find_elements(By.CSS_SELECTOR, "#latency tbody tr")}
    check("latency has a row per op", "load" in lat and "store" in lat, lat)
    shot(d, "after-traffic")

    # The policy panel: without the token, 401 shown; with it, applied; bad input: 400 by the field.
    Select(d.find_element(By.ID, "p-mode")).select_by_value("l1-only")
    high, low = d.find_element(By.ID, "p-high"), d.find_element(By.ID, "p-low")
    high.clear(); high.send_keys("0.8")
    low.clear(); low.send_keys("0.6")
    d.find_element(By.ID, "p-apply").click()
    WebDriverWait(d, 10).until(
        lambda x: x.find_element(By.CSS_SELECTOR, '[data-for="token"]').text != "")
    check("without the token the panel says so",
          "token" in d.find_element(By.CSS_SELECTOR, '[data-for="token"]').text.lower())
    d.find_element(By.ID, "p-token").send_keys(TOKEN)
    d.find_element(By.ID, "p-apply").click()
    WebDriverWait(d, 10).until(lambda x: text(x, "p-status") == "applied")
    with urllib.request.urlopen(BASE + "/v1/policy") as r:
        pol = json.load(r)
    check("the policy changed: mode and watermarks",
          pol["mode"] == "l1-only" and pol["tiers"]["l1"]["high_watermark"] == 0.8
          and pol["tiers"]["l1"]["low_watermark"] == 0.6, pol)
    low.clear(); low.send_keys("0.9")
    d.find_element(By.ID, "p-apply").click()
    sel = '[data-for="tiers.l1.low_watermark"]'
    WebDriverWait(d, 10).until(lambda x: x.find_element(By.CSS_SELECTOR, sel).text != "")
    msg = d.find_element(By.CSS_SELECTOR, sel).text
    check("a 400 is shown next to the field it names", "must be below high_watermark" in msg, msg)
    low.clear(); low.send_keys("lots")
    d.find_element(By.ID, "p-apply").click()
    WebDriverWait(d, 10).until(lambda x: "must be a number" in x.find_element(By.CSS_SELECTOR, sel).text)
    check("a wrong type is shown next to the field", True)
    shot(d, "policy-error")

    # A narrow screen: one column, nothing scrolls sideways.
    d.set_window_size(390, 900)
    wait_refresh(d)
    wide = d.execute_script("return document.documentElement.scrollWidth > window.innerWidth + 1")
    check("a 390-pixel screen needs no sideways scrolling", not wide)
    shot(d, "narrow")
    d.set_window_size(1280, 1000)

    # Numbers changing do not move the layout: the cards keep their places in
    # the page (document offsets: the browser may scroll the view by itself).
    before = d.execute_script(
        "return [...document.querySelectorAll('.card')].map(c => c.getBoundingClientRect().top + window.scrollY)")
    wait_refresh(d, 2)
    after = d.execute_script(
        "return [...document.querySelectorAll('.card')].map(c => c.getBoundingClientRect().top + window.scrollY)")
    check("refreshes do not move the cards", before == after, (before, after))

    # The daemon stops answering: a visible notice.
    with open(os.path.join(SHOTS, "..", "stop-daemon"), "w") as f:  # dashboard.sh stops it
        f.write("now")
    WebDriverWait(d, 20, 0.1).until(lambda x: x.find_element(By.ID, "down").is_displayed())
    check("a notice shows when the daemon stops answering", True)
    shot(d, "daemon-down")
except Exception as e:  # a failed wait is a failed check, with what it was waiting for
    check("the browser session ran to the end", False, repr(e))
    try:
        shot(d, "failure")
    except Exception:
        pass
finally:
    d.quit()
sys.exit(1 if failed else 0)
