"""What the kernel knows about a test's TCP connections: conditions to wait on instead of sleeping.

Why: some tests need a request to be *in a certain place* before they act ("queued at a frozen leader",
"read by the broker, so its long-poll is parked"), and the only alternative used to be a fixed sleep. Linux
shows every TCP socket in /proc/net/tcp with its unread (rx) and unsent (tx) byte counts, and /proc/<pid>/fd
says which process holds which socket, which is enough to wait on exactly that.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ESTABLISHED = 0x01


@dataclass(frozen=True, slots=True)
class TcpSocket:
    local_port: int
    remote_port: int
    state: int
    tx_queue: int
    rx_queue: int  # bytes received and not yet read by the owning process
    inode: int


def tcp_sockets() -> list[TcpSocket]:
    """Every IPv4 TCP socket of this network namespace (loopback tests only use IPv4)."""
    out: list[TcpSocket] = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, queues, inode = fields[1], fields[2], fields[3], fields[4], fields[9]
        tx, rx = queues.split(":")
        out.append(TcpSocket(int(local.split(":")[1], 16), int(remote.split(":")[1], 16), int(state, 16),
                             int(tx, 16), int(rx, 16), int(inode)))
    return out


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets process ``pid`` holds open (empty if it is gone)."""
    inodes: set[int] = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def unread_at_server(client_port: int, server_port: int) -> int | None:
    """Bytes a client (on ``client_port``) sent that the server (on ``server_port``) has not read yet; None when
    the server side of that connection is not there (not yet accepted counts as there: the kernel holds it)."""
    for s in tcp_sockets():
        if s.local_port == server_port and s.remote_port == client_port and s.state == ESTABLISHED:
            return s.rx_queue
    return None
