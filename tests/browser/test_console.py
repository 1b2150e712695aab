"""Issue 29: the web console in a real browser (Debian's chromium, headless, through selenium) against a live
three-broker cluster.

Each page is loaded from broker 1's /ui, waited for until its first refresh is done, and checked three ways:
it logged no error in the browser console (a failed load the page expects is named where it is allowed; app.js
console.errors every exception it did not expect) and shows none itself (no error box, no failed refresh in the
status bar), it
shows what the API answers for the same thing (each test reads the API's JSON itself and compares it with the
page's table cells), and its actions work behind their confirmation (cancel changes nothing, confirm changes
what the API then shows). A screenshot of each page is written to <SHOTS>/<page>.png (var/console; with
ODRADEK_SCREENSHOTS=docs/console, the ones docs/console.md links). Beyond the pages: the overview from brokers 2
and 3, the rate charts and their counters against each broker's /metrics, the lag chart against the group's
offsets, read_committed against an open transaction. The last test kills a broker and times how long the
overview takes to show it down.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from broker.api.console import PROBE_TIMEOUT_S, counters
from odradek import Producer
from tests.browser.conftest import SHOTS, console_errors, screenshot, start_log
from tests.harness.cluster import LocalProcessBackend, shared_cluster
from tests.harness.http import create_topic, request
from tests.harness.wait import SLOW_MACHINE_S, wait_until

pytestmark = pytest.mark.cluster

JSON_V2 = "application/vnd.kafka.json.v2+json"
AVRO_V2 = "application/vnd.kafka.avro.v2+json"
READING = json.dumps({"type": "record", "name": "Reading", "fields": [
    {"name": "sensor", "type": "string"}, {"name": "value", "type": "double"},
    {"name": "unit", "type": ["null", "string"], "default": None}]})
NONE = "\u2013"  # what a page shows for no value (an en dash)
OVERVIEW_POLL_S = 2.0  # app.js's POLL_MS.overview: the overview's next refresh starts this long after the last ended
DOWN_WITHIN_S = 3 * OVERVIEW_POLL_S + PROBE_TIMEOUT_S + SLOW_MACHINE_S / 4
"""The issue's "within a few seconds", as a bound. On an idle machine the worst case is a refresh just begun at
the kill (up to a probe timeout), the poll's wait, then the refresh that probes the dead broker (refused at once,
or a probe timeout): about 6 s. The bound allows three polls and a probe timeout for that, plus a quarter of
SLOW_MACHINE_S for a loaded machine's late timers and slow rendering: 23 s. What it excludes: a console that shows
a dead broker only after a full page reload, or never, or only once a long connect timeout has run out."""
_loads = itertools.count()


@dataclass
class Seed:
    url: str
    urls: list[str]
    cid: str
    group: str
    member_id: str
    generation: int


@pytest.fixture(scope="module")
def c(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    backend = shared_cluster(zk_ensemble, tmp_path_factory.mktemp("console"), "console", 3)
    yield backend
    backend.close()


@pytest.fixture(autouse=True)
def fresh_log(browser: Any) -> None:
    """Each test's log starts empty: what an earlier test left (say one that failed before checking) is not its."""
    start_log(browser)


def _ok(status: int, body: Any, what: str) -> Any:
    assert status < 300, f"{what}: {status} {body}"
    return body


@pytest.fixture(scope="module")
def seed(c: LocalProcessBackend) -> Seed:
    """Topics with JSON records (keys, headers), Avro records registered in the schema registry, a consumer group
    with a member and committed offsets, and client quotas."""
    urls = [c.broker_url(b) for b in c.broker_ids()]
    url = urls[0]
    create_topic(url, "orders", 3, 3, seen_by=urls)
    create_topic(url, "readings", 1, 2, seen_by=urls)
    records = [{"key": f"k{i}", "value": {"id": i, "item": ["apple", "pear", "fig"][i % 3], "tags": ["a", "b"][: i % 3],
                                          "nested": {"qty": i * 2, "ok": i % 2 == 0}},
                "headers": [{"name": "source", "value": base64.b64encode(b"console-test").decode()}]}
               for i in range(6)]
    for i, half in enumerate((records[:3], records[3:])):  # a second apart: a seek by time has two to tell apart
        if i:
            time.sleep(1.1)
        _ok(*request("POST", f"{url}/topics/orders/partitions/0?acks=all", {"records": half},
                     content_type=JSON_V2)[:2], "produce orders-0")
    for p in (1, 2):
        _ok(*request("POST", f"{url}/topics/orders/partitions/{p}?acks=all",
                     {"records": [{"value": {"id": 100 + p}}] * (p + 1)}, content_type=JSON_V2)[:2], "produce")
    readings = [{"value": {"sensor": "s1", "value": 21.5, "unit": {"string": "C"}}},
                {"value": {"sensor": "s2", "value": 19.25, "unit": None}}]
    _ok(*request("POST", f"{url}/topics/readings?acks=all", {"value_schema": READING, "records": readings},
                 content_type=AVRO_V2)[:2], "produce readings (avro)")
    cid = request("GET", f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    for path, name, value in (("users/alice", "producer_byte_rate", "1048576"),
                              ("clients/app1", "consumer_byte_rate", "2097152")):
        _ok(*request("POST", f"{url}/v3/clusters/{cid}/{path}/configs:alter",
                     {"data": [{"name": name, "value": value, "operation": "SET"}]})[:2], f"quota {path}")
    group = "console-app"
    joined = _ok(*request("POST", f"{url}/groups/{group}/members",
                          {"client_id": "console-test", "topics": ["orders"], "session_timeout_ms": 300_000})[:2],
                 "join")
    member, generation = joined["member_id"], joined["generation"]
    _ok(*request("POST", f"{url}/groups/{group}/offsets", {"member_id": member, "generation": generation, "offsets": [
        {"topic": "orders", "partition": 0, "offset": 4}, {"topic": "orders", "partition": 1, "offset": 1},
        {"topic": "orders", "partition": 2, "offset": 0}]})[:2], "commit")
    return Seed(url, urls, cid, group, member, generation)


# ------------------------------------------------------------------------------------------------- helpers


def open_page(driver: Any, seed: Seed, fragment: str, page: str, refreshes: int = 1, base: str | None = None) -> None:
    """Load the console afresh at ``#fragment`` (from broker 1, or the broker at ``base``) and wait until page
    ``page`` has refreshed ``refreshes`` times."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{base or seed.url}/ui?load={next(_loads)}#{fragment}")
    WebDriverWait(driver, SLOW_MACHINE_S, poll_frequency=0.1).until(lambda d: d.execute_script(
        "const m = document.getElementById('main');"
        "return m.dataset.page === arguments[0] && Number(m.dataset.refreshes || 0) >= arguments[1];",
        page, refreshes), f"page {page} did not load")


def cells(driver: Any, table_id: str) -> list[list[str]]:
    """The text of each cell of a table's body, row by row (an empty table's "none" row is no row)."""
    return driver.execute_script(
        "return [...document.querySelectorAll(`#${arguments[0]} tbody tr`)]"
        ".filter(tr => !(tr.cells.length === 1 && tr.cells[0].colSpan > 1))"
        ".map(tr => [...tr.cells].map(td => td.innerText.trim()));", table_id)


def text(driver: Any, selector: str) -> str:
    return driver.execute_script("const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
                                 selector)


def wait_for(driver: Any, predicate: Any, what: str, timeout: float = SLOW_MACHINE_S) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: predicate(d), what)


def click(driver: Any, selector: str) -> None:
    driver.find_element("css selector", selector).click()


def browse(driver: Any, what: str, meanwhile: Callable[[], None] | None = None) -> None:
    """Click the message browser's Read and wait for this read's answer: the summary shown before is marked
    stale first (each read replaces it), since a read may show the same rows and words as the one before it.
    ``meanwhile``: what the test does on the page after the click, while the read is under way."""
    driver.execute_script("const e = document.getElementById('records-summary'); if (e) e.dataset.stale = '1';")
    click(driver, "#browse-go")
    if meanwhile is not None:
        meanwhile()
    wait_for(driver, lambda d: d.execute_script(
        "const e = document.getElementById('records-summary'); return !!e && !e.dataset.stale;"), what)


def dialog_open(driver: Any) -> bool:
    return bool(driver.execute_script("return document.getElementById('confirm').open;"))


def api(seed: Seed, path: str, accept: str | None = None) -> Any:
    return _ok(*request("GET", f"{seed.url}{path}", accept=accept)[:2], path)


def page_errors(driver: Any) -> list[str]:
    """What the page itself shows as failed: its error boxes, and the status bar when the last refresh failed
    (app.js renders a refresh's exception there; on this open cluster no page expects one)."""
    return driver.execute_script(
        "const out = [...document.querySelectorAll('#main .error')].map(e => e.innerText);"
        "const s = document.getElementById('status');"
        "if (s.classList.contains('bad')) out.push('status bar: ' + s.innerText);"
        "return out;")


def no_errors(driver: Any, *allowed: str) -> None:
    errors = console_errors(driver, allowed)
    assert not errors, f"the browser logged errors: {errors}"
    shown = page_errors(driver)
    assert not shown, f"the page shows errors: {shown}"


def chart_series(driver: Any, title: str) -> dict[str, list[list[float]]]:
    """A chart's series as the page drew them: {name: [[time_ms, value], ...]} (app.js's legend keeps the points
    of each series it drew), plus "_polylines", how many lines the chart draws."""
    return driver.execute_script(
        "const c = document.querySelector(`.chart[data-chart='${arguments[0]}']`);"
        "if (!c) return null;"
        "const out = {_polylines: c.querySelectorAll('polyline').length};"
        "for (const s of c.querySelectorAll('.legend span[data-series]')) out[s.dataset.series] ="
        " JSON.parse(s.dataset.points);"
        "return out;", title)


def metrics_counters(url: str) -> dict[str, float]:
    """broker.api.console.counters of one broker's own /metrics (its Prometheus text), read directly."""
    status, body, _ = request("GET", f"{url}/metrics")
    assert status == 200, body
    return counters(body.decode() if isinstance(body, bytes) else str(body))


def fmt(value: Any) -> str:
    """A JSON value as the console pretty-prints it (JSON.stringify(v, null, 2) is json.dumps(v, indent=2))."""
    return json.dumps(value, indent=2, ensure_ascii=False)


# ------------------------------------------------------------------------------------------------- pages


def test_assets_are_served_with_types_and_caching(seed: Seed) -> None:
    """/ui is revalidated (no-cache + ETag, 304 on a match); its versioned assets are cached for good; no
    other file is served."""
    status, body, headers = request("GET", f"{seed.url}/ui")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Cache-Control"] == "no-cache" and "default-src 'self'" in headers["Content-Security-Policy"]
    assert request("GET", f"{seed.url}/ui", accept="text/html")[0] == 200
    page = body.decode()
    for name, ctype in (("app.js", "text/javascript; charset=utf-8"), ("style.css", "text/css; charset=utf-8"),
                        ("favicon.svg", "image/svg+xml")):
        link = page.split(f"/ui/{name}?v=")[1].split('"')[0]
        status, _, h = request("GET", f"{seed.url}/ui/{name}?v={link}")
        assert status == 200 and h["Content-Type"] == ctype and "immutable" in h["Cache-Control"], (name, h)
        assert request("GET", f"{seed.url}/ui/{name}")[2]["Cache-Control"] == "no-cache"
    req = urllib.request.Request(f"{seed.url}/ui", headers={"If-None-Match": headers["ETag"]})
    try:
        urllib.request.urlopen(req, timeout=SLOW_MACHINE_S)
        raise AssertionError("expected 304")
    except urllib.error.HTTPError as e:
        assert e.code == 304
    assert request("GET", f"{seed.url}/ui/app.py")[0] == 404
    assert request("GET", f"{seed.url}/ui/..%2F__init__.py")[0] == 404


def test_overview_shows_brokers_controller_partitions_and_rates(browser: Any, seed: Seed) -> None:
    open_page(browser, seed, "/", "overview", refreshes=4)  # four refreshes: three points on each rate chart
    meta = api(seed, "/metadata")
    health = api(seed, "/health")
    rows = cells(browser, "brokers")
    assert [int(r[0]) for r in rows] == sorted(b["id"] for b in meta["brokers"])
    assert [r[1] for r in rows] == [b["url"] for b in sorted(meta["brokers"], key=lambda b: b["id"])]
    assert all(r[2] == "ok" for r in rows), rows
    assert [r[0] for r in rows if r[3] == "controller"] == [str(health["controller_id"])]
    assert text(browser, "#card-controller .value") == f"broker {health['controller_id']}"
    partitions = sum(len(t["partitions"]) for t in meta["topics"])
    assert text(browser, "#card-partitions .value") == str(partitions)
    assert text(browser, "#card-topics .value") == str(len(meta["topics"]))
    under = [(t["name"], p["partition"]) for t in meta["topics"] for p in t["partitions"]
             if len(p["isr"]) < len(p["replicas"])]
    assert text(browser, "#card-under .value") == str(len(under))
    assert [(r[0], int(r[1])) for r in cells(browser, "under-replicated")] == under
    assert text(browser, "#card-offline .value") == "0" and cells(browser, "offline") == []
    charts = browser.execute_script("return [...document.querySelectorAll('.chart')].map(c => "
                                    "[c.dataset.chart, c.querySelectorAll('polyline').length]);")
    assert charts == [["Records in / s", 1], ["Requests / s", 2]], charts
    ensemble = api(seed, "/ui/api/zookeeper")["servers"]
    zk_rows = cells(browser, "zookeeper-servers")
    assert [(r[0], r[1]) for r in zk_rows] == [(z["server"], z["mode"]) for z in ensemble]
    assert sorted(z["mode"] for z in ensemble) == ["follower", "follower", "leader"]  # the suite's 3-node ensemble
    no_errors(browser)
    screenshot(browser, SHOTS / "overview.png")


def test_every_broker_serves_the_same_overview(browser: Any, seed: Seed) -> None:
    """/ui on every broker: the overview loaded from broker 2 and from broker 3 lists the same brokers, URLs,
    statuses and controller as broker 1's, and as the API of the broker that served it answers."""
    open_page(browser, seed, "/", "overview")
    first = cells(browser, "brokers")
    ids = [int(r[0]) for r in first]
    for url in seed.urls[1:]:
        open_page(browser, seed, "/", "overview", base=url)
        served_by = _ok(*request("GET", f"{url}/ui/api/brokers")[:2], "brokers view")
        meta = _ok(*request("GET", f"{url}/metadata")[:2], "metadata")
        assert served_by["broker_id"] != 1 and url == next(b["url"] for b in meta["brokers"]
                                                           if b["id"] == served_by["broker_id"])
        rows = cells(browser, "brokers")
        assert [r[:4] for r in rows] == [r[:4] for r in first], (url, rows, first)
        assert [int(r[0]) for r in rows] == sorted(b["id"] for b in meta["brokers"]) == ids
        assert [r[0] for r in rows if r[3] == "controller"] == [str(meta["controller_id"])]
        assert text(browser, "#card-controller .value") == f"broker {meta['controller_id']}"
        assert f"served by broker {served_by['broker_id']}" in text(browser, "#main")
        assert text(browser, "#card-partitions .value") == str(sum(len(t["partitions"]) for t in meta["topics"]))
        no_errors(browser)


def test_rate_charts_and_the_counters_route_match_each_brokers_metrics(browser: Any, seed: Seed) -> None:
    """The counters behind the overview's charts (GET /ui/api/brokers?include=metrics, broker.api.console's
    counters()) are each broker's own /metrics; records_in grows by exactly the records produced; and the
    records-in chart, integrated over the refreshes around a produce of N records, is N."""
    create_topic(seed.url, "rates", 1, 2, seen_by=seed.urls)
    meta = api(seed, "/metadata")
    url_of = {b["id"]: b["url"] for b in meta["brokers"]}
    view = api(seed, "/ui/api/brokers?include=metrics")["brokers"]
    direct = {b: metrics_counters(u) for b, u in url_of.items()}  # read after the view: counters only grow
    assert sorted(b["id"] for b in view) == sorted(url_of)
    for b in view:
        c = b["counters"]
        assert c["records_in"] == direct[b["id"]]["records_in"], (b["id"], c, direct[b["id"]])
        assert c["produce_requests"] == direct[b["id"]]["produce_requests"], (b["id"], c, direct[b["id"]])
        assert 0 <= c["fetch_requests"] <= direct[b["id"]]["fetch_requests"], (b["id"], c, direct[b["id"]])
    # records_in: the sum of the log end offsets of the partitions each broker leads, so one count per record
    leader = next(p["leader"] for t in meta["topics"] if t["name"] == "rates" for p in t["partitions"])
    ends = api(seed, "/topics/rates/partitions/0/offsets")["end_offset"]
    n = 25

    open_page(browser, seed, "/", "overview", refreshes=3)
    drawn = chart_series(browser, "Records in / s")
    assert drawn is not None and drawn["_polylines"] == 1 and len(drawn["cluster"]) >= 2, drawn
    seen = len(drawn["cluster"])  # the last point drawn sampled the counters before the records below
    before = {b: metrics_counters(u)["records_in"] for b, u in url_of.items()}
    _ok(*request("POST", f"{seed.url}/topics/rates/partitions/0?acks=all",
                 {"records": [{"value": {"i": i}} for i in range(n)]}, content_type=JSON_V2)[:2], "produce rates")
    produced_ms = time.time() * 1000
    after = {b: metrics_counters(u)["records_in"] for b, u in url_of.items()}
    assert api(seed, "/topics/rates/partitions/0/offsets")["end_offset"] == ends + n
    assert after[leader] - before[leader] == n and sum(after.values()) - sum(before.values()) == n, (before, after)

    def settled(d: Any) -> Any:  # a point whose refresh began after the produce (its predecessor ended after it)
        points = chart_series(d, "Records in / s")["cluster"]
        return points if any(p[0] > produced_ms for p in points[seen - 1:-1]) else None

    points = wait_for(browser, settled, "two refreshes after the produce", timeout=SLOW_MACHINE_S)
    tail = points[seen - 1:]
    integral = sum(v * (t - t_prev) / 1000 for (t_prev, _), (t, v) in itertools.pairwise(tail))
    assert integral == pytest.approx(n, abs=0.01), (integral, tail)
    assert max(v for _, v in tail) > 0
    no_errors(browser)


def test_topics_page_lists_what_metadata_lists(browser: Any, seed: Seed) -> None:
    open_page(browser, seed, "/topics", "topics")
    meta = api(seed, "/metadata")
    rows = cells(browser, "topics")
    assert [(r[0], int(r[1]), int(r[2])) for r in rows] == [
        (t["name"], len(t["partitions"]), len(t["partitions"][0]["replicas"])) for t in meta["topics"]]
    sizes = {r[0]: r[5] for r in rows}
    assert sizes["orders"] != "0 B" and sizes["readings"] != "0 B", sizes
    no_errors(browser)
    screenshot(browser, SHOTS / "topics.png")


def test_create_and_delete_a_topic_behind_confirmations(browser: Any, seed: Seed) -> None:
    open_page(browser, seed, "/topics", "topics")
    name = "made-in-console"
    browser.find_element("id", "create-name").send_keys(name)
    for field, value in (("create-partitions", "2"), ("create-rf", "2")):
        element = browser.find_element("id", field)
        element.clear()
        element.send_keys(value)
    browser.find_element("id", "create-configs").send_keys("retention.ms=86400000")
    click(browser, "#create-submit")
    wait_for(browser, dialog_open, "the create confirmation")
    assert "2 partition(s), replication factor 2" in text(browser, "#confirm-body")
    click(browser, "#confirm-cancel")
    wait_for(browser, lambda d: not dialog_open(d), "the dialog to close")
    assert request("GET", f"{seed.url}/v3/clusters/{seed.cid}/topics/{name}")[0] == 404  # cancel created nothing

    click(browser, "#create-submit")
    wait_for(browser, dialog_open, "the create confirmation")
    click(browser, "#confirm-ok")
    wait_for(browser, lambda d: f"Topic {name} created." in (text(d, ".message") or ""), "the creation message")
    topic = api(seed, f"/v3/clusters/{seed.cid}/topics/{name}")
    assert topic["partitions_count"] == 2 and topic["replication_factor"] == 2
    configs = {e["name"]: e["value"] for e in api(seed, f"/v3/clusters/{seed.cid}/topics/{name}/configs")["data"]}
    assert configs["retention.ms"] == "86400000"
    wait_for(browser, lambda d: name in [r[0] for r in cells(d, "topics")], "the new topic in the list")

    open_page(browser, seed, f"/topics/{name}", "topic")
    click(browser, "#delete-topic")  # cancelled first: nothing is deleted
    wait_for(browser, dialog_open, "the delete confirmation")
    browser.find_element("id", "confirm-typed").send_keys(name)
    click(browser, "#confirm-cancel")
    wait_for(browser, lambda d: not dialog_open(d), "the dialog to close")
    assert text(browser, "section.panel .note") == "Cancelled."
    assert browser.execute_script("return location.hash") == f"#/topics/{name}"
    assert api(seed, f"/v3/clusters/{seed.cid}/topics/{name}")["partitions_count"] == 2
    open_page(browser, seed, f"/topics/{name}", "topic", refreshes=2)  # the page still refreshes: still there
    assert [r[0] for r in cells(browser, "partitions")] == ["0", "1"]

    click(browser, "#delete-topic")
    wait_for(browser, dialog_open, "the delete confirmation")
    ok = browser.find_element("id", "confirm-ok")
    assert not ok.is_enabled()  # the name must be typed first
    browser.find_element("id", "confirm-typed").send_keys(name[:-1])
    assert not ok.is_enabled()
    browser.find_element("id", "confirm-typed").send_keys(name[-1])
    assert ok.is_enabled()
    screenshot(browser, SHOTS / "topic-delete-confirmation.png")
    ok.click()
    wait_for(browser, lambda d: d.execute_script("return location.hash") == "#/topics", "back to the topic list")
    wait_until(lambda: request("GET", f"{seed.url}/v3/clusters/{seed.cid}/topics/{name}")[0] == 404, SLOW_MACHINE_S,
               "the topic deleted")
    no_errors(browser)


def test_topic_page_shows_partitions_offsets_and_configs_and_alters_one(browser: Any, seed: Seed) -> None:
    open_page(browser, seed, "/topics/orders", "topic")
    meta = api(seed, "/metadata?topics=orders")["topics"][0]
    rows = cells(browser, "partitions")
    expected = []
    for p in meta["partitions"]:
        ends = api(seed, f"/topics/orders/partitions/{p['partition']}/offsets")
        expected.append([str(p["partition"]), str(p["leader"]), ", ".join(map(str, p["replicas"])),
                         ", ".join(map(str, p["isr"])), str(ends["beginning_offset"]), str(ends["end_offset"])])
    assert [r[:6] for r in rows] == expected
    configs = api(seed, f"/v3/clusters/{seed.cid}/topics/orders/configs")["data"]
    assert [(r[0], r[1]) for r in cells(browser, "configs")] == [
        (e["name"], "null" if e["value"] is None else e["value"]) for e in configs]

    default = {e["name"]: e for e in configs}["retention.ms"]
    assert default["is_default"] and default["value"] != "3600000", default
    browser.find_element("id", "config-name").send_keys("retention.ms")
    browser.find_element("id", "config-value").send_keys("3600000")
    click(browser, "#config-set")  # cancelled first: nothing changes
    wait_for(browser, dialog_open, "the alter confirmation")
    assert text(browser, "#confirm-body") == "retention.ms = 3600000"
    click(browser, "#confirm-cancel")
    wait_for(browser, lambda d: not dialog_open(d), "the dialog to close")
    assert text(browser, "section.panel .note") == "Cancelled."
    assert api(seed, f"/v3/clusters/{seed.cid}/topics/orders/configs")["data"] == configs
    assert [r[:2] for r in cells(browser, "configs")] == [
        [e["name"], "null" if e["value"] is None else e["value"]] for e in configs]

    click(browser, "#config-set")
    wait_for(browser, dialog_open, "the alter confirmation")
    click(browser, "#confirm-ok")
    wait_for(browser, lambda d: "retention.ms set." in (text(d, ".message") or ""), "the alter message")
    after = {e["name"]: e for e in api(seed, f"/v3/clusters/{seed.cid}/topics/orders/configs")["data"]}
    assert after["retention.ms"]["value"] == "3600000" and not after["retention.ms"]["is_default"]
    wait_for(browser, lambda d: ["retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG"] in cells(d, "configs"),
             "the override in the configs table")
    no_errors(browser)
    screenshot(browser, SHOTS / "topic.png")

    # reset to the default (a DELETE of the override), confirmed: the API's default again, and the page shows it
    click(browser, "#config-reset")
    wait_for(browser, dialog_open, "the reset confirmation")
    assert text(browser, "#confirm-title") == "Reset retention.ms of orders to its default?"
    click(browser, "#confirm-ok")
    wait_for(browser, lambda d: "retention.ms reset." in (text(d, ".message") or ""), "the reset message")
    restored = {e["name"]: e for e in api(seed, f"/v3/clusters/{seed.cid}/topics/orders/configs")["data"]}
    assert restored["retention.ms"]["is_default"] and restored["retention.ms"]["value"] == default["value"]
    wait_for(browser, lambda d: ["retention.ms", default["value"], default["source"]] in cells(d, "configs"),
             "the default back in the configs table")
    no_errors(browser)


def test_message_browser_shows_records_and_seeks(browser: Any, seed: Seed) -> None:
    api_records = api(seed, "/topics/orders/partitions/0/records?offset=0", accept=JSON_V2)["records"]
    open_page(browser, seed, "/topics/orders/partitions/0", "browser")
    # the shared browser may still show an earlier page's table (a read from offset 3): wait for this read's rows
    wait_for(browser, lambda d: [r[0] for r in cells(d, "records-table")] == [str(r["offset"]) for r in api_records],
             "the records from offset 0")
    rows = cells(browser, "records-table")
    assert [int(r[0]) for r in rows] == [r["offset"] for r in api_records]
    assert [r[2] for r in rows] == [fmt(r["key"]) for r in api_records]
    assert [r[3] for r in rows] == [fmt(r["value"]) for r in api_records]  # JSON pretty-printed
    assert all(r[4] == "source: console-test" for r in rows), rows
    stamps = [r["timestamp"] for r in api_records]
    assert [r[1] for r in rows] == [time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t / 1000)) + f".{t % 1000:03d} UTC"
                                    for t in stamps]
    no_errors(browser)
    screenshot(browser, SHOTS / "messages.png")

    # seek by offset
    browser.execute_script("document.getElementById('browse-mode').value = 'offset';")
    field = browser.find_element("id", "browse-offset")
    field.clear()
    field.send_keys("3")
    browse(browser, "the read from offset 3")
    assert [int(r[0]) for r in cells(browser, "records-table")] == [3, 4, 5]

    # seek by time: the first offset at or after a time, as the offsets route answers it
    second = (stamps[3] // 1000) * 1000  # in the second batch's second, after the first batch's records
    expected = api(seed, f"/topics/orders/partitions/0/offsets?timestamp={second}")["offset"]
    browser.execute_script("document.getElementById('browse-mode').value = 'timestamp';"
                           "document.getElementById('browse-time').value = arguments[0];",
                           time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second / 1000)))
    browse(browser, "the read by time")
    assert expected == 3
    assert (cells(browser, "records-table") or [[""]])[0][0] == str(expected)

    # read_committed: reads end at the last stable offset (here the high watermark: no open transaction)
    lso = api(seed, "/topics/orders/partitions/0/offsets?isolation=read_committed")["end_offset"]
    click(browser, "#browse-committed")
    browser.execute_script("document.getElementById('browse-mode').value = 'beginning';")
    browse(browser, "the read_committed read")
    assert f"from offset 0; the partition's last stable offset is {lso}." in text(browser, "#records-summary")
    assert len(cells(browser, "records-table")) == lso
    no_errors(browser)


def test_a_read_answered_after_a_newer_one_is_not_shown_and_says_what_it_asked(browser: Any, seed: Seed) -> None:
    """The page's fetches of ``offset=3`` are held back 1.5 s (the page's ``fetch`` wrapped): a read from offset 3,
    then at once one from the beginning, the form changed for it while the first read still waits for its
    partition's offsets (held 0.3 s): the first read still reads from offset 3, what it was asked. The table shows
    the newer read's records and stays so when the older read answers. Then a held-back read_uncommitted read with
    read_committed ticked while it waits: its summary names the high watermark it read to, not the last stable
    offset."""
    open_page(browser, seed, "/topics/orders/partitions/0", "browser")
    # A held read counts itself handled (window.heldReads) a task after its body was read: the page's handling
    # of the answer (the checks and the drawing after ``await resp.text()``) runs in the microtasks before that.
    browser.execute_script("""
        const real = window.fetch;
        window.heldReads = 0;
        const handled = () => setTimeout(() => { window.heldReads += 1; }, 0);
        const counted = (resp) => {
          const text = resp.text.bind(resp);
          resp.text = () => text().finally(handled);
          return resp;
        };
        const after = (ms, url, opts) => new Promise((ok) => setTimeout(ok, ms)).then(() => real(url, opts));
        window.slowOffsets = true;
        window.fetch = (url, opts) => String(url).includes("offset=3")
          ? after(1500, url, opts).then(counted, (e) => { handled(); throw e; })
          : window.slowOffsets && String(url).includes("/offsets") ? after(300, url, opts) : real(url, opts);""")
    browser.execute_script("document.getElementById('browse-mode').value = 'offset';"
                           "document.getElementById('browse-offset').value = '3';")
    click(browser, "#browse-go")
    browser.execute_script("document.getElementById('browse-mode').value = 'beginning';")
    browse(browser, "the read from the beginning")
    browser.execute_script("window.slowOffsets = false;")
    first = [r[0] for r in cells(browser, "records-table")]
    assert first[:1] == ["0"], first
    wait_for(browser, lambda d: d.execute_script("return window.heldReads") == 1, "the held read of offset 3 handled")
    assert [r[0] for r in cells(browser, "records-table")] == first
    assert "from offset 0;" in text(browser, "#records-summary")

    browser.execute_script("document.getElementById('browse-mode').value = 'offset';"
                           "document.getElementById('browse-offset').value = '3';")
    browse(browser, "the held read", meanwhile=lambda: click(browser, "#browse-committed"))  # ticked while it waits
    summary = text(browser, "#records-summary")
    assert "from offset 3; the partition's high watermark is" in summary, summary
    click(browser, "#browse-committed")
    no_errors(browser)


def test_message_browser_decodes_schema_registry_values(browser: Any, seed: Seed) -> None:
    open_page(browser, seed, "/topics/readings/partitions/0", "browser")
    wait_for(browser, lambda d: cells(d, "records-table"), "the records")
    decoded = api(seed, "/topics/readings/partitions/0/records?offset=0", accept=AVRO_V2)["records"]
    rows = cells(browser, "records-table")
    assert [r[3] for r in rows] == [fmt(r["value"]) for r in decoded]
    assert "decoded as AVRO through the schema registry" in text(browser, "#records-summary")
    no_errors(browser)
    screenshot(browser, SHOTS / "messages-avro.png")


def _read_all(seed: Seed, topic: str, isolation: str) -> list[Any]:
    """Every record of partition 0 through the API's read, as the message browser reads it (JSON format)."""
    out: list[Any] = []
    offset = 0
    while True:
        answer = api(seed, f"/topics/{topic}/partitions/0/records?offset={offset}&timeout=0&isolation={isolation}",
                     accept=JSON_V2)
        out += answer["records"]
        if not answer["records"] or answer["next_offset"] <= offset:
            return out
        offset = answer["next_offset"]


def test_message_browser_read_committed_stops_at_an_open_transaction(browser: Any, seed: Seed) -> None:
    """Two committed records, then a transaction left open (odradek.Producer with a transactional id): the page
    reads what the API reads with each isolation level: all of them read_uncommitted, the two before the last
    stable offset read_committed."""
    topic = "txn-console"
    create_topic(seed.url, topic, 1, 3, seen_by=seed.urls)
    _ok(*request("POST", f"{seed.url}/topics/{topic}/partitions/0?acks=all",
                 {"records": [{"value": {"plain": i}} for i in range(2)]}, content_type=JSON_V2)[:2], "produce")
    producer = Producer(seed.url, transactional_id="console-open", linger_ms=1)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, json.dumps({"pending": i}).encode(), partition=0).result(SLOW_MACHINE_S)
        uncommitted = _read_all(seed, topic, "read_uncommitted")
        committed = _read_all(seed, topic, "read_committed")
        lso = api(seed, f"/topics/{topic}/partitions/0/offsets?isolation=read_committed")["end_offset"]
        assert len(committed) < len(uncommitted) and lso == len(committed), (committed, uncommitted, lso)

        open_page(browser, seed, f"/topics/{topic}/partitions/0", "browser")
        browser.execute_script("document.getElementById('browse-mode').value = 'beginning';")
        click(browser, "#browse-go")
        wait_for(browser, lambda d: [r[0] for r in cells(d, "records-table")]
                 == [str(r["offset"]) for r in uncommitted], "every record, read_uncommitted")
        assert [r[3] for r in cells(browser, "records-table")] == [fmt(r["value"]) for r in uncommitted]

        click(browser, "#browse-committed")
        browse(browser, "the read_committed read")
        assert f"last stable offset is {lso}." in text(browser, "#records-summary")
        rows = cells(browser, "records-table")
        assert [r[0] for r in rows] == [str(r["offset"]) for r in committed], rows
        assert [r[3] for r in rows] == [fmt(r["value"]) for r in committed]
        no_errors(browser)
    finally:
        with contextlib.suppress(Exception):
            producer.abort_transaction()
        producer.close()


def test_groups_page_and_a_group_with_lag(browser: Any, seed: Seed) -> None:
    open_page(browser, seed, "/groups", "groups")
    groups = api(seed, "/groups")["groups"]
    assert [(r[0], r[1], int(r[2])) for r in cells(browser, "groups")] == [
        (g["group"], g["state"], g["members"]) for g in groups]
    no_errors(browser)
    screenshot(browser, SHOTS / "groups.png")

    open_page(browser, seed, f"/groups/{seed.group}", "group", refreshes=2)  # two polls: a line on the lag chart
    described = api(seed, f"/groups/{seed.group}")
    offsets = api(seed, f"/groups/{seed.group}/offsets")["offsets"]
    assert [r[0] for r in cells(browser, "members")] == [m["member_id"] for m in described["members"]]
    assert [r[3] for r in cells(browser, "members")] == [
        ", ".join(f"{t}-{p}" for t, p in m["assignment"]) for m in described["members"]]
    assert [r[:5] for r in cells(browser, "offsets")] == [
        [o["topic"], str(o["partition"]), str(o["offset"]), str(o["log_end_offset"]), str(o["lag"])] for o in offsets]
    total = sum(o["lag"] for o in offsets)
    assert total > 0
    lag = chart_series(browser, "Total lag")
    assert lag is not None and lag["_polylines"] == 1 and len(lag["lag"]) >= 2, lag
    assert lag["lag"][-1][1] == total, (lag, offsets)  # the line ends at the API's total lag
    assert f"total lag {total:,}" in text(browser, "#main")
    assert browser.find_element("id", "reset-offsets").get_attribute("disabled") is not None  # not empty yet
    no_errors(browser)
    screenshot(browser, SHOTS / "group.png")


def test_reset_offsets_of_an_empty_group_behind_a_confirmation(browser: Any, seed: Seed) -> None:
    _ok(*request("DELETE", f"{seed.url}/groups/{seed.group}/members/{seed.member_id}")[:2], "leave")
    wait_until(lambda: api(seed, f"/groups/{seed.group}")["state"] == "Empty", SLOW_MACHINE_S, "the group empty")
    open_page(browser, seed, f"/groups/{seed.group}", "group")
    wait_for(browser, lambda d: d.find_element("id", "reset-offsets").is_enabled(), "reset enabled")
    click(browser, "#reset-offsets")  # "to the earliest offset" is the default
    wait_for(browser, dialog_open, "the reset confirmation")
    click(browser, "#confirm-cancel")
    assert [o["offset"] for o in api(seed, f"/groups/{seed.group}/offsets")["offsets"]] == [4, 1, 0]

    # "to offset": every partition to the offset typed, as the confirmation's table says
    browser.execute_script("document.getElementById('reset-mode').value = 'offset';")
    field = browser.find_element("id", "reset-offset")
    field.clear()
    field.send_keys("1")
    click(browser, "#reset-offsets")
    wait_for(browser, dialog_open, "the reset confirmation")
    before = api(seed, f"/groups/{seed.group}/offsets")["offsets"]
    assert [r[1:] for r in cells(browser, "confirm-body")] == [
        [str(o["partition"]), str(o["offset"]), "1"] for o in before]
    click(browser, "#confirm-ok")
    wait_for(browser, lambda d: "reset." in (text(d, ".message") or ""), "the reset message")
    moved = api(seed, f"/groups/{seed.group}/offsets")["offsets"]
    assert [o["offset"] for o in moved] == [1, 1, 1], moved
    wait_for(browser, lambda d: [r[2] for r in cells(d, "offsets")] == [str(o["offset"]) for o in moved]
             and [r[4] for r in cells(d, "offsets")] == [str(o["lag"]) for o in moved], "the page at offset 1")

    browser.execute_script("document.getElementById('reset-mode').value = 'latest';")
    click(browser, "#reset-offsets")
    wait_for(browser, dialog_open, "the reset confirmation")
    click(browser, "#confirm-ok")
    wait_for(browser, lambda d: not dialog_open(d) and [r[4] for r in cells(d, "offsets")] == ["0", "0", "0"],
             "the page showing no lag")
    after = api(seed, f"/groups/{seed.group}/offsets")["offsets"]
    assert all(o["offset"] == o["log_end_offset"] and o["lag"] == 0 for o in after), after
    no_errors(browser)


def test_reassignments_page_shows_a_running_move_with_progress_and_eta(browser: Any, seed: Seed) -> None:
    """A move of a throttled partition (KIP-73 throttles at 20 kB/s, so 1 MB takes about a minute): the page
    lists what GET /admin/reassign_partitions lists, with a progress bar and an ETA; cancelled at the end."""
    url, base = seed.url, f"{seed.url}/v3/clusters/{seed.cid}"
    open_page(browser, seed, "/reassignments", "reassignments")
    assert api(seed, "/admin/reassign_partitions")["partitions"] == [] and cells(browser, "reassignments") == []
    assert text(browser, "#no-reassignments") == "No reassignment is running."
    no_errors(browser)

    _ok(*request("POST", f"{base}/topics", {"topic_name": "moving", "replicas_assignments": [
        {"partition_id": 0, "broker_ids": [1]}]})[:2], "create moving")
    wait_until(lambda: api(seed, "/metadata?topics=moving")["topics"][0]["partitions"][0]["leader"] == 1,
               SLOW_MACHINE_S, "a leader for moving-0")
    for _ in range(10):
        _ok(*request("POST", f"{url}/topics/moving/partitions/0?acks=1",
                     {"records": [{"value": "x" * 10_000}] * 10}, content_type=JSON_V2)[:2], "produce moving")
    rates = [{"name": n, "value": "20000"} for n in ("leader.replication.throttled.rate",
                                                      "follower.replication.throttled.rate")]
    replicas = [{"name": n, "value": "*"} for n in ("leader.replication.throttled.replicas",
                                                     "follower.replication.throttled.replicas")]
    _ok(*request("POST", f"{base}/broker-configs:alter", {"data": rates})[:2], "throttle rates")
    _ok(*request("POST", f"{base}/topics/moving/configs:alter", {"data": replicas})[:2], "throttled replicas")
    _ok(*request("POST", f"{url}/admin/reassign_partitions",
                 {"partitions": [{"topic": "moving", "partition": 0, "replicas": [2]}]})[:2], "reassign")
    try:
        running = wait_until(lambda: [m for m in api(seed, "/admin/reassign_partitions")["partitions"]
                                      if m["adding_replicas"] == [2] and m["removing_replicas"] == [1]], SLOW_MACHINE_S,
                             "the controller started the move (adding 2, removing 1)")
        assert [(m["topic"], m["partition"]) for m in running] == [("moving", 0)], running
        wait_for(browser, lambda d: [r[:5] for r in cells(d, "reassignments")] == [
            ["moving", "0", ", ".join(map(str, running[0]["replicas"])), "2", "1"]], "the move listed")
        wait_for(browser, lambda d: (cells(d, "reassignments") or [["?"] * 7])[0][6] not in (NONE, "?"),
                 "an ETA (two refreshes that saw bytes arrive)")
        progress = cells(browser, "reassignments")[0][5]
        assert progress.startswith("broker 2: ") and " of " in progress, progress
        no_errors(browser)
        screenshot(browser, SHOTS / "reassignments.png")
    finally:
        request("POST", f"{url}/admin/reassign_partitions/cancel", {})
        request("POST", f"{base}/broker-configs:alter", {"data": [{"name": r["name"], "operation": "DELETE"}
                                                                  for r in rates]})
        request("POST", f"{base}/topics/moving/configs:alter", {"data": [{"name": r["name"], "operation": "DELETE"}
                                                                         for r in replicas]})
        wait_until(lambda: api(seed, "/admin/reassign_partitions")["partitions"] == [], SLOW_MACHINE_S,
                   "the move cancelled")


def test_acls_quotas_and_schema_subjects_read_only(browser: Any, seed: Seed) -> None:
    status, body, _ = request("GET", f"{seed.url}/v3/clusters/{seed.cid}/acls")
    open_page(browser, seed, "/acls", "acls")
    if status == 400:  # an open cluster: no authorizer, and the page says so with the API's message
        assert body["error"] == "SECURITY_DISABLED"
        assert body["message"] in text(browser, "#acls-disabled")
        no_errors(browser, "/acls - Failed to load resource: the server responded with a status of 400")
    else:
        assert len(cells(browser, "acls")) == len(body["data"])
        no_errors(browser)
    screenshot(browser, SHOTS / "acls.png")

    open_page(browser, seed, "/quotas", "quotas")
    users = api(seed, f"/v3/clusters/{seed.cid}/users")["data"]
    clients = api(seed, f"/v3/clusters/{seed.cid}/clients")["data"]
    rows = cells(browser, "quotas")
    assert [r[1] for r in rows if r[0] == "user"] == [u["entity_name"] for u in users]
    assert [r[2] for r in rows if r[0] == "client"] == [e["entity_name"] for e in clients]
    assert any(r[1] == "alice" and "producer_byte_rate=1048576" in r[3] for r in rows), rows
    assert any(r[2] == "app1" and "consumer_byte_rate=2097152" in r[3] for r in rows), rows
    no_errors(browser)
    screenshot(browser, SHOTS / "quotas.png")

    open_page(browser, seed, "/schemas", "schemas")
    subjects = api(seed, "/subjects")
    rows = cells(browser, "subjects")
    assert [r[0] for r in rows] == subjects and "readings-value" in subjects
    for r in rows:
        latest = api(seed, f"/subjects/{r[0]}/versions/latest")
        assert (int(r[1]), int(r[2])) == (latest["version"], latest["id"])
    browser.execute_script("document.querySelector('#subjects details').open = true;")
    no_errors(browser)
    screenshot(browser, SHOTS / "schemas.png")


def test_a_broker_that_goes_down_shows_within_seconds(browser: Any, seed: Seed, c: LocalProcessBackend) -> None:
    open_page(browser, seed, "/", "overview")
    victim = max(c.broker_ids())
    status = f"#brokers tr[data-broker-id='{victim}']"
    assert browser.execute_script(f"return document.querySelector(\"{status}\").dataset.status") == "up"
    c.kill_broker(victim)
    killed = time.monotonic()
    try:
        wait_for(browser, lambda d: d.execute_script(f"return document.querySelector(\"{status}\").dataset.status")
                 == "down", f"broker {victim} shown down", timeout=DOWN_WITHIN_S)
        shown_after = time.monotonic() - killed
        assert text(browser, "#card-brokers .value") == f"{len(c.broker_ids()) - 1} / {len(c.broker_ids())}"
        screenshot(browser, SHOTS / "overview-broker-down.png")
        print(f"broker {victim} shown down {shown_after:.1f} s after SIGKILL")
    finally:
        c.start_broker(victim)
    wait_for(browser, lambda d: d.execute_script(f"return document.querySelector(\"{status}\").dataset.status")
             == "up", f"broker {victim} shown up again")
    no_errors(browser)
