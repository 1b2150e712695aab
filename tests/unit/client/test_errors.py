"""The error table is stable: names, codes and statuses never drift, and bodies map back to classes."""

from __future__ import annotations

from odradek.protocol import errors as E


def test_every_error_has_a_unique_name_and_a_valid_status() -> None:
    classes = [E.OdradekError, *E.OdradekError.__subclasses__()]
    seen: set[str] = set()
    stack = list(classes)
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        assert 400 <= cls.http_status < 600
        seen.add(cls.name)
    assert {"NOT_LEADER_OR_FOLLOWER", "NOT_ENOUGH_REPLICAS", "CONTROLLER_MOVED", "BROKER_ID_IN_USE"} <= seen


def test_body_round_trip_prefers_the_name() -> None:
    err = E.ControllerMovedError("deposed", epoch=3)
    body = err.to_json()
    assert body["error_code"] == 50307 and body["error"] == "CONTROLLER_MOVED" and body["epoch"] == 3
    back = E.error_for(body["error"], body["error_code"], body["message"])
    assert type(back) is E.ControllerMovedError and back.retriable
    assert type(E.error_for(None, 40401)) is E.UnknownTopicError
    assert type(E.error_for("NO_SUCH_THING", 12345)) is E.UnknownServerError
