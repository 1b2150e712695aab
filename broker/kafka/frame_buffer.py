"""Room for a Kafka frame too large for a connection's receive buffer, kept by the connection for the next one.

Why: a new ``bytearray(size)`` per large frame is zeroed page by page and released again; under replication and
librdkafka's produce (frames of 0.1-1 MB, hundreds a second) that allocation was about 6 % of the brokers' time.
The frame leaves as a copy (``bytes``) once complete, so the kept buffer is free for the next frame at once.
Frames over the cap get a buffer of their own, so a connection holds at most ``cap`` bytes between frames.
"""

from __future__ import annotations


class KeptBuffer:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._kept: bytearray | None = None

    @property
    def kept_bytes(self) -> int:
        return 0 if self._kept is None else len(self._kept)

    def take(self, size: int) -> memoryview:
        """``size`` bytes to read one frame into (valid until the next ``take``)."""
        if size > self.cap:
            return memoryview(bytearray(size))
        if self._kept is None or len(self._kept) < size:
            self._kept = bytearray(size)
        return memoryview(self._kept)[:size]
