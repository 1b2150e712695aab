"""Every HTTP client session a broker opens gets the broker's TLS context: a new session without it would talk
plaintext to a TLS listener (and fail) or, worse, skip the CA check."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_every_broker_connector_takes_the_shared_tls_context() -> None:
    found = []
    for package in ("broker", "consumer_coordinator"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text()
            for m in re.finditer(r"aiohttp\.ClientSession\((?:[^()]|\([^()]*\))*\)", text, re.S):
                found.append(path.relative_to(ROOT))
                assert "ssl=" in m.group(0), f"{path}: a ClientSession without the broker's TLS context (ssl=...)"
                assert "headers=" in m.group(0), f"{path}: a ClientSession without the inter-broker credentials"
    assert found == [Path("broker/interbroker.py")], found  # one inter-broker client, one pool
