"""The metadata cache's topic-id index (``TopicTable``): a topic is found by its id as the table is now, whatever
changed it, and never by the id of a topic deleted and created again under its name."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable

import pytest

from broker.metadata.cache import MetadataCache, TopicTable, topic_uuid
from odradek.protocol.model import TopicAssignment

OLD, NEW, OTHER = (uuid.UUID(int=n) for n in (1, 2, 3))


def zk_id(u: uuid.UUID, padded: bool = False) -> str:
    """A UUID in ZooKeeper's form (url-safe base64; Kafka writes it without padding)."""
    text = base64.urlsafe_b64encode(u.bytes).decode()
    return text if padded else text.rstrip("=")


def assigned(u: uuid.UUID | None) -> TopicAssignment:
    return TopicAssignment({0: [1]}, None if u is None else zk_id(u))


def test_a_topic_is_found_by_its_id_padded_or_not_and_a_topic_without_one_is_not() -> None:
    cache = MetadataCache()
    cache.topics["a"] = assigned(OLD)
    cache.topics["b"] = TopicAssignment({0: [1]}, zk_id(OTHER, padded=True))
    cache.topics["no-id"] = assigned(None)
    assert (cache.topic_name(OLD), cache.topic_name(OTHER), cache.topic_name(NEW)) == ("a", "b", None)
    assert cache.topic_name(None) is None
    assert topic_uuid(zk_id(OLD)) == topic_uuid(zk_id(OLD, padded=True)) == OLD
    assert topic_uuid("not base64!") is None and topic_uuid("") is None


def test_a_topic_created_again_under_its_name_is_not_found_by_its_old_id() -> None:
    cache = MetadataCache()
    cache.topics["t"] = assigned(OLD)
    assert cache.topic_name(OLD) == "t"  # the index is built here
    cache.topics.pop("t")
    assert cache.topic_name(OLD) is None
    cache.topics["t"] = assigned(NEW)
    assert (cache.topic_name(OLD), cache.topic_name(NEW)) == (None, "t")
    cache.topics["t"] = assigned(OTHER)  # replaced in one step (the watcher's store of a new znode version)
    assert (cache.topic_name(NEW), cache.topic_name(OTHER)) == (None, "t")


@pytest.mark.parametrize("change", [
    lambda t: t.__setitem__("t", assigned(NEW)),
    lambda t: t.__delitem__("t"),
    lambda t: t.pop("t"),
    lambda t: t.pop("t", None),
    lambda t: t.popitem(),
    lambda t: t.clear(),
    lambda t: t.update({"t": assigned(NEW)}),
    lambda t: t.update([("t", assigned(NEW))]),
    lambda t: t.update(t=assigned(NEW)),
    lambda t: t.__ior__({"t": assigned(NEW)}),
], ids=["set", "del", "pop", "pop-default", "popitem", "clear", "update-mapping", "update-pairs", "update-kwargs",
        "ior"])
def test_every_change_of_the_table_is_seen_by_the_next_lookup(change: Callable[[TopicTable], object]) -> None:
    table = TopicTable({"t": assigned(OLD)})
    assert table.name_of(OLD) == "t"
    change(table)
    assert table.name_of(OLD) is None
    assert table.name_of(NEW) == ("t" if "t" in table else None)


def test_setdefault_indexes_a_topic_it_adds() -> None:
    table = TopicTable()
    assert table.name_of(OLD) is None
    table.setdefault("t", assigned(OLD))
    assert table.name_of(OLD) == "t"


def test_a_mapping_assigned_whole_is_indexed_too() -> None:
    cache = MetadataCache(topics={"a": assigned(OLD)})  # type: ignore[arg-type]
    assert isinstance(cache.topics, TopicTable) and cache.topic_name(OLD) == "a"
    cache.topics = {"b": assigned(NEW)}  # type: ignore[assignment]
    assert isinstance(cache.topics, TopicTable)
    assert (cache.topic_name(OLD), cache.topic_name(NEW)) == (None, "b")
