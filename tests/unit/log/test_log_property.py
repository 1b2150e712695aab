"""Property: any sequence of appends, reads, truncations, rolls and reopenings returns what was appended.

A model keeps the expected batches (their assigned offsets and exact bytes); after each step the log must
agree with it: contiguous offsets, byte-identical batches, reads starting at the batch that holds the
requested offset.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.log import Log
from odradek.protocol import records as r

from .helpers import FakeClock, config

_TMP_ROOT = Path(tempfile.gettempdir())


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="odradek-prop-", dir=_TMP_ROOT))
        self.clock = FakeClock()
        self.cfg = config(segment_bytes=700, index_interval_bytes=90, file_delete_delay_ms=0)
        self.log = Log.open(self.root / "p-0", self.cfg, now=self.clock)
        self.batches: list[tuple[int, int, bytes]] = []  # (base offset, next offset, bytes as stored)
        self.epoch = 0
        self.counter = 0

    def teardown(self) -> None:
        self.log.close_handlers()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def end(self) -> int:
        return self.batches[-1][1] if self.batches else 0

    @rule(
        sizes=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=3),
        value_size=st.integers(min_value=0, max_value=120),
        compress=st.booleans(),
    )
    def append(self, sizes: list[int], value_size: int, compress: bool) -> None:
        payload = b""
        expected = []
        offset = self.end
        for n in sizes:
            self.counter += 1
            recs = [(b"k%d" % i, b"%d" % self.counter * value_size, self.clock.ms + i, ()) for i in range(n)]
            codec = r.ZSTD if compress else r.NONE
            payload += r.encode_batch(recs, compression=codec)
            expected.append(
                (
                    offset,
                    offset + n,
                    r.encode_batch(recs, base_offset=offset, compression=codec, partition_leader_epoch=self.epoch),
                )
            )
            offset += n
        result = self.log.append(payload, leader_epoch=self.epoch)
        assert result.first_offset == self.end and result.last_offset == offset - 1
        self.batches.extend(expected)
        self.clock.advance(7)

    @rule(data=st.data(), max_bytes=st.integers(min_value=1, max_value=2000))
    @precondition(lambda self: self.batches)
    def read(self, data: st.DataObject, max_bytes: int) -> None:
        offset = data.draw(st.integers(min_value=0, max_value=self.end))
        got = self.log.read(offset, max_bytes)
        if offset == self.end:
            assert got.data == b""
            return
        i = next(i for i, (_b, nxt, _d) in enumerate(self.batches) if nxt > offset)
        first = self.batches[i][2]
        assert got.data.startswith(first)
        assert len(got.data) == len(first) or len(got.data) <= max_bytes
        # what follows is a run of whole, consecutive expected batches from the same segment
        pos, j = 0, i
        while pos < len(got.data):
            assert got.data[pos : pos + len(self.batches[j][2])] == self.batches[j][2]
            pos += len(self.batches[j][2])
            j += 1
        assert got.next_offset == self.batches[j - 1][1]

    @rule(data=st.data())
    @precondition(lambda self: self.batches)
    def truncate(self, data: st.DataObject) -> None:
        k = data.draw(st.integers(min_value=0, max_value=len(self.batches) - 1))
        target = self.batches[k][0]
        assert self.log.truncate_to(target) == target
        del self.batches[k:]
        self.epoch += 1

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        if clean:
            self.log.close()
        else:
            self.log.close_handlers()  # a crash: nothing sealed or flushed by us
        self.log = Log.open(
            self.root / "p-0", self.cfg, now=self.clock, recovery_point=self.log.recovery_point, clean_shutdown=clean
        )

    @invariant()
    def offsets_agree(self) -> None:
        assert self.log.log_end_offset == self.end
        assert self.log.log_start_offset == 0

    @invariant()
    def everything_reads_back(self) -> None:
        out = bytearray()
        offset = 0
        while offset < self.log.log_end_offset:
            got = self.log.read(offset, 1500)
            out += got.data
            offset = got.next_offset
        assert bytes(out) == b"".join(b for _s, _e, b in self.batches)


LogMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
TestLogProperties = LogMachine.TestCase
