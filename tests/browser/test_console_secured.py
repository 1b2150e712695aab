"""Issue 29: the web console on a secured cluster, in a real browser (Debian's chromium, headless, via selenium).

A two-broker cluster of its own: TLS + SASL_SSL listeners with a throwaway CA (``LocalCluster(tls=True)``), a
SCRAM user and ACLs set with the operator's tools (``odradek configs``, ``odradek acls``), topics created and
records produced and offsets committed as the admin (its client certificate, a super user). alice may Describe
and Read topic "orders" and Describe group "billing", nothing else: not "payments", "secret" or group "audit",
no Cluster Describe.

The browser trusts the cluster's certificates through a flag of this module's own driver only
(``--ignore-certificate-errors-spki-list`` with the SPKI hashes of the CA and the brokers' certificates), so the
shared ``browser`` fixture stays strict. Each test checks the page against the API's own answer for the same
caller (alice's password over HTTP Basic, or the admin's certificate for what is really there):

* no credentials: the sign-in form and no data; a wrong password: the API's 401 error, still no data;
* alice signed in: the overview (Cluster Describe) shows the API's refusal; the topics page lists what the v3
  topics route lists for her, without the sizes (Cluster Describe again); a topic she may not Describe shows
  TOPIC_AUTHORIZATION_FAILED and nothing else; the message browser shows the admin's records; the groups page
  lists what /groups lists for her;
* a delete or a config change she may not make shows the API's 403 and changes nothing (checked as the admin);
* the bearer token lives in the tab's sessionStorage only: a new tab is back at the sign-in form, and signing out
  clears it;
* the admin (a bearer token for its certificate, from POST /auth/token) sees on #/acls every ACL the API lists;
* the browser logs no error but the 401 and 403 loads each test expects.

Screenshots: signin.png, secured-topics.png and acls-secured.png in SHOTS (tests/browser/conftest.py).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import ssl
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from odradek_local.cluster import LocalCluster
from odradek_local.security import admin_files, broker_name, tls_dir
from tests.browser.conftest import SHOTS, chromium_driver, console_errors, screenshot, start_log
from tests.harness.ports import free_port_block
from tests.harness.wait import SLOW_MACHINE_S
from tests.integration.test_security import PASSWORDS, ZK_DIGEST, basic, request, tool

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

JSON_V2 = "application/vnd.kafka.json.v2+json"
TOPICS = ("orders", "payments", "secret")
GROUPS = ("billing", "audit")
ACLS = [("Read", "--topic", "orders"), ("Describe", "--topic", "orders"), ("Describe", "--group", "billing")]
RECORDS = [{"key": f"o{i}", "value": {"order": i, "item": ["tea", "rice", "salt"][i % 3]}} for i in range(4)]
TOKEN_KEY = "odradek.console.token"  # app.js
_loads = itertools.count()


@dataclass
class Sec:
    cluster: LocalCluster
    url: str
    cid: str
    ca: ssl.SSLContext
    admin: ssl.SSLContext

    def api(self, method: str, path: str, who: str = "alice", body: Any = None,
            headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """One call as alice (HTTP Basic with her password) or as the admin (its client certificate)."""
        auth = basic("alice") if who == "alice" else {}
        status, raw, _ = request(f"{self.url}{path}", method, body, ctx=self.admin if who == "admin" else self.ca,
                                 headers={**auth, **(headers or {})})
        return status, json.loads(raw) if raw else None

    def ok(self, method: str, path: str, who: str = "alice", body: Any = None, **kw: Any) -> Any:
        status, answer = self.api(method, path, who, body, **kw)
        assert status < 300, f"{who} {method} {path}: {status} {answer}"
        return answer


@pytest.fixture(scope="module")
def sec(zk_ensemble: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sec]:
    cluster = LocalCluster(tmp_path_factory.mktemp("console-secured"), brokers=2, base_port=free_port_block(2),
                           session_timeout_ms=6000, chroot=f"/odradek-console-sec-{uuid.uuid4().hex[:8]}",
                           ensemble=zk_ensemble, tls=True, zk_digest=ZK_DIGEST)
    try:
        cluster.up(timeout=SLOW_MACHINE_S)
        tool(cluster, "configs", "--zookeeper", cluster.zk_connect, "--alter", "--entity-type", "users",
             "--entity-name", "alice", "--add-config", f"SCRAM-SHA-256=[iterations=4096,password={PASSWORDS['alice']}]")
        for op, kind, name in ACLS:
            tool(cluster, "acls", "--authorizer-properties", f"zookeeper.connect={cluster.zk_connect}", "--add",
                 "--allow-principal", "User:alice", "--operation", op, kind, name)
        files = admin_files(cluster)
        ca = ssl.create_default_context(cafile=files["ssl_cafile"])
        admin = ssl.create_default_context(cafile=files["ssl_cafile"])
        admin.load_cert_chain(files["ssl_certfile"], files["ssl_keyfile"])
        url = cluster.broker_url(1)
        status, raw, _ = request(f"{url}/v3/clusters", ctx=admin)
        assert status == 200, raw
        s = Sec(cluster, url, json.loads(raw)["data"][0]["cluster_id"], ca, admin)
        for topic in TOPICS:
            s.ok("POST", f"/v3/clusters/{s.cid}/topics", "admin",
                 {"topic_name": topic, "partitions_count": 1, "replication_factor": 2})
        for topic in TOPICS:
            s.ok("POST", f"/topics/{topic}/partitions/0?acks=all", "admin", {"records": RECORDS},
                 headers={"Content-Type": JSON_V2})
        for group in GROUPS:  # standalone commits (no member) make the groups exist
            s.ok("POST", f"/groups/{group}/offsets", "admin", {"offsets": [{"topic": "orders", "partition": 0,
                                                                           "offset": 1}]})
        yield s
    finally:
        cluster.down()


def spki_hashes(cluster: LocalCluster) -> list[str]:
    """base64(sha256(SubjectPublicKeyInfo)) of the CA and of each broker's certificate: what chromium's
    --ignore-certificate-errors-spki-list takes, so this browser accepts this cluster's certificates only."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    d = tls_dir(cluster)
    out = []
    for name in ["ca", *(broker_name(b) for b in cluster.slots)]:
        cert = x509.load_pem_x509_certificate((d / f"{name}.pem").read_bytes())
        der = cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
        out.append(base64.b64encode(hashlib.sha256(der).digest()).decode())
    return out


@pytest.fixture(scope="module")
def tab(sec: Sec, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The shared browser's setup (conftest.browser) plus trust in this cluster's certificates, for this module's
    driver only."""
    extra = (f"--ignore-certificate-errors-spki-list={','.join(spki_hashes(sec.cluster))}",)
    with chromium_driver(tmp_path_factory.mktemp("chromium-secured"), extra) as driver:
        yield driver


@pytest.fixture(autouse=True)
def fresh_log(tab: Any) -> None:
    """Each test's log starts empty: what an earlier test left (say one that failed before checking) is not its."""
    start_log(tab)


# ------------------------------------------------------------------------------------------------- helpers


def wait_for(driver: Any, predicate: Any, what: str, timeout: float = SLOW_MACHINE_S) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: predicate(d), what)


def js(driver: Any, script: str, *args: Any) -> Any:
    return driver.execute_script(script, *args)


def text(driver: Any, selector: str) -> str | None:
    return js(driver, "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;", selector)


def cells(driver: Any, table_id: str) -> list[list[str]]:
    return js(driver, "return [...document.querySelectorAll(`#${arguments[0]} tbody tr`)]"
                      ".filter(tr => !(tr.cells.length === 1 && tr.cells[0].colSpan > 1))"
                      ".map(tr => [...tr.cells].map(td => td.innerText.trim()));", table_id)


def token(driver: Any) -> str | None:
    return js(driver, "return sessionStorage.getItem(arguments[0]);", TOKEN_KEY)


def load(driver: Any, sec: Sec, fragment: str) -> None:
    driver.get(f"{sec.url}/ui?load={next(_loads)}#{fragment}")


def signin_shown(driver: Any) -> bool:
    return bool(js(driver, "return !!document.getElementById('login-user');"))


def page_done(driver: Any, page: str, refreshes: int = 1) -> bool:
    return bool(js(driver, "const m = document.getElementById('main');"
                           "return !document.getElementById('login-user') && m.dataset.page === arguments[0]"
                           " && Number(m.dataset.refreshes || 0) >= arguments[1];", page, refreshes))


def open_page(driver: Any, sec: Sec, fragment: str, page: str) -> None:
    load(driver, sec, fragment)
    wait_for(driver, lambda d: page_done(d, page), f"page {page} (signed in)")


def sign_in(driver: Any, sec: Sec, fragment: str, page: str, password: str = PASSWORDS["alice"]) -> None:
    load(driver, sec, fragment)
    wait_for(driver, signin_shown, "the sign-in form")
    driver.find_element("id", "login-user").send_keys("alice")
    driver.find_element("id", "login-password").send_keys(password)
    driver.find_element("css selector", "#main form button[type=submit]").click()
    wait_for(driver, lambda d: page_done(d, page), f"page {page} after signing in")


def click(driver: Any, selector: str) -> None:
    driver.find_element("css selector", selector).click()


def dialog_open(driver: Any) -> bool:
    return bool(js(driver, "return document.getElementById('confirm').open;"))


def failed_loads(*what: str) -> list[str]:
    """Browser-log texts of the failed loads a test expects: "<path> - Failed to load resource: ... <status>"."""
    return [f"{path} - Failed to load resource: the server responded with a status of {status}"
            for path, status in (w.rsplit(" ", 1) for w in what)]


def no_errors(driver: Any, *allowed: str) -> None:
    errors = console_errors(driver, allowed)
    assert not errors, f"the browser logged errors: {errors}"


# ------------------------------------------------------------------------------------------------- tests


def test_no_credentials_shows_the_sign_in_form_and_a_wrong_password_the_apis_401(tab: Any, sec: Sec) -> None:
    assert request(f"{sec.url}/v3/clusters", ctx=sec.ca)[0] == 401  # the API asks who the caller is
    load(tab, sec, "/topics")
    wait_for(tab, signin_shown, "the sign-in form")
    main = text(tab, "#main") or ""
    assert "SASL_AUTHENTICATION_FAILED" in main, main  # the API's 401, named in the form's note
    assert js(tab, "return document.querySelectorAll('#main table').length;") == 0
    assert not any(t in main for t in TOPICS), main
    assert token(tab) is None
    screenshot(tab, SHOTS / "signin.png")

    tab.find_element("id", "login-user").send_keys("alice")
    tab.find_element("id", "login-password").send_keys("not-" + PASSWORDS["alice"])
    click(tab, "#main form button[type=submit]")
    wait_for(tab, lambda d: text(d, "#main form .error"), "the sign-in error")
    status, raw, _ = request(f"{sec.url}/auth/token", "POST", {}, ctx=sec.ca,
                             headers={"Authorization": "Basic " + base64.b64encode(b"alice:nope").decode()})
    refused = json.loads(raw)
    assert status == 401 and refused["error"] == "SASL_AUTHENTICATION_FAILED", refused
    shown = text(tab, "#main form .error") or ""
    assert shown.startswith(f"401 {refused['error']}: "), shown
    assert signin_shown(tab) and token(tab) is None
    assert js(tab, "return document.querySelectorAll('#main table').length;") == 0
    assert not any(t in (text(tab, "#main") or "") for t in TOPICS)
    no_errors(tab, *failed_loads("/metadata 401", "/ui/api/brokers?include=log_dirs 401", "/auth/token 401"))


def test_alice_sees_what_the_api_lets_her_see(tab: Any, sec: Sec) -> None:
    sign_in(tab, sec, "/", "overview")
    assert token(tab) and tab.find_element("id", "signout").is_displayed()
    # The overview is Cluster Describe (/ui/api/brokers, /ui/api/zookeeper): alice gets the API's refusal, no data.
    status, refused = sec.api("GET", "/ui/api/brokers")
    assert status == 403 and refused["error"] == "CLUSTER_AUTHORIZATION_FAILED", refused
    assert "403 CLUSTER_AUTHORIZATION_FAILED" in (text(tab, "#main .error") or "")
    assert js(tab, "return document.getElementById('brokers');") is None
    no_errors(tab, *failed_loads("/metadata 401", "/ui/api/brokers?include=health,metrics 401",  # before signing in
                                 "/ui/api/zookeeper 401", "/ui/api/brokers?include=health,metrics 403",
                                 "/ui/api/zookeeper 403"))

    open_page(tab, sec, "/topics", "topics")
    v3 = [t["topic_name"] for t in sec.ok("GET", f"/v3/clusters/{sec.cid}/topics")["data"]]
    meta = {t["name"]: t for t in sec.ok("GET", "/metadata")["topics"]}
    assert v3 == ["orders"] and list(meta) == ["orders"]  # the ACLs at work, as the API answers for alice
    assert len(sec.ok("GET", f"/v3/clusters/{sec.cid}/topics", "admin")["data"]) == len(TOPICS)
    rows = cells(tab, "topics")
    assert [(r[0], int(r[1]), int(r[2])) for r in rows] == [
        (n, len(t["partitions"]), len(t["partitions"][0]["replicas"])) for n, t in meta.items()], rows
    assert rows[0][3:] == ["0", "0", "\u2013", "\u2013"], rows  # sizes need Cluster Describe: not shown
    assert "CLUSTER_AUTHORIZATION_FAILED" in (text(tab, "#sizes-hidden") or "")
    page = text(tab, "#main") or ""
    assert "payments" not in page and "secret" not in page
    no_errors(tab, *failed_loads("/ui/api/brokers?include=log_dirs 403"))
    screenshot(tab, SHOTS / "secured-topics.png")

    open_page(tab, sec, "/topics/secret", "topic")
    status, refused = sec.api("GET", "/topics/secret")
    assert status == 403 and refused["error"] == "TOPIC_AUTHORIZATION_FAILED", refused
    assert "TOPIC_AUTHORIZATION_FAILED" in (text(tab, "#main .error") or "")
    assert js(tab, "return document.querySelector('#partitions, #configs, #configs-error');") is None  # nothing
    no_errors(tab, *failed_loads("/ui/api/brokers?include=log_dirs 403", "/configs 403"))

    open_page(tab, sec, "/topics/orders/partitions/0", "browser")
    wait_for(tab, lambda d: cells(d, "records-table"), "orders' records")
    mine = sec.ok("GET", "/topics/orders/partitions/0/records?offset=0", headers={"Accept": JSON_V2})["records"]
    assert [(r["key"], r["value"]) for r in mine] == [(r["key"], r["value"]) for r in RECORDS]
    assert [(r[2], r[3]) for r in cells(tab, "records-table")] == [
        (json.dumps(r["key"]), json.dumps(r["value"], indent=2)) for r in RECORDS]
    no_errors(tab)

    open_page(tab, sec, "/groups", "groups")
    groups = [g["group"] for g in sec.ok("GET", "/groups")["groups"]]
    assert groups == ["billing"] and len(sec.ok("GET", "/groups", "admin")["groups"]) == len(GROUPS)
    assert [r[0] for r in cells(tab, "groups")] == groups
    assert "audit" not in (text(tab, "#main") or "")
    no_errors(tab)


def test_a_change_alice_may_not_make_shows_the_apis_403_and_changes_nothing(tab: Any, sec: Sec) -> None:
    if not token(tab):
        sign_in(tab, sec, "/topics/orders", "topic")
    open_page(tab, sec, "/topics/orders", "topic")
    assert [r[0] for r in cells(tab, "partitions")] == ["0"]  # she may Describe it: its partitions are shown
    status, refused = sec.api("GET", f"/v3/clusters/{sec.cid}/topics/orders/configs")
    assert status == 403 and (text(tab, "#configs-error") or "").startswith(f"403 {refused['error']}: ")

    click(tab, "#delete-topic")
    wait_for(tab, dialog_open, "the delete confirmation")
    tab.find_element("id", "confirm-typed").send_keys("orders")
    click(tab, "#confirm-ok")
    wait_for(tab, lambda d: text(d, "section.panel .error"), "the delete's error")
    # What the API answers alice for a delete, asked of a topic that does not exist (so nothing can be lost).
    status, refused = sec.api("DELETE", f"/v3/clusters/{sec.cid}/topics/orders-ghost")
    assert status == 403 and refused["error"] == "TOPIC_AUTHORIZATION_FAILED", refused
    assert (text(tab, "section.panel .error") or "").startswith(f"403 {refused['error']}: ")
    assert js(tab, "return location.hash;") == "#/topics/orders"
    assert sec.api("GET", f"/v3/clusters/{sec.cid}/topics/orders", "admin")[0] == 200
    assert sec.ok("GET", "/topics/orders/partitions/0/offsets", "admin")["end_offset"] == len(RECORDS)

    tab.find_element("id", "config-name").send_keys("retention.ms")
    tab.find_element("id", "config-value").send_keys("1000")
    click(tab, "#config-set")
    wait_for(tab, dialog_open, "the alter confirmation")
    click(tab, "#confirm-ok")
    wait_for(tab, lambda d: "retention.ms" not in (text(d, "section.panel .error") or "retention.ms")
             and "403" in (text(d, "section.panel .error") or "") and not dialog_open(d), "the alter's error")
    status, refused = sec.api("POST", f"/v3/clusters/{sec.cid}/topics/orders-ghost/configs:alter",
                              body={"data": [{"name": "retention.ms", "value": "1000"}]})
    assert status == 403, refused
    wait_for(tab, lambda d: (text(d, "section.panel .error") or "").startswith(f"403 {refused['error']}: "),
             "the API's refusal of the alter")
    configs = {e["name"]: e for e in sec.ok("GET", f"/v3/clusters/{sec.cid}/topics/orders/configs", "admin")["data"]}
    assert configs["retention.ms"]["is_default"], configs["retention.ms"]
    no_errors(tab, *failed_loads("/ui/api/brokers?include=log_dirs 403", "/configs 403", "/topics/orders 403",
                                 "/configs:alter 403"))


def test_the_token_lives_in_the_tab_only_and_signing_out_clears_it(tab: Any, sec: Sec) -> None:
    if not token(tab):
        sign_in(tab, sec, "/topics", "topics")
    open_page(tab, sec, "/topics", "topics")
    held = token(tab)
    assert held and held.startswith("odt1."), held
    assert sec.api("GET", "/topics/orders", headers={"Authorization": f"Bearer {held}"})[0] == 200  # alice's
    assert js(tab, "return localStorage.length;") == 0 and held not in js(tab, "return document.cookie;")
    assert held not in tab.current_url

    first = tab.current_window_handle
    tab.switch_to.new_window("tab")  # a new top-level tab: a sessionStorage of its own
    try:
        load(tab, sec, "/topics")
        wait_for(tab, signin_shown, "the sign-in form in a new tab")
        assert token(tab) is None and cells(tab, "topics") == []
    finally:
        tab.close()
        tab.switch_to.window(first)
    assert token(tab) == held  # the first tab is still signed in

    click(tab, "#signout")
    wait_for(tab, signin_shown, "the sign-in form after signing out")
    assert token(tab) is None and js(tab, "return sessionStorage.length;") == 0
    assert not tab.find_element("id", "signout").is_displayed()
    assert not any(t in (text(tab, "#main") or "") for t in TOPICS)
    no_errors(tab, *failed_loads("/ui/api/brokers?include=log_dirs 403", "/metadata 401",
                                 "/ui/api/brokers?include=log_dirs 401"))


def test_the_admin_sees_every_acl_the_api_lists(tab: Any, sec: Sec) -> None:
    """#/acls as the admin (a super user: a bearer token for its client certificate, from POST /auth/token, put in
    the tab's sessionStorage as the sign-in form would): one row per ACL the API lists for the admin, alice's
    among them, cell for cell."""
    issued = sec.ok("POST", "/auth/token", "admin", {})
    assert issued["principal"] == "User:CN=admin", issued
    listed = sec.ok("GET", f"/v3/clusters/{sec.cid}/acls", "admin")["data"]
    assert sec.api("GET", f"/v3/clusters/{sec.cid}/acls")[0] == 403  # alice may not: no Cluster Describe
    alices = sorted((a["operation"], a["resource_type"], a["resource_name"]) for a in listed
                    if a["principal"] == "User:alice")
    assert alices == sorted((op.upper(), "TOPIC" if kind == "--topic" else "GROUP", name)
                            for op, kind, name in ACLS), listed
    tab.get(f"{sec.url}/ui/favicon.svg")  # this origin, no page: no call made without the token
    js(tab, "sessionStorage.clear(); sessionStorage.setItem(arguments[0], arguments[1]);", TOKEN_KEY,
       issued["access_token"])
    try:
        open_page(tab, sec, "/acls", "acls")
        assert cells(tab, "acls") == [[a["resource_type"], a["resource_name"], a["pattern_type"], a["principal"],
                                       a["host"], a["operation"], a["permission"]] for a in listed]
        assert not js(tab, "return document.getElementById('status').classList.contains('bad');")
        no_errors(tab, *failed_loads("/favicon.ico 404"))  # the bare favicon.svg load's, not the console's
        screenshot(tab, SHOTS / "acls-secured.png")
    finally:
        js(tab, "sessionStorage.clear();")
