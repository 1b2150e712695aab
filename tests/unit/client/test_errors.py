"""The error table is stable: names, codes and statuses never drift, and bodies map back to classes."""

from __future__ import annotations

import pytest

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


@pytest.mark.parametrize("module", ["odradek.protocol.security_errors", "odradek.protocol.limit_errors",
                                    "odradek.protocol.errors"])
def test_every_error_module_can_be_imported_first(module: str) -> None:
    """A fresh interpreter importing any of the error modules first gets the whole table (it was a cycle)."""
    import subprocess
    import sys

    code = (f"import {module}\nfrom odradek.protocol.errors import error_for\n"
            "assert type(error_for('TOPIC_AUTHORIZATION_FAILED', None)).__name__ == 'TopicAuthorizationFailedError'\n"
            "assert type(error_for('POLICY_VIOLATION', None)).__name__ == 'PolicyViolationError'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
