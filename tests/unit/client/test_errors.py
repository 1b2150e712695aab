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


def test_the_error_table_is_one_module_and_complete_on_its_own() -> None:
    """Every typed error is declared in odradek.protocol.errors (one table, mapped once at each front door), and
    importing that module alone registers all of them: a fresh interpreter imports the whole server and client
    afterwards and finds no error class declared anywhere else."""
    import subprocess
    import sys

    code = (
        "import odradek.protocol.errors as e\n"
        "def every(c):\n"
        "    for s in c.__subclasses__():\n"
        "        yield s\n"
        "        yield from every(s)\n"
        "before = set(every(e.OdradekError))\n"
        "assert type(e.error_for('TOPIC_AUTHORIZATION_FAILED', None)).__name__ == 'TopicAuthorizationFailedError'\n"
        "assert type(e.error_for('POLICY_VIOLATION', None)).__name__ == 'PolicyViolationError'\n"
        "import broker.server, broker.kafka.apis, odradek.client, odradek_tools.cli, consumer_coordinator, "
        "transaction_coordinator\n"
        "after = set(every(e.OdradekError))\n"
        "outside = sorted(f'{c.__module__}.{c.__name__}' for c in after - before)\n"
        "assert not outside, outside\n"
        "assert all(c.__module__ == 'odradek.protocol.errors' for c in before)\n"
        "print(len(before))\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert int(out) > 80
