"""The application factory takes what its middlewares need explicitly (the request limits, security, quotas), so
a broker double carries only what the handlers under test use."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
from aiohttp.test_utils import TestClient, TestServer

from broker.api.app import READ_BUDGET, create_app
from broker.api.context import BROKER
from broker.api.params import LIMITS
from broker.config import BrokerConfig
from broker.security.middleware import SECURITY
from tests.unit.fakes.metrics import null_metrics


def _broker() -> Any:
    return SimpleNamespace(metrics=null_metrics(),
                           cache=SimpleNamespace(brokers={2: object(), 1: object()}))


def test_the_app_uses_the_config_and_services_it_is_given() -> None:
    config = BrokerConfig(1, "zk:2181", "127.0.0.1", 9092, Path("."), queued_max_request_bytes=12345)
    broker = _broker()
    app = create_app(broker, config=config, security=None, quotas=None, client_max_size=1024)
    assert app[BROKER] is broker and app[LIMITS] is config and app[SECURITY] is None
    assert app[READ_BUDGET].limit == 12345

    async def call() -> tuple[int, Any]:
        async with TestClient(TestServer(app)) as client:
            resp = await client.get("/brokers")
            return resp.status, orjson.loads(await resp.read())

    assert asyncio.run(call()) == (200, {"brokers": [1, 2]})


def test_one_middleware_runs_the_checks_and_awaits_the_handler_directly_when_security_and_quotas_are_off() -> None:
    from broker.api import app as app_module

    config = BrokerConfig(1, "zk:2181", "127.0.0.1", 9092, Path("."))
    app = create_app(_broker(), config=config, security=None, quotas=None)
    assert list(app.middlewares) == [app_module.front_middleware]
    request = SimpleNamespace(app=app)
    answer = object()
    assert app_module._allowed(request, lambda r: answer) is answer  # type: ignore[arg-type]  # no frame between

    class Quotas:
        def __init__(self, on: bool) -> None:
            self.on = on

        def active(self) -> bool:
            return self.on

    app[app_module.CLIENT_QUOTAS] = Quotas(False)  # type: ignore[assignment]
    assert app_module._allowed(request, lambda r: answer) is answer  # type: ignore[arg-type]
    app[app_module.CLIENT_QUOTAS] = Quotas(True)  # type: ignore[assignment]
    metered = app_module._allowed(request, lambda r: answer)  # type: ignore[arg-type]
    assert metered is not answer and metered.__qualname__ == "metered"  # type: ignore[attr-defined]
    metered.close()  # type: ignore[attr-defined]
