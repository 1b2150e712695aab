"""Run a call on the broker that coordinates a key (a transactional id, a group id): here, or forwarded once.

Why a component: every coordinator request has the same shape. The key's coordinator is a broker found from
ZooKeeper (the coordinator's ``locate``); when it is this broker the call runs here, otherwise the same call is
sent to the coordinator over the inter-broker client. A coordinator's router (broker/transaction_router.py for
transactional ids) gives the local call and how to make the same call elsewhere (an inter-broker request and the
decoding of its answer), and gets back the value and which broker coordinated, whichever way it went; front
doors call that router's typed methods.

Invariants:

* a call is forwarded at most once: the forward is marked (``forwarding.FORWARDED``), and a marked call on a
  broker that does not coordinate the key is NOT_COORDINATOR (retriable: the client locates again), so a
  coordinator moving in between never makes a request bounce between brokers;
* a coordinator that is not registered (no URL) is COORDINATOR_NOT_AVAILABLE (retriable);
* with ``attempts`` > 1, a local call that fails with NOT_COORDINATOR (the key moved away in between, as after a
  session loss) locates the coordinator again and runs there, unless the call was itself forwarded; the last
  attempt's NOT_COORDINATOR goes to the caller.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from broker.interbroker import Request
from broker.produce.forwarding import FORWARDED
from odradek.protocol.errors import CoordinatorNotAvailableError, NotCoordinatorError

if TYPE_CHECKING:
    from broker.interbroker import InterBrokerClient, Reply

__all__ = ["CoordinatorRouter", "Forward", "Routed", "json_body"]

T = TypeVar("T")

Locate = Callable[[str], Awaitable[int]]  # the broker id coordinating a key (claiming it if nobody does)


@dataclass(frozen=True, slots=True)
class Forward(Generic[T]):
    """The same call at the coordinator: an inter-broker request (a JSON ``body``, already encoded; ``params``,
    the query) and the decoding of its answer into what the local call returns. ``timeout_s`` bounds the whole
    forward (a join may wait a rebalance out)."""

    method: str
    path: str
    body: bytes | None
    decode: Callable[[Reply], T]
    params: Mapping[str, str] | None = None
    timeout_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Routed(Generic[T]):
    """A call's value and the broker that coordinated it (which a front door names to the client)."""

    value: T
    coordinator: int


def json_body(reply: Reply) -> Any:
    """The decoding of a forward whose local call returns a JSON-shaped value (an HTTP front door's)."""
    return reply.json()


class CoordinatorRouter:
    def __init__(self, broker_id: int, locate: Locate, interbroker: InterBrokerClient, *, noun: str = "",
                 attempts: int = 1) -> None:
        """``noun`` names keys in errors ("group" gives "group 'g'"; empty gives "'tx'"); ``attempts`` is how many
        times a local NOT_COORDINATOR sends the call to be located again (see the module docstring)."""
        self.broker_id = broker_id
        self._locate = locate
        self._interbroker = interbroker
        self._noun = noun
        self._attempts = max(1, attempts)

    async def run(self, key: str, local: Callable[[], Awaitable[T]], forward: Forward[T], *,
                  forwarded: bool = False, locate: Locate | None = None) -> Routed[T]:
        """``local()`` when this broker coordinates ``key``, else ``forward`` at the coordinator; ``forwarded``:
        this call was forwarded here by another broker (it is not passed on again). ``locate`` replaces the
        router's own for this call (a lookup that must not claim a key nobody coordinates, say).

        Raises:
            NotCoordinatorError: a forwarded call reached a broker that does not coordinate ``key``.
            CoordinatorNotAvailableError: the coordinator is not registered, or kept moving.
            whatever the local call, or the coordinator's answer, raises.
        """
        find = locate or self._locate
        for attempt in range(self._attempts):
            owner = await find(key)
            if owner == self.broker_id:
                try:
                    return Routed(await local(), owner)
                except NotCoordinatorError:
                    if forwarded or attempt == self._attempts - 1:
                        raise
                    continue  # the key moved away in between: locate it again
            if forwarded:
                raise NotCoordinatorError(f"broker {self.broker_id} does not coordinate {self._name(key)}")
            url = self._interbroker.url_of(owner)
            if url is None:
                raise CoordinatorNotAvailableError(f"the coordinator of {self._name(key)} (broker {owner}) is not live")
            reply = await self._interbroker.send_to(url, Request(
                forward.method, forward.path, params=forward.params, body=forward.body, timeout_s=forward.timeout_s,
                headers={FORWARDED: str(self.broker_id), "Content-Type": "application/json"}))
            return Routed(forward.decode(reply), owner)
        raise CoordinatorNotAvailableError(f"the coordinator of {self._name(key)} is changing: retry")

    def _name(self, key: str) -> str:
        return f"{self._noun} {key!r}" if self._noun else repr(key)
