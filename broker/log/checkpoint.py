"""Kafka's checkpoint file format, shared by every ``*-checkpoint`` file the log layer writes.

Layout (text, one item per line)::

    0                 <- format version
    2                 <- number of entries
    <entry>           <- "<topic> <partition> <offset>" for offset checkpoints,
    <entry>              "<epoch> <startOffset>" for leader-epoch-checkpoint

Writes go to ``<file>.tmp``, are fsync'd, then renamed over the file and the directory is fsync'd, so a
reader finds either the old or the new checkpoint, never half of one. A checkpoint that does not parse is
reported as :class:`KafkaStorageError` by the reader; callers decide whether that is fatal (Kafka treats a
corrupt recovery-point file as "recover everything", which is what ``LogManager`` does).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from odradek.protocol.errors import KafkaStorageError

VERSION = 0


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable (file data alone is not enough on Linux)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_lines(path: Path, entries: Iterable[str]) -> None:
    items = list(entries)
    text = "".join(f"{line}\n" for line in (str(VERSION), str(len(items)), *items))
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_lines(path: Path, fields: int) -> list[list[str]]:
    """Entries split on whitespace, each checked to have ``fields`` parts; [] if the file does not exist."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    try:
        if int(lines[0]) != VERSION:
            raise KafkaStorageError(f"{path}: unsupported checkpoint version {lines[0]!r}")
        count = int(lines[1])
        entries = [line.split() for line in lines[2 : 2 + count]]
    except (IndexError, ValueError) as exc:
        raise KafkaStorageError(f"{path}: malformed checkpoint file") from exc
    if len(entries) != count or any(len(e) != fields for e in entries):
        raise KafkaStorageError(f"{path}: expected {count} entries of {fields} fields")
    return entries


def write_offsets(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    """An offset checkpoint: ``<topic> <partition> <offset>`` per log (recovery point, log start, ...)."""
    write_lines(path, (f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())))


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    try:
        return {(t, int(p)): int(o) for t, p, o in read_lines(path, 3)}
    except ValueError as exc:
        raise KafkaStorageError(f"{path}: non-numeric partition or offset") from exc
