"""The web console's assets (issue 29): the page, its script and its style, shipped as package data.

Why a package of its own: the assets are data, not code, and live in ``static/`` beside this module so that they
ship in the wheel (``[tool.setuptools.package-data]`` names ``static/*``) and are found through
``importlib.resources`` wherever the package is installed, with no CDN and no build step: the script is plain
modern JavaScript, written for the browser as it is.

Invariants:

* the console holds no data and no business logic: every figure it shows comes from the broker's own JSON API,
  called from the same origin, so a user sees and changes exactly what the API lets them (authentication and
  ACLs are the API's, broker/security/);
* only the files named in ``CONTENT_TYPES`` are served, each under its own name (no paths, no directory
  listing), read once per process and kept with a content hash that versions it (``ETag`` and the ``?v=`` of
  the page's links), so a browser revalidates the page and caches each versioned asset for good.

Serving (routes, headers) is broker/api/console.py's; this module only knows what the assets are.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

# Every asset the console serves, with its media type. The page is the entry point (GET /ui).
CONTENT_TYPES: dict[str, str] = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
PAGE = "index.html"
# In the page, each asset link is written ``/ui/<name>?v={{<name>}}``; the placeholder becomes the asset's hash.
_PLACEHOLDER = "{{%s}}"


@dataclass(frozen=True, slots=True)
class Asset:
    name: str
    body: bytes
    content_type: str
    version: str  # a hash of the body: the ETag, and the ``?v=`` that makes a versioned link cacheable for good


def _read(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def _version(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:16]


@cache
def asset(name: str) -> Asset | None:
    """The asset called ``name``, or None when the console has none by that name (read once per process)."""
    content_type = CONTENT_TYPES.get(name)
    if content_type is None:
        return None
    if name == PAGE:
        return page()
    body = _read(name)
    return Asset(name, body, content_type, _version(body))


@cache
def page() -> Asset:
    """The page, its asset links versioned by their content, so a changed script is never served from a cache."""
    text = _read(PAGE).decode()
    for name in CONTENT_TYPES:
        if name != PAGE:
            text = text.replace(_PLACEHOLDER % name, _version(_read(name)))
    body = text.encode()
    return Asset(PAGE, body, CONTENT_TYPES[PAGE], _version(body))
