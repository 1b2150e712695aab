"""What the v3 handlers added for issue 24 point 7 share: the cluster check, links and resource names.

Confluent's v3 resources name themselves twice: ``metadata.self`` (a URL, kafka-rest ``UrlFactoryImpl``) and
``metadata.resource_name`` (a CRN, ``CrnFactoryImpl``: ``crn:///kafka=<cluster>/<type>=<id>/...``). Both are
built here, from the broker's advertised URL (never the request's Host header, as broker/api/admin_v3.py
explains), so every handler module renders them the same way. The functions below ``V3`` are pure (a base URL
and names in, JSON out): tests/unit/api/test_v3_extras.py checks them without a broker.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web

from broker.api.context import BROKER, json_response
from broker.api.params import negotiate
from odradek.protocol import media
from odradek.protocol.errors import ClusterNotFoundError


def check_cluster(request: web.Request) -> str:
    """Every v3 handler starts here: the Accept header first (a 406 never follows a change), then the cluster id
    of the path, which must be this cluster's (404 otherwise, as Confluent's ``Cluster %s cannot be found``)."""
    negotiate(request, (media.PLAIN_JSON,))
    cid = request.match_info["cluster_id"]
    own = request.app[BROKER].cluster_id
    if cid != own:
        raise ClusterNotFoundError(f"Cluster {cid} cannot be found; this is cluster {own}")
    return cid


def v3(request: web.Request) -> V3:
    """The link builder of this broker and the request's (checked) cluster."""
    return V3(f"{request.app[BROKER].info().url}/v3", request.match_info["cluster_id"])


def json_v3(request: web.Request, body: Any, status: int = 200) -> web.Response:
    return json_response(body, status=status, content_type=negotiate(request, (media.PLAIN_JSON,)))


class V3:
    """URLs and CRNs under ``{base}/clusters/{cluster_id}``; path segments are percent-encoded as a URL builder
    encodes them (a group id may hold characters a topic name may not)."""

    def __init__(self, base: str, cluster_id: str) -> None:
        self.base = base
        self.cluster_id = cluster_id

    def url(self, *segments: object, query: dict[str, str] | None = None) -> str:
        path = "/".join(quote(str(s), safe="") for s in ("clusters", self.cluster_id, *segments))
        return f"{self.base}/{path}" + (f"?{urlencode(query)}" if query else "")

    def crn(self, *pairs: tuple[str, object], tail: str | None = None) -> str:
        """``crn:///kafka=<cluster>/<type>=<id>/...``, ending with ``tail`` (a bare segment) when given."""
        out = "crn:///" + "/".join(f"{k}={v}" for k, v in (("kafka", self.cluster_id), *pairs))
        return out if tail is None else f"{out}/{tail}"

    def related(self, *segments: object) -> dict[str, str]:
        return {"related": self.url(*segments)}

    def collection(self, kind: str, data: list[dict[str, Any]], *segments: object,
                   query: dict[str, str] | None = None) -> dict[str, Any]:
        """A ResourceCollection: ``{"kind", "metadata": {"self", "next": null}, "data"}``."""
        return {"kind": kind, "metadata": {"self": self.url(*segments, query=query), "next": None}, "data": data}
