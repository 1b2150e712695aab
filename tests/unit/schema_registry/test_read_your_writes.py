"""A registry read on any broker sees every write acknowledged before it, wherever that write was made.

Each broker answers reads from its own copy of ``_schemas``, which a tailer keeps by long-polling the topic: on
its own, a copy trails the topic by up to one long-poll, so a client that registers through one broker and then
reads through another (confluent-kafka's serializer and deserializer, given two URLs) could be told 40401 for a
subject that exists. The read handlers therefore ``sync`` first: ask the topic's high watermark, wait until the
copy has applied it. Here the copy is a real RegistryState; the "tailer" applies the registration only after the
handler has asked for the high watermark, so a handler that did not wait answers from the stale copy.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import make_mocked_request

from broker.api import schema_registry as api
from broker.api.context import BROKER
from broker.schema_registry.service import SchemaRegistryService
from broker.schema_registry.store import schema_key
from odradek.protocol import errors as E
from tests.unit.schema_registry.in_memory import planning_service

SCHEMA = '{"type": "string"}'


def _lagging_copy() -> tuple[SchemaRegistryService, asyncio.Event]:
    """A service whose copy is one record behind ``_schemas`` (high watermark 1, nothing applied): the record,
    a registration of subject "s" as id 7, is applied by a stand-in tailer once the high watermark was asked."""
    s = planning_service()
    asked = asyncio.Event()

    async def fetch_anywhere(request: Any) -> Any:
        asked.set()
        return SimpleNamespace(high_watermark=1, records=b"")

    async def tail() -> None:
        await asked.wait()
        await asyncio.sleep(0.05)  # the copy catches up a little later, as a long-poll answer would
        s.state.apply(schema_key("s", 1), orjson.dumps({"subject": "s", "version": 1, "id": 7, "schema": SCHEMA,
                                                        "deleted": False}))
        async with s._applied:
            s._next = 1
            s._applied.notify_all()

    s._cache = SimpleNamespace(partition_count=lambda topic: 1)  # type: ignore[assignment]
    s._fetches = SimpleNamespace(fetch_anywhere=fetch_anywhere)  # type: ignore[assignment]
    return s, asyncio.ensure_future(tail())  # type: ignore[return-value]


def _request(s: SchemaRegistryService, path: str, match: dict[str, str]) -> Any:
    req = make_mocked_request("GET", path, match_info=match, app={BROKER: SimpleNamespace(schema_registry=s)})
    return req


@pytest.mark.parametrize(("handler", "path", "match"), [
    (api.get_version, "/subjects/s/versions/latest", {"subject": "s", "version": "latest"}),
    (api.list_versions, "/subjects/s/versions", {"subject": "s"}),
    (api.schema_by_id, "/schemas/ids/7", {"id": "7"}),
    (api.list_subjects, "/subjects", {}),
])
def test_a_read_waits_for_the_copy_to_reach_the_topics_end(handler: Any, path: str, match: dict[str, str]) -> None:
    async def go() -> Any:
        s, tailer = _lagging_copy()
        response = await handler(_request(s, path, match))
        await tailer
        return orjson.loads(response.body)

    body = asyncio.run(go())
    assert body in ({"subject": "s", "version": 1, "id": 7, "schema": SCHEMA}, [1], {"schema": SCHEMA}, ["s"]), body


def test_without_a_topic_or_a_leader_the_copy_answers_as_it_is() -> None:
    """No ``_schemas`` yet: nothing to wait for. No leader: the read is still answered (40401 here)."""
    async def go() -> None:
        s = planning_service()
        s._cache = SimpleNamespace(partition_count=lambda topic: 0)  # type: ignore[assignment]
        with pytest.raises(E.SubjectNotFoundError):
            await api.get_version(_request(s, "/subjects/s/versions/1", {"subject": "s", "version": "1"}))

        async def no_leader(request: Any) -> Any:
            raise E.LeaderNotAvailableError("no leader")

        s._cache = SimpleNamespace(partition_count=lambda topic: 1)  # type: ignore[assignment]
        s._fetches = SimpleNamespace(fetch_anywhere=no_leader)  # type: ignore[assignment]
        with pytest.raises(E.SubjectNotFoundError):
            await api.get_version(_request(s, "/subjects/s/versions/1", {"subject": "s", "version": "1"}))

    asyncio.run(asyncio.wait_for(go(), 5))
