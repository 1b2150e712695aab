"""Offset-range planning without Spark or brokers: splitting, offset resolution, admission control, replay."""

from __future__ import annotations

import random

import pytest

from odradek_spark.options import OptionError
from odradek_spark.planning import (
    OffsetRange,
    check_spec_partitions,
    from_json_offsets,
    plan_stream_ranges,
    rate_limit,
    resolve_offsets,
    split_ranges,
    to_json_offsets,
)

R = OffsetRange


# ------------------------------------------------------------------------------------------------ splitting


def test_without_options_each_partition_is_one_task_and_empty_ranges_go() -> None:
    ranges = [R("t", 0, 0, 10), R("t", 1, 5, 5), R("u", 0, 3, 4)]
    assert split_ranges(ranges) == [R("t", 0, 0, 10), R("u", 0, 3, 4)]


def test_max_records_per_partition_cuts_even_pieces() -> None:
    assert split_ranges([R("t", 0, 0, 10)], max_records_per_partition=4) == [
        R("t", 0, 0, 3), R("t", 0, 3, 6), R("t", 0, 6, 10)
    ]
    assert split_ranges([R("t", 0, 0, 8)], max_records_per_partition=4) == [R("t", 0, 0, 4), R("t", 0, 4, 8)]
    assert split_ranges([R("t", 0, 7, 8)], max_records_per_partition=4) == [R("t", 0, 7, 8)]


def test_min_partitions_splits_in_proportion_like_spark() -> None:
    # Spark's KafkaOffsetRangeCalculator: the last pieces take the rounding.
    assert split_ranges([R("t", 1, 1, 5)], min_partitions=3) == [R("t", 1, 1, 2), R("t", 1, 2, 3), R("t", 1, 3, 5)]
    # A small range stays whole and does not count in the proportional share of the big one.
    assert split_ranges([R("a", 0, 1, 5), R("b", 0, 1, 21)], min_partitions=4) == [
        R("a", 0, 1, 5), R("b", 0, 1, 7), R("b", 0, 7, 14), R("b", 0, 14, 21)
    ]
    # Enough ranges already: untouched.
    assert split_ranges([R("a", 0, 0, 100), R("b", 0, 0, 1)], min_partitions=2) == [R("a", 0, 0, 100),
                                                                                     R("b", 0, 0, 1)]


def test_splitting_covers_every_offset_once_and_is_deterministic() -> None:
    rng = random.Random(7)
    for _ in range(200):
        ranges = []
        for p in range(rng.randrange(1, 6)):
            start = rng.randrange(0, 1000)
            ranges.append(R("t", p, start, start + rng.randrange(0, 500)))
        kwargs = {"min_partitions": rng.choice([None, 1, 3, 10, 50]),
                  "max_records_per_partition": rng.choice([None, 1, 7, 100])}
        pieces = split_ranges(ranges, **kwargs)
        assert pieces == split_ranges(list(ranges), **kwargs)
        covered = sorted((r.partition, o) for r in pieces for o in range(r.from_offset, r.until_offset))
        assert covered == sorted((r.partition, o) for r in ranges for o in range(r.from_offset, r.until_offset))
        assert all(r.size > 0 for r in pieces)
        if kwargs["max_records_per_partition"]:
            assert all(r.size <= kwargs["max_records_per_partition"] for r in pieces)
        assert len(pieces) >= len([r for r in ranges if r.size])


# ------------------------------------------------------------------------------------------- resolution


TPS = [("t", 0), ("t", 1)]
EARLIEST = {("t", 0): 5, ("t", 1): 0}
LATEST = {("t", 0): 50, ("t", 1): 7}


def test_earliest_latest_and_json_with_sentinels() -> None:
    assert resolve_offsets("startingOffsets", "earliest", TPS, EARLIEST, LATEST) == EARLIEST
    assert resolve_offsets("startingOffsets", "latest", TPS, EARLIEST, LATEST) == LATEST
    spec = {("t", 0): -2, ("t", 1): -1}
    assert resolve_offsets("startingOffsets", spec, TPS, EARLIEST, LATEST) == {("t", 0): 5, ("t", 1): 7}
    spec = {("t", 0): 3, ("t", 1): 100}  # explicit offsets are kept: the reader and planner judge them
    assert resolve_offsets("startingOffsets", spec, TPS, EARLIEST, LATEST) == spec


def test_json_offsets_must_name_exactly_the_subscribed_partitions() -> None:
    with pytest.raises(OptionError, match=r"does not give offsets for t-1"):
        resolve_offsets("startingOffsets", {("t", 0): 1}, TPS, EARLIEST, LATEST)
    with pytest.raises(OptionError, match=r"not subscribed or do not exist: t-9"):
        check_spec_partitions("endingOffsets", {("t", 0): 1, ("t", 1): 1, ("t", 9): 1}, TPS)


def test_json_offsets_are_canonical_so_equal_maps_compare_equal_as_text() -> None:
    a = to_json_offsets({("b", 10): 1, ("a", 2): 5, ("b", 9): 3})
    b = to_json_offsets({("b", 9): 3, ("a", 2): 5, ("b", 10): 1})
    assert list(a) == ["a", "b"] and list(a["b"]) == ["9", "10"]
    import json

    assert json.dumps(a) == json.dumps(b)
    assert from_json_offsets(json.loads(json.dumps(a))) == {("b", 10): 1, ("a", 2): 5, ("b", 9): 3}
    assert from_json_offsets(None) == {}
    with pytest.raises(ValueError):
        from_json_offsets({"t": 5})


# ------------------------------------------------------------------------------------- admission control


def test_rate_limit_never_admits_more_than_the_limit_and_shares_by_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 10}
    latest = {("t", 0): 600, ("t", 1): 400, ("t", 2): 110}  # backlogs 600, 300, 100
    end = rate_limit(start, latest, 100)
    assert end == {("t", 0): 60, ("t", 1): 130, ("t", 2): 20}
    assert rate_limit(start, latest, 10_000) == latest  # everything fits


def test_rate_limit_does_not_starve_small_partitions_and_is_exact() -> None:
    rng = random.Random(3)
    for _ in range(500):
        n = rng.randrange(1, 8)
        start = {("t", p): rng.randrange(0, 100) for p in range(n)}
        latest = {tp: off + rng.choice([0, 0, 1, 2, rng.randrange(0, 10_000)]) for tp, off in start.items()}
        limit = rng.randrange(1, 200)
        end = rate_limit(start, latest, limit)
        pending = sum(latest[tp] - start[tp] for tp in start)
        admitted = sum(end[tp] - start[tp] for tp in start)
        assert admitted == min(limit, pending)
        assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)
    # Three partitions with one record each and a limit of 2: two of them now, the third next time.
    start = {("t", p): 0 for p in range(3)}
    latest = {("t", p): 1 for p in range(3)}
    first = rate_limit(start, latest, 2)
    assert sum(first.values()) == 2
    assert rate_limit(first, latest, 2) == latest


def test_rate_limit_new_partitions_start_at_zero() -> None:
    assert rate_limit({("t", 0): 10}, {("t", 0): 20, ("t", 1): 30}, 8) == {("t", 0): 12, ("t", 1): 6}


# ------------------------------------------------------------------------------------------ micro-batches


def test_stream_ranges_are_end_exclusive_and_replayable() -> None:
    start = {("t", 0): 10, ("t", 1): 4}
    end = {("t", 0): 15, ("t", 1): 4, ("t", 2): 3}  # t-2 is new: read from 0
    ranges, problems = plan_stream_ranges(start, end)
    assert ranges == [R("t", 0, 10, 15), R("t", 2, 0, 3)] and problems == []
    assert plan_stream_ranges(dict(start), dict(end)) == (ranges, problems)


def test_stream_ranges_report_offsets_that_went_back_or_vanished() -> None:
    ranges, problems = plan_stream_ranges({("t", 0): 10, ("gone", 0): 3}, {("t", 0): 2})
    assert ranges == []
    assert any("t-0's offset went back from 10 to 2" in p for p in problems)
    assert any("gone-0 is gone" in p for p in problems)
