"""An in-memory fake of the broker's one inter-broker client (``broker.interbroker.InterBrokerClient``).

Services that forward (reads, offsets, coordinator and controller calls) only ``send`` / ``send_to`` a ``Request``
and read the ``Reply``, or ask ``url_of`` a broker; the fake records every request with where it went and answers
from a handler the test gives (a canned reply, or a typed error it raises, as the real client raises a remote's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from multidict import CIMultiDict, CIMultiDictProxy

from broker.interbroker import Reply, Request
from odradek.protocol.errors import BrokerNotAvailableError


def reply(body: Any = None, headers: Mapping[str, str] | None = None, *, raw: bytes | None = None) -> Reply:
    """A successful answer: ``body`` as JSON (or ``raw`` bytes), with ``headers``."""
    data = raw if raw is not None else (b"" if body is None else orjson.dumps(body))
    return Reply(None, 200, CIMultiDictProxy(CIMultiDict(headers or {})), data)


@dataclass
class Sent:
    where: str  # "node:<id>" or the base URL
    request: Request

    def json(self) -> Any:
        return orjson.loads(self.request.body) if self.request.body else None


@dataclass
class FakeInterBroker:
    urls: dict[int, str] = field(default_factory=dict)
    answer: Callable[[Sent], Reply] = lambda sent: reply({})
    sent: list[Sent] = field(default_factory=list)

    def url_of(self, node_id: int) -> str | None:
        return self.urls.get(node_id)

    async def send(self, node_id: int, request: Request) -> Reply:
        if node_id not in self.urls:
            raise BrokerNotAvailableError(f"broker {node_id} is not registered right now", sent=False)
        return self._answer(Sent(f"node:{node_id}", request))

    async def send_to(self, base_url: str, request: Request) -> Reply:
        return self._answer(Sent(base_url, request))

    def _answer(self, sent: Sent) -> Reply:
        self.sent.append(sent)
        return self.answer(sent)
