"""The ZooKeeper ensemble as its servers describe themselves: each member's ``srvr`` four-letter word (the one
that ZooKeeper whitelists by default, as zkServer.sh status uses it), for the console and operators.

Why not kazoo: a client session talks to one server and cannot say who leads; ``srvr`` asks each member of the
connect string directly, over a plain socket, and each answers its mode (leader, follower, standalone), its
last zxid and its load. A member that does not answer, or refuses the word, is reported as such, never
guessed. Blocking: callers on an event loop run it in a thread.
"""

from __future__ import annotations

import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ServerStatus", "ensemble_status", "four_letter_word", "parse_srvr", "servers_of"]


@dataclass(frozen=True, slots=True)
class ServerStatus:
    server: str  # host:port, as the connect string names it
    mode: str | None = None  # leader, follower, observer, standalone; None when it did not say
    zxid: str | None = None
    connections: int | None = None
    outstanding: int | None = None
    latency_ms: str | None = None  # min/avg/max
    version: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def servers_of(connect: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of a connect string (``h1:p1,h2:p2/chroot``; the port defaults to 2181)."""
    hosts = connect.split("/", 1)[0]
    out = []
    for part in hosts.split(","):
        part = part.strip()
        if not part:
            continue
        host, _, port = part.rpartition(":") if ":" in part else (part, "", "2181")
        out.append((host.strip("[]"), int(port)))
    return out


def parse_srvr(server: str, text: str) -> ServerStatus:
    """A ``srvr`` answer: ``Key: value`` lines (``Mode``, ``Zxid``, ``Connections``, ``Outstanding``,
    ``Latency min/avg/max``, ``Zookeeper version``); anything else (a refusal) is the error."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip().lower()] = value.strip()
    if "mode" not in fields:
        return ServerStatus(server, error=text.strip()[:200] or "no answer")

    def number(key: str) -> int | None:
        raw = fields.get(key)
        return int(raw) if raw is not None and raw.isdigit() else None

    return ServerStatus(server, mode=fields["mode"], zxid=fields.get("zxid"), connections=number("connections"),
                        outstanding=number("outstanding"), latency_ms=fields.get("latency min/avg/max"),
                        version=fields.get("zookeeper version", "").split(",")[0] or None)


def four_letter_word(host: str, port: int, cmd: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command over a plain socket and return the whole reply (the server closes
    the connection after replying, so it is read to EOF, within ``timeout`` in all)."""
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(cmd.encode("ascii"))
        while True:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = sock.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def ensemble_status(connect: str, timeout_s: float = 2.0) -> list[ServerStatus]:
    """Each member's status, in the connect string's order."""
    out = []
    for host, port in servers_of(connect):
        server = f"{host}:{port}"
        try:
            out.append(parse_srvr(server, four_letter_word(host, port, "srvr", timeout_s)))
        except OSError as e:
            out.append(ServerStatus(server, error=f"no answer: {e}"))
    return out
