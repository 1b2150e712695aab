"""Topic administration over the REST-proxy v3 endpoints, plus the cluster map from ``GET /metadata``.

Any broker serves these (the controller does the work behind them), so the client asks the known brokers in
turn: a broker that is down, or answers "not the controller" or "ZooKeeper unavailable", is followed by the next
one after ``retry_backoff_ms``, until ``request_timeout_ms`` is spent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from odradek.client.metadata import Metadata, PartitionMeta, parse_metadata
from odradek.client.security import ClientSecurity
from odradek.client.transport import Transport, parse_bootstrap, quote_path
from odradek.protocol.errors import (
    BrokerNotAvailableError,
    CoordinationUnavailableError,
    NotControllerError,
    OdradekError,
    UnknownTopicError,
)

__all__ = ["AdminClient", "TopicDescription"]

T = TypeVar("T")

# Errors after which a write certainly did not happen, so sending it again is safe.
_WRITE_RETRY = (BrokerNotAvailableError, NotControllerError, CoordinationUnavailableError)


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionMeta, ...]
    replication_factor: int
    is_internal: bool
    configs: dict[str, str | None]

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


class AdminClient:
    """Creates, grows, configures and deletes topics. Thread-safe (each call is independent requests)."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        **security: Any,
    ) -> None:
        # TLS and credentials: ssl_cafile, ssl_certfile, ssl_keyfile, sasl_username, sasl_password, sasl_token
        self._transport = Transport(request_timeout_ms=request_timeout_ms,
                                    security=ClientSecurity.from_kwargs(security))
        self._metadata = Metadata(self._transport, parse_bootstrap(bootstrap_servers),
                                  retry_backoff_ms=retry_backoff_ms)
        self._timeout = request_timeout_ms / 1000.0
        self._backoff = retry_backoff_ms / 1000.0
        self._cluster_id: str | None = None

    # ------------------------------------------------------------------------------------------- cluster

    def cluster_id(self) -> str:
        if self._cluster_id is None:
            body = self._call(lambda url: self._transport.get_json(url, "/v3/clusters"), idempotent=True)
            self._cluster_id = str(body["data"][0]["cluster_id"])
        return self._cluster_id

    def brokers(self) -> dict[int, str]:
        """Live brokers: id -> URL."""
        return dict(self._fetch_metadata(None).brokers)

    def controller_id(self) -> int | None:
        return self._fetch_metadata(None).controller_id

    # -------------------------------------------------------------------------------------------- topics

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        configs: Mapping[str, Any] | None = None,
        replica_assignment: Mapping[int, Sequence[int]] | None = None,
        timeout_ms: int | None = None,
    ) -> dict[str, Any]:
        """Create a topic; returns once every partition has a leader (the v3 ``KafkaTopic`` answer).

        With ``replica_assignment`` ({partition: [broker ids, preferred leader first]}) the counts are implied.

        Raises:
            TopicAlreadyExistsError, InvalidTopicError, InvalidPartitionsError, InvalidReplicationFactorError,
            InvalidConfigError: as the controller decides.
        """
        body: dict[str, Any] = {"topic_name": name}
        if replica_assignment:
            body["replicas_assignments"] = [
                {"partition_id": int(p), "broker_ids": [int(b) for b in brokers]}
                for p, brokers in sorted(replica_assignment.items())
            ]
        else:
            body["partitions_count"] = partitions
            body["replication_factor"] = replication_factor
        if configs:
            body["configs"] = [{"name": k, "value": _config_value(v)} for k, v in configs.items()]
        query = {"timeout_ms": timeout_ms} if timeout_ms is not None else None
        path = self._topics_path()
        return self._call(lambda url: self._transport.send_json(url, "POST", path, body, query=query))

    def list_topics(self) -> list[str]:
        path = self._topics_path()
        body = self._call(lambda url: self._transport.get_json(url, path), idempotent=True)
        return sorted(t["topic_name"] for t in body.get("data") or ())

    def describe_topic(self, name: str) -> TopicDescription:
        """Partitions with leaders, replicas and ISR (from ``/metadata``) plus the v3 topic and its configs."""
        view = self._fetch_metadata([name])
        meta = view.topics.get(name)
        if meta is None or meta.error == UnknownTopicError.name:
            raise UnknownTopicError(f"topic '{name}' does not exist", topic=name)
        path = self._topics_path(name)
        topic = self._call(lambda url: self._transport.get_json(url, path), idempotent=True)
        return TopicDescription(
            name=name,
            partitions=meta.partitions,
            replication_factor=int(topic.get("replication_factor") or
                                   (len(meta.partitions[0].replicas) if meta.partitions else 0)),
            is_internal=bool(topic.get("is_internal", False)),
            configs=self.describe_configs(name),
        )

    def add_partitions(self, name: str, total_count: int) -> dict[str, Any]:
        """Grow the topic to ``total_count`` partitions (never fewer: INVALID_PARTITIONS)."""
        path = self._topics_path(name)
        body = {"partitions_count": total_count}
        return self._call(lambda url: self._transport.send_json(url, "PATCH", path, body))

    def delete_topic(self, name: str) -> None:
        """Mark the topic for deletion; the controller removes it shortly after."""
        path = self._topics_path(name)
        self._call(lambda url: self._transport.request(url, "DELETE", path))

    # ------------------------------------------------------------------------------------------- configs

    def describe_configs(self, name: str) -> dict[str, str | None]:
        """Every config of the topic with its effective value (defaults included)."""
        path = self._topics_path(name, "configs")
        body = self._call(lambda url: self._transport.get_json(url, path), idempotent=True)
        return {c["name"]: c.get("value") for c in body.get("data") or ()}

    def alter_configs(
        self, name: str, set: Mapping[str, Any] | None = None, delete: Iterable[str] | None = None
    ) -> None:
        """Set and delete (back to the default) topic configs in one request."""
        data = [{"name": k, "value": _config_value(v), "operation": "SET"} for k, v in (set or {}).items()]
        data += [{"name": k, "operation": "DELETE"} for k in delete or ()]
        if not data:
            return
        path = self._topics_path(name, "configs:alter")
        self._call(lambda url: self._transport.send_json(url, "POST", path, {"data": data}))

    # ------------------------------------------------------------------------------------------- generic

    def request_json(self, method: str, path: str, payload: Any = None, *, query: Mapping[str, Any] | None = None,
                     idempotent: bool | None = None, timeout_ms: float | None = None) -> Any:
        """Any other endpoint (group admin, entity configs, elections) with the same broker failover.

        ``path`` may contain ``{cluster_id}``, filled in here. GETs retry every retriable error; writes only
        the errors that prove nothing was done (see ``_call``). Returns the decoded JSON answer (None if empty).
        """
        if "{cluster_id}" in path:
            path = path.replace("{cluster_id}", quote_path(self.cluster_id())[1:])
        safe = method == "GET" if idempotent is None else idempotent

        def send(url: str) -> Any:
            if payload is None:
                resp = self._transport.request(url, method, path, query=query, timeout_ms=timeout_ms)
                return resp.json() if resp.body else None
            return self._transport.send_json(url, method, path, payload, query=query, timeout_ms=timeout_ms)

        return self._call(send, idempotent=safe)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------------------------------------- helpers

    def _topics_path(self, *rest: str) -> str:
        path = quote_path("v3", "clusters", self.cluster_id(), "topics", *rest[:1])
        if len(rest) > 1:  # "configs:alter" keeps its colon
            path += "/" + "/".join(rest[1:])
        return path

    def _fetch_metadata(self, topics: list[str] | None) -> Any:
        query = {"topics": ",".join(topics)} if topics else None
        body = self._call(lambda url: self._transport.get_json(url, "/metadata", query=query), idempotent=True)
        return parse_metadata(body)

    def _call(self, fn: Callable[[str], T], *, idempotent: bool = False) -> T:
        """Run ``fn(broker_url)`` on one broker after another until it succeeds or the timeout is spent.

        Reads retry every retriable error; writes only those that prove nothing was done (a timeout might
        have created the topic, and the retry would then fail with TOPIC_ALREADY_EXISTS).
        """
        deadline = time.monotonic() + self._timeout
        attempt = 0
        while True:
            urls = self._metadata.broker_urls()
            url = urls[attempt % len(urls)]
            attempt += 1
            try:
                return fn(url)
            except OdradekError as exc:
                retry = exc.retriable if idempotent else isinstance(exc, _WRITE_RETRY)
                if not retry or time.monotonic() + self._backoff > deadline:
                    raise
            if attempt % len(urls) == 0:  # tried them all: wait before the next round
                time.sleep(self._backoff)


def _config_value(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
