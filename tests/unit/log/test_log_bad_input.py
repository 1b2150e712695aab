"""Bad input is refused with a typed error and leaves the log exactly as it was."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import crc32c
import pytest

from broker.log import Log
from odradek.protocol import records as r
from odradek.protocol.errors import CorruptRecordError, InvalidRecordError, KafkaStorageError, RecordTooLargeError

from .helpers import batch, open_log, read_all


def _with_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def _flip_last_byte(b: bytes) -> bytes:
    return b[:-1] + bytes([b[-1] ^ 1])


def _set(fmt: str, pos: int, value: int, fix_crc: bool = False) -> Callable[[bytes], bytes]:
    def mutate(b: bytes) -> bytes:
        data = bytearray(b)
        struct.pack_into(fmt, data, pos, value)
        return _with_crc(data) if fix_crc else bytes(data)

    return mutate


CASES: list[tuple[str, Callable[[bytes], bytes], type[Exception]]] = [
    ("wrong crc", _flip_last_byte, CorruptRecordError),
    ("wrong crc field", _set(">I", 17, 12345), CorruptRecordError),
    ("length too short", _set(">i", 8, 20), CorruptRecordError),
    ("length one byte short", lambda b: _set(">i", 8, len(b) - 13)(b), CorruptRecordError),
    ("length past the end", lambda b: _set(">i", 8, len(b) - 11)(b), CorruptRecordError),
    ("absurd length", _set(">i", 8, 2**31 - 1), RecordTooLargeError),
    ("negative length", _set(">i", 8, -5), CorruptRecordError),
    ("magic 1", _set(">b", 16, 1), CorruptRecordError),
    ("truncated", lambda b: b[:-7], CorruptRecordError),
    ("trailing bytes", lambda b: b + b"\x00" * 20, CorruptRecordError),
    ("absurd record count", _set(">i", 57, 2**31 - 1, fix_crc=True), InvalidRecordError),
    ("negative record count", _set(">i", 57, -1, fix_crc=True), InvalidRecordError),
    ("more records than offsets", _set(">i", 57, 6, fix_crc=True), InvalidRecordError),
    ("empty", lambda b: b"", InvalidRecordError),
]


def _state(log: Log, path: Path) -> tuple[int, int, bytes, list[tuple[int, int]]]:
    return (
        log.log_end_offset,
        (path / "00000000000000000000.log").stat().st_size,
        read_all(log),
        log.epoch_cache.entries(),
    )


@pytest.mark.parametrize(("name", "mutate", "error"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("path_kind", ["leader", "follower"])
def test_bad_batch_is_refused_and_the_log_is_unchanged(
    tmp_path: Path, name: str, mutate: Callable[[bytes], bytes], error: type[Exception], path_kind: str
) -> None:
    path = tmp_path / "t-0"
    log = open_log(path, {"max.message.bytes": 1 << 20})
    log.append(batch(3, tag=1), leader_epoch=1)
    before = _state(log, path)
    good = batch(5, tag=2)
    bad = mutate(good)
    if path_kind == "follower":
        bad = mutate(r.encode_batch([(b"k", b"v" * 20, 1, ())] * 5, base_offset=3, partition_leader_epoch=2))
    with pytest.raises(error):
        if path_kind == "leader":
            prefix = batch(1, tag=3) if bad else b""  # a good batch first: nothing may be half-applied
            log.append(prefix + bad, leader_epoch=2)
        else:
            log.append_replicated(bad)
    assert _state(log, path) == before
    assert log.append(good, leader_epoch=2).first_offset == 3  # and the log still works


def test_leader_refuses_a_producer_batch_with_offset_gaps(tmp_path: Path) -> None:
    # Followers accept these (compaction leaves them); a producer never sends one.
    log = open_log(tmp_path / "t-0")
    gappy = _set(">i", 23, 7, fix_crc=True)(batch(5))
    with pytest.raises(InvalidRecordError, match="last offset delta"):
        log.append(gappy, leader_epoch=0)
    assert log.log_end_offset == 0
    assert log.append_replicated(_set(">q", 0, 0)(gappy)).last_offset == 7


def test_batch_over_max_message_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"max.message.bytes": 500})
    with pytest.raises(RecordTooLargeError) as info:
        log.append(batch(20, value_size=50), leader_epoch=0)
    assert info.value.details["limit"] == 500
    assert log.log_end_offset == 0


def test_closed_log_refuses_everything(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(1), leader_epoch=0)
    log.close()
    for call in (
        lambda: log.append(batch(1), leader_epoch=0),
        lambda: log.read(0, 10),
        log.roll,
        lambda: log.truncate_to(0),
    ):
        with pytest.raises(KafkaStorageError):
            call()
