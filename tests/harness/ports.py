"""Port blocks for tests: every server binds 127.0.0.1 on ports nobody else uses in this run."""

from __future__ import annotations

import itertools
import os
import random
import socket

from odradek_local.cluster import listen_port_range

_taken: set[int] = set()
_LOW, _HIGH = listen_port_range()
_rng = random.Random(os.getpid())


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(count: int, *, span: int | None = None) -> int:
    """A base port such that base .. base+span-1 are all free (span defaults to count)."""
    span = span or count
    for _ in itertools.count():
        base = _rng.randrange(_LOW, _HIGH - span)
        ports = range(base, base + span)
        if any(p in _taken for p in ports):
            continue
        if all(_bindable(p) for p in ports):
            _taken.update(ports)
            return base
    raise AssertionError("unreachable")
