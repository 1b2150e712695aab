"""Confluent's message indexes: the part of its Protobuf framing (after the magic byte and the schema id) that says
which message of the schema's file a payload holds: its index among the file's messages, then among that one's
nested types, and so on, as a zig-zag varint count and zig-zag varints, with ``[0]`` (the file's first message,
the common case) written as the single byte 0.

Why here: the registry's serializer (broker/schema_registry/protobuf.py) and the Spark connector
(odradek_spark/protobuf.py) read and write the same bytes; the varints are the record codec's.
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records.varint import decode_varint, encode_varint

__all__ = ["decode_message_indexes", "encode_message_indexes"]


def encode_message_indexes(indexes: Sequence[int]) -> bytes:
    """The indexes as Confluent writes them ([0] as the single byte 0)."""
    if list(indexes) == [0]:
        return b"\x00"
    return encode_varint(len(indexes)) + b"".join(encode_varint(i) for i in indexes)


def decode_message_indexes(data: bytes | memoryview, pos: int = 0) -> tuple[tuple[int, ...], int]:
    """(the indexes at ``pos``, where the message's bytes start). ValueError when they are not Confluent's
    framing: cut short, a varint over 10 bytes, or a count the remaining bytes cannot hold."""
    try:
        count, pos = decode_varint(data, pos)  # type: ignore[arg-type]
        if count == 0:
            return (0,), pos
        if count < 0 or count > len(data) - pos:
            raise ValueError(f"a message-index count of {count} is not Confluent's framing")
        out = []
        for _ in range(count):
            index, pos = decode_varint(data, pos)  # type: ignore[arg-type]
            out.append(index)
    except IndexError:
        raise ValueError("the message indexes end early") from None
    except CorruptRecordError:
        raise ValueError("a message index is too long") from None
    return tuple(out), pos
