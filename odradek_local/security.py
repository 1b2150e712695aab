"""Security for ``odradek cluster up --tls`` and the tests: a throwaway CA, and the brokers' security flags.

A local TLS cluster listens on SASL_SSL with client certificates requested: brokers present their own
certificate (``User:CN=broker-<id>``, a super user, so inter-broker calls carry ClusterAction), users present a
password, a token or a certificate. ``User:CN=admin`` (``<data-dir>/tls/admin.pem``) is a super user too, for
the operator's tools. Its Kafka listeners are SASL_SSL too, with the same certificates (the broker's
``--ssl-*`` flags serve both doors): Kafka clients trust ``<data-dir>/tls/ca.pem`` and log in with PLAIN or
SCRAM-SHA-256/512 as a user made with ``odradek configs``. Keys live in ``<data-dir>/tls`` (``.odradek/`` is
git-ignored) and never anywhere else.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from broker.security.tls import client_context, make_local_pki

if TYPE_CHECKING:
    from odradek_local.cluster import LocalCluster

ADMIN = "admin"


def tls_dir(cluster: LocalCluster) -> Path:
    return cluster.data_dir / "tls"


def broker_name(broker_id: int) -> str:
    return f"broker-{broker_id}"


def ensure_local_pki(cluster: LocalCluster) -> None:
    """Make the CA and certificates once per data directory (``up`` after ``down`` reuses them)."""
    names = [broker_name(b) for b in cluster.slots] + [ADMIN]
    directory = tls_dir(cluster)
    if (directory / "ca.pem").exists() and all((directory / f"{n}.pem").exists() for n in names):
        return
    make_local_pki(directory, names)


def local_security_args(cluster: LocalCluster, broker_id: int) -> list[str]:
    if not cluster.tls:
        return ["--zk-set-acl", "true"] if cluster.zk_digest else []
    d = tls_dir(cluster)
    port = cluster.slots[broker_id].port
    supers = ";".join([f"User:CN={broker_name(b)}" for b in sorted(cluster.slots)] + [f"User:CN={ADMIN}"])
    return [
        "--listeners", f"SASL_SSL://127.0.0.1:{port}",
        "--ssl-cafile", str(d / "ca.pem"),
        "--ssl-certfile", str(d / f"{broker_name(broker_id)}.pem"),
        "--ssl-keyfile", str(d / f"{broker_name(broker_id)}.key"),
        "--ssl-client-auth", "requested",
        "--super-users", supers,
        *(["--zk-set-acl", "true"] if cluster.zk_digest else []),
    ]  # fmt: skip


def admin_files(cluster: LocalCluster) -> dict[str, str]:
    d = tls_dir(cluster)
    return {"ssl_cafile": str(d / "ca.pem"), "ssl_certfile": str(d / f"{ADMIN}.pem"),
            "ssl_keyfile": str(d / f"{ADMIN}.key")}


def local_client_context(cluster: LocalCluster) -> ssl.SSLContext | None:
    """The operator's context (CA + admin certificate) on a TLS cluster; None on a plaintext one."""
    if not cluster.tls:
        return None
    files = admin_files(cluster)
    return client_context(files["ssl_cafile"], files["ssl_certfile"], files["ssl_keyfile"])
