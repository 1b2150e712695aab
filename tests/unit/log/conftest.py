"""Every log a test here opens is closed at its end (its file handles released without sealing, as a crash
would leave them): without it the suite's process collected some 700 descriptors from these files alone."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from broker.log.log import Log


@pytest.fixture(autouse=True)
def close_opened_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    opened: list[Log] = []
    real_open = Log.open

    def tracked_open(*args: Any, **kwargs: Any) -> Log:
        log = real_open(*args, **kwargs)
        opened.append(log)
        return log

    monkeypatch.setattr(Log, "open", tracked_open)
    yield
    for log in opened:
        with contextlib.suppress(Exception):
            log.close_handlers()
