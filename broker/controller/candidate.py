"""A broker's candidacy for controller, through kazoo's Election recipe.

Why a thread: ``Election.run`` blocks until this broker wins and holds the lock for as long as the function it
calls keeps running. So one thread campaigns: when it wins it signals the controller's event queue
(``on_elected``) and then waits until the broker asks it to let go (``release``): on resignation, on losing the
ZooKeeper session, or on shutdown. Returning releases the lock, and the thread campaigns again unless the
broker is stopping. The controller itself never runs here: it runs on the broker's event loop.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from zk.client import ControllerElection, ZkClient

log = logging.getLogger(__name__)


class ControllerCandidate:
    """Thread-safe: ``release`` and ``stop`` may be called from any thread."""

    def __init__(self, zk: ZkClient, broker_id: int, on_elected: Callable[[], None]) -> None:
        self._zk = zk
        self._broker_id = broker_id
        self._on_elected = on_elected
        self._release = threading.Event()
        self._stopping = threading.Event()
        self._election: ControllerElection | None = None
        self._thread = threading.Thread(target=self._campaign, name=f"controller-candidate-{broker_id}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def release(self) -> None:
        """Give up the lock if held (the controller has resigned); campaign again afterwards."""
        self._release.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._release.set()
        election = self._election
        if election is not None:
            with contextlib.suppress(Exception):
                election.cancel()
        self._thread.join(timeout)

    def _lead(self) -> None:
        if self._stopping.is_set():
            return
        self._release.clear()
        self._on_elected()
        self._release.wait()

    def _campaign(self) -> None:
        while not self._stopping.is_set():
            self._election = self._zk.controller_election(str(self._broker_id))
            try:
                self._election.run(self._lead)
            except Exception as e:  # connection loss while acquiring or releasing: campaign again
                if self._stopping.is_set():
                    return
                log.info("controller candidacy of broker %d interrupted (%s); retrying", self._broker_id, e)
                time.sleep(0.2)
