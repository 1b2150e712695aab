"""POST /producer_ids: Kafka's InitProducerId for an idempotent producer without a transactional id.

Any broker answers: ids come from blocks this broker claimed in ZooKeeper (zk/producer_ids.py), so no two
producers ever share one. The epoch of a fresh id is 0; the producer numbers its batches per partition from
sequence 0 (docs/transactions.md).
"""

from __future__ import annotations

from aiohttp import web

from broker.api.context import BROKER, json_response


async def init_producer_id(request: web.Request) -> web.Response:
    producer_id, epoch = await request.app[BROKER].txn.init_producer_id()
    return json_response({"producer_id": producer_id, "producer_epoch": epoch})


def routes() -> list[web.RouteDef]:
    return [web.post("/producer_ids", init_producer_id)]
