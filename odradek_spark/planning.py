"""Offset-range planning: pure functions of offsets and options, no I/O, no Spark, so they are unit-tested alone.

Offsets name *positions*, as in Kafka: a range ``[from_offset, until_offset)`` is end-exclusive and holds the
records whose offsets lie in it, so the streaming offset ``{"t": {"0": 120}}`` means "partition 0 of t has been
read up to, not including, offset 120". A range is replayable: planned again from the same two offset maps it
gives the same input partitions, and reading them returns the same records (the log is append-only below the
high watermark), which is what lets Spark re-run an uncommitted micro-batch after a restart and get the same
output.

The split rules follow Spark's ``KafkaOffsetRangeCalculator``: ``maxRecordsPerPartition`` cuts every range into
``ceil(size / max)`` even pieces; ``minPartitions`` then splits large ranges in proportion to their size until
there are at least that many. Admission control (``maxOffsetsPerTrigger``) follows Spark's proportional rule,
except that it never admits more than the limit (Spark rounds small shares *up* and can overshoot by up to one
offset per partition); the rounding remainder goes to the largest fractional shares, so small partitions are
not starved.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from odradek.protocol.model import TopicPartition
from odradek_spark.options import EARLIEST, LATEST, OffsetSpec, OptionError

__all__ = [
    "DataLossError",
    "OffsetRange",
    "TopicPartition",
    "check_spec_partitions",
    "from_json_offsets",
    "plan_stream_ranges",
    "rate_limit",
    "resolve_offsets",
    "split_ranges",
    "to_json_offsets",
]

PartitionOffsets = dict[TopicPartition, int]


class DataLossError(RuntimeError):
    """Offsets the query was going to read no longer exist (retention, a deleted or recreated topic).

    Raised only with ``failOnDataLoss=true`` (the default); with ``false`` the connector logs a warning and
    carries on from the first offset that still exists.
    """


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one partition (end-exclusive)."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


# ------------------------------------------------------------------------------------------ offset maps


def to_json_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): o}`` -> ``{"t": {"p": o}}``, topics and partitions sorted.

    The order matters: Spark compares streaming offsets by their JSON text, so two equal maps built in different
    orders would look like new data and trigger an empty micro-batch (and ``Trigger.AvailableNow`` would never
    see its end).
    """
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_json_offsets(obj: Any) -> PartitionOffsets:
    """Inverse of :func:`to_json_offsets`; checks the shape, since it comes back from a checkpoint file."""
    if obj is None:
        return {}
    if not isinstance(obj, Mapping):
        raise ValueError(f"not an offsets map: {obj!r}")
    out: PartitionOffsets = {}
    for topic, parts in obj.items():
        if not isinstance(parts, Mapping):
            raise ValueError(f"offsets of topic {topic!r} are not a map: {parts!r}")
        for p, off in parts.items():
            out[(str(topic), int(p))] = int(off)
    return out


def check_spec_partitions(key: str, spec: Mapping[TopicPartition, int], partitions: Iterable[TopicPartition]) -> None:
    """A JSON offsets option must name exactly the partitions being read (Spark's rule): no more, no fewer.

    Why be strict: a partition left out would silently be read from a default position, and a partition that
    does not exist is nearly always a typo.
    """
    wanted = set(partitions)
    given = set(spec)
    missing = sorted(wanted - given)
    extra = sorted(given - wanted)
    if missing or extra:
        parts = []
        if missing:
            parts.append("it does not give offsets for " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            parts.append("it names partitions that are not subscribed or do not exist: "
                         + ", ".join(f"{t}-{p}" for t, p in extra))
        raise OptionError(f"option '{key}' must list every subscribed partition; " + "; ".join(parts))


def resolve_offsets(
    key: str,
    spec: OffsetSpec,
    partitions: Sequence[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> PartitionOffsets:
    """Turn ``earliest``/``latest``/JSON (with -2/-1) into concrete offsets for ``partitions``.

    Offsets given explicitly are kept as they are, even outside the log: the reader reports data loss for
    offsets below the log start, and planning rejects ranges that end before they start.
    """
    if isinstance(spec, str):
        source = earliest if spec == "earliest" else latest
        return {tp: int(source[tp]) for tp in partitions}
    check_spec_partitions(key, spec, partitions)
    out: PartitionOffsets = {}
    for tp in partitions:
        off = spec[tp]
        out[tp] = int(earliest[tp]) if off == EARLIEST else int(latest[tp]) if off == LATEST else off
    return out


# ---------------------------------------------------------------------------------------------- splitting


def _divide(rng: OffsetRange, parts: int) -> list[OffsetRange]:
    """Even pieces; the last ones take the rounding (Spark's ``getDividedPartition``)."""
    out = []
    remaining = rng.size
    start = rng.from_offset
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, rng.until_offset)
        if end > start:
            out.append(OffsetRange(rng.topic, rng.partition, start, end))
        start = end
    return out


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Scala's math.round rounds half up; Python's round() would round half to even.
    return max(math.floor(size / total * min_parts + 0.5), 1)


def split_ranges(
    ranges: Iterable[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """One Spark task per range, splitting large ranges; empty ranges are dropped. Deterministic.

    Without either option a topic-partition's range stays whole (one task per partition, Kafka's default).
    """
    out = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        out = [piece for r in out for piece in _divide(r, math.ceil(r.size / max_records_per_partition))]
    if min_partitions is None or len(out) >= min_partitions:
        return out
    total = sum(r.size for r in out)
    if total == 0:
        return out
    unsplit = [r for r in out if _part_count(r.size, total, min_partitions) == 1]
    split_total = total - sum(r.size for r in unsplit)
    split_min = max(min_partitions - len(unsplit), 1)
    result: list[OffsetRange] = []
    for r in out:
        parts = _part_count(r.size, split_total, split_min) if split_total > 0 else 1
        result.extend(_divide(r, parts))
    return result


# ------------------------------------------------------------------------------------- admission control


def rate_limit(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    limit: int,
    new_partition_start: int = 0,
) -> PartitionOffsets:
    """End offsets admitting at most ``limit`` offsets in total, shared in proportion to what each has pending.

    Partitions with nothing pending (or that went backwards: data loss, reported by planning) keep ``latest``.
    """
    sizes: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        size = end - start.get(tp, new_partition_start)
        if size > 0:
            sizes[tp] = size
    total = sum(sizes.values())
    result = dict(latest)
    if total <= limit:
        return result
    shares = {tp: limit * size / total for tp, size in sizes.items()}
    take = {tp: min(math.floor(share), sizes[tp]) for tp, share in shares.items()}
    left = limit - sum(take.values())
    # Largest fractional share first; ties to the smaller partition, then by name, so the plan is deterministic.
    order = sorted(sizes, key=lambda tp: (-(shares[tp] - math.floor(shares[tp])), sizes[tp], tp))
    for tp in order:
        if left <= 0:
            break
        if take[tp] < sizes[tp]:
            take[tp] += 1
            left -= 1
    for tp, n in take.items():
        result[tp] = start.get(tp, new_partition_start) + n
    return result


# ------------------------------------------------------------------------------------------ micro-batches


def plan_stream_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    new_partition_start: int = 0,
) -> tuple[list[OffsetRange], list[str]]:
    """The ranges of one micro-batch ``[start, end)``, and the data-loss problems found on the way.

    A partition that is in ``end`` but not in ``start`` is new: it is read from ``new_partition_start`` (0, as
    Kafka does, so records written before it was discovered are not skipped). A partition whose end is below its
    start went backwards (the topic was deleted and recreated): nothing is read from it in this batch.
    """
    ranges: list[OffsetRange] = []
    problems: list[str] = []
    for tp in sorted(end):
        until = end[tp]
        begin = start.get(tp, new_partition_start)
        if until < begin:
            problems.append(f"partition {tp[0]}-{tp[1]}'s offset went back from {begin} to {until}: the topic may "
                            "have been deleted and recreated; some data may have been missed")
            continue
        if until > begin:
            ranges.append(OffsetRange(tp[0], tp[1], begin, until))
    for tp in sorted(set(start) - set(end)):
        problems.append(f"partition {tp[0]}-{tp[1]} is gone (topic deleted?); some data may have been missed")
    return ranges, problems
