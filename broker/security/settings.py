"""Security settings of one broker: listeners (Kafka's names), TLS files, authorizer and ZooKeeper credentials.

Why one frozen value: the broker, its HTTP server, its inter-broker sessions and its ZooKeeper client all read
the same choices, and security is opt-in: ``SecuritySettings()`` (no flags) is exactly today's plaintext broker,
so every existing test and script runs unchanged.

Listeners are declared as in Kafka (``listeners``, ``listener.security.protocol.map``,
``inter.broker.listener.name``): ``PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9192``. A listener name maps
to one of PLAINTEXT, SSL (TLS; the principal is the client certificate's subject, or ANONYMOUS), SASL_PLAINTEXT
and SASL_SSL (TLS plus a password or a token, sent as HTTP ``Authorization``). SASL_PLAINTEXT is refused on
these HTTP listeners: a password must never cross the wire in clear (the Kafka listeners, broker/kafka/listeners.py,
serve it as Kafka does, where SCRAM sends no password).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
SECURED = frozenset({"SSL", "SASL_SSL"})


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int
    protocol: str

    @property
    def tls(self) -> bool:
        return self.protocol in SECURED

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def endpoint(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listeners(spec: str, protocol_map: str | None = None) -> list[Listener]:
    """``NAME://HOST:PORT,...`` -> listeners; names not in the map must be protocol names themselves."""
    mapping = {p: p for p in PROTOCOLS}
    if protocol_map:
        for item in protocol_map.split(","):
            name, sep, proto = item.strip().partition(":")
            if not sep or proto.upper() not in PROTOCOLS:
                raise ValueError(f"--listener-security-protocol-map: {item!r} is not NAME:{'|'.join(PROTOCOLS)}")
            mapping[name.upper()] = proto.upper()
    out: list[Listener] = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        name, sep, rest = item.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not port.isdigit():
            raise ValueError(f"--listeners: {item!r} is not NAME://HOST:PORT")
        name = name.upper()
        if name not in mapping:
            raise ValueError(f"--listeners: {name} has no security protocol (add it to "
                             "--listener-security-protocol-map)")
        out.append(Listener(name, host or "127.0.0.1", int(port), mapping[name]))
    if not out:
        raise ValueError("--listeners names no listener")
    if len({lst.name for lst in out}) != len(out) or len({lst.port for lst in out}) != len(out):
        raise ValueError("--listeners: each listener needs its own name and port")
    return out


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    listeners: tuple[Listener, ...] = ()
    inter_broker_listener: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_client_auth: str = "none"  # none | requested | required (Kafka's ssl.client.auth)
    super_users: frozenset[str] = field(default_factory=frozenset)
    # None: "acl" when a listener is secured, else no authorizer (today's open cluster).
    authorizer: str | None = None
    allow_everyone_if_no_acl_found: bool = False
    # A broker's own user, for SASL_SSL inter-broker calls when it has no client certificate.
    inter_broker_user: str | None = None
    inter_broker_password: str | None = None
    # ZooKeeper digest credentials (USER:PASSWORD); with zk_set_acl, every znode we create gets ACLs.
    zk_digest: str | None = None
    zk_set_acl: bool = False
    token_lifetime_ms: int = 15 * 60 * 1000

    @property
    def secured(self) -> bool:
        return any(lst.tls for lst in self.listeners)

    @property
    def authorizer_enabled(self) -> bool:
        return (self.authorizer or ("acl" if self.secured else "none")) == "acl"

    def inter_broker(self) -> Listener | None:
        if not self.listeners:
            return None
        for lst in self.listeners:
            if lst.name == (self.inter_broker_listener or self.listeners[0].name):
                return lst
        raise ValueError(f"--inter-broker-listener-name {self.inter_broker_listener} is not in --listeners")

    def check(self) -> None:
        """Refuse combinations that would silently run less secure than asked."""
        self.inter_broker()
        if self.secured and not (self.ssl_certfile and self.ssl_keyfile):
            raise ValueError("a TLS listener needs --ssl-certfile and --ssl-keyfile")
        if self.ssl_client_auth not in ("none", "requested", "required"):
            raise ValueError("--ssl-client-auth must be none, requested or required")
        if self.ssl_client_auth != "none" and not self.ssl_cafile:
            raise ValueError("--ssl-client-auth needs --ssl-cafile (the CA client certificates are checked against)")
        if self.zk_set_acl and not self.zk_digest:
            raise ValueError("--zk-set-acl needs --zk-digest USER:PASSWORD (or $ODRADEK_ZK_DIGEST)")


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The broker's security flags (docs/security.md)."""
    g = parser.add_argument_group("security (docs/security.md)")
    g.add_argument("--listeners", default=None, help="NAME://HOST:PORT,... e.g. SASL_SSL://127.0.0.1:9092")
    g.add_argument("--listener-security-protocol-map", default=None, help="NAME:PROTOCOL,... (PLAINTEXT|SSL|SASL_SSL)")
    g.add_argument("--inter-broker-listener-name", default=None)
    g.add_argument("--ssl-cafile", default=None)
    g.add_argument("--ssl-certfile", default=None)
    g.add_argument("--ssl-keyfile", default=None)
    g.add_argument("--ssl-client-auth", choices=("none", "requested", "required"), default="none")
    g.add_argument("--super-users", default="", help="User:admin;User:CN=broker (semicolon-separated)")
    g.add_argument("--authorizer", choices=("acl", "none"), default=None)
    g.add_argument("--allow-everyone-if-no-acl-found", choices=("true", "false"), default="false")
    g.add_argument("--inter-broker-user", default=None, help="password in $ODRADEK_INTER_BROKER_PASSWORD")
    g.add_argument("--zk-digest", default=None, help="USER:PASSWORD for ZooKeeper (default $ODRADEK_ZK_DIGEST)")
    g.add_argument("--zk-set-acl", choices=("true", "false"), default="false")
    g.add_argument("--token-lifetime-ms", type=int, default=15 * 60 * 1000)


def from_args(args: argparse.Namespace) -> SecuritySettings:
    listeners = tuple(parse_listeners(args.listeners, args.listener_security_protocol_map)) if args.listeners else ()
    settings = SecuritySettings(
        listeners=listeners,
        inter_broker_listener=(args.inter_broker_listener_name or "").upper() or None,
        ssl_cafile=args.ssl_cafile, ssl_certfile=args.ssl_certfile, ssl_keyfile=args.ssl_keyfile,
        ssl_client_auth=args.ssl_client_auth,
        super_users=frozenset(s.strip() for s in args.super_users.split(";") if s.strip()),
        authorizer=args.authorizer,
        allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found == "true",
        inter_broker_user=args.inter_broker_user,
        inter_broker_password=os.environ.get("ODRADEK_INTER_BROKER_PASSWORD"),
        zk_digest=args.zk_digest or os.environ.get("ODRADEK_ZK_DIGEST"),
        zk_set_acl=args.zk_set_acl == "true",
        token_lifetime_ms=args.token_lifetime_ms,
    )
    settings.check()
    return settings
