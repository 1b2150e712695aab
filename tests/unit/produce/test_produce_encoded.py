"""The produce service's many-partition append (``produce_encoded``, a REST produce's batches): partitions this
broker leads now are started together without a task each; the others, and any whose start refused it before
writing, take ``append`` with its waiting and retry rules; errors stay per partition. Real partitions on
``tmp_path``, a router double."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from broker.metadata.cache import MetadataCache
from broker.produce.routing import Remote
from broker.produce.service import PartitionResult, ProduceService
from broker.replication.partition import Partition
from odradek.protocol.errors import CorruptRecordError, LeaderNotAvailableError, NotLeaderOrFollowerError
from tests.unit.replication.fakes import batch, config, info, make_partition

ME = 1


class Router:
    """Partitions in ``local`` are led here; ``becoming`` ones are not active yet at the first look (as just after
    an election) and are when waited for."""

    broker_id = ME

    def __init__(self, local: dict[int, Partition], becoming: set[int]) -> None:
        self.local, self.becoming = local, becoming
        self.waited: list[int] = []

    def route(self, topic: str, partition: int) -> Partition | Remote:
        if partition in self.becoming:
            raise LeaderNotAvailableError("becoming the leader")
        return self.local[partition]

    async def await_route(self, topic: str, partition: int, deadline: float) -> Partition | Remote:
        self.waited.append(partition)
        return self.local[partition]


async def _setup(tmp_path: Path, n: int, becoming: set[int]) -> tuple[ProduceService, Router]:
    parts = {}
    for p in range(n):
        part, _, _ = make_partition(tmp_path / str(p))
        await part.apply(info(ME, 0, (ME,)), config())
        parts[p] = part
    router = Router(parts, becoming)
    service = ProduceService(SimpleNamespace(cache=MetadataCache()), object(),  # type: ignore[arg-type]
                             router=router)  # type: ignore[arg-type]
    return service, router


def test_partitions_led_here_are_started_together_and_the_rest_take_the_routed_path(tmp_path: Path) -> None:
    async def main() -> None:
        service, router = await _setup(tmp_path, 4, becoming={3})
        loop = asyncio.get_running_loop()
        results = await service.produce_encoded("t", {p: bytes(batch(p + 1)) for p in range(4)}, 1, 5000,
                                                loop.time() + 5)
        assert {p: (r.base_offset, r.leader, r.error) for p, r in results.items()} == {
            0: (0, ME, None), 1: (0, ME, None), 2: (0, ME, None), 3: (0, ME, None)}
        assert router.waited == [3]  # only the partition not led yet went through append's wait
        assert [router.local[p].log_end_offset for p in range(4)] == [1, 2, 3, 4]
        again = await service.produce_encoded("t", {0: bytes(batch(2)), 1: bytes(batch())}, 0, 5000,
                                              loop.time() + 5)
        assert again[0].base_offset == 1 and again[1].base_offset == 2 and router.waited == [3]

    asyncio.run(main())


def test_a_failed_append_is_that_partitions_error_and_the_others_go_on(tmp_path: Path) -> None:
    async def main() -> None:
        service, _ = await _setup(tmp_path, 2, becoming=set())
        corrupt = bytearray(batch(2))
        corrupt[-1] ^= 0xFF  # the CRC no longer matches: refused by the log, nothing written
        loop = asyncio.get_running_loop()
        results = await service.produce_encoded("t", {0: bytes(corrupt), 1: bytes(batch(2))}, 1, 5000,
                                                loop.time() + 5)
        assert isinstance(results[0], PartitionResult) and isinstance(results[0].error, CorruptRecordError)
        assert results[1].error is None and results[1].base_offset == 0

    asyncio.run(main())


def test_a_start_refused_before_writing_is_retried_on_the_routed_path(tmp_path: Path) -> None:
    async def main() -> None:
        service, router = await _setup(tmp_path, 2, becoming=set())
        part = router.local[1]
        original = part.begin_append
        refusals = []

        def refuse_once(*args: object, **kw: object) -> asyncio.Future[object]:
            if not refusals:
                refusals.append(1)
                raise NotLeaderOrFollowerError("moved")  # before the append: safe to retry
            return original(*args, **kw)  # type: ignore[arg-type]

        part.begin_append = refuse_once  # type: ignore[method-assign]
        loop = asyncio.get_running_loop()
        results = await service.produce_encoded("t", {0: bytes(batch()), 1: bytes(batch(3))}, 1, 5000,
                                                loop.time() + 5)
        assert results[1].error is None and results[1].base_offset == 0 and router.waited == [1]
        assert part.log_end_offset == 3

    asyncio.run(main())


def test_acks_all_takes_the_routed_path_for_every_partition(tmp_path: Path) -> None:
    async def main() -> None:
        service, router = await _setup(tmp_path, 2, becoming=set())
        loop = asyncio.get_running_loop()
        results = await service.produce_encoded("t", {0: bytes(batch()), 1: bytes(batch())}, -1, 5000,
                                                loop.time() + 5)
        assert all(r.error is None for r in results.values()) and sorted(router.waited) == [0, 1]

    asyncio.run(main())
