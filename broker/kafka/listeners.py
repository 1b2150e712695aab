"""``--kafka-listeners``, ``--kafka-listener-security-protocol-map`` and ``--kafka-advertised-listeners``: Kafka's
``listeners``, ``listener.security.protocol.map`` and ``advertised.listeners``.

Syntax as in Kafka: ``NAME://HOST:PORT[,NAME://HOST:PORT...]``. A listener's name maps to one of Kafka's security
protocols (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL): through the map (``NAME:PROTOCOL,...``) when given, else the
name must be a protocol's own name (Kafka's default map, which the given map extends rather than replaces). A
name with no protocol is refused at startup with a one-line reason, never served less securely than asked; so is
a TLS listener (SSL, SASL_SSL) on a broker without a certificate (``check_tls``). An empty host binds 127.0.0.1
(the project's servers never bind every interface by default). Advertised listeners default to the listeners;
each advertised name must be a listener's name (and takes that listener's protocol), and an advertised host must
be one clients can reach (never ``0.0.0.0``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.security.settings import SecuritySettings

KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED_PROTOCOLS = KAFKA_PROTOCOLS
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


@dataclass(frozen=True, slots=True)
class KafkaListener:
    name: str
    host: str
    port: int
    security_protocol: str

    @property
    def tls(self) -> bool:
        """Connections are TLS (SSL, SASL_SSL)."""
        return self.security_protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        """A connection must authenticate with SASL before any request but ApiVersions and SaslHandshake."""
        return self.security_protocol in SASL_PROTOCOLS

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_protocol_map(spec: str | None, flag: str = "--kafka-listener-security-protocol-map") -> dict[str, str]:
    """Kafka's default map (each protocol names itself) extended by ``spec`` (``NAME:PROTOCOL,...``)."""
    mapping = {p: p for p in KAFKA_PROTOCOLS}
    for item in (s.strip() for s in (spec or "").split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in KAFKA_PROTOCOLS:
            raise ValueError(f"{flag}: {item!r} is not NAME:PROTOCOL (PROTOCOL one of {', '.join(KAFKA_PROTOCOLS)})")
        if name in KAFKA_PROTOCOLS and protocol != name:
            raise ValueError(f"{flag}: {name} is a security protocol's name and cannot map to {protocol}")
        mapping[name] = protocol
    return mapping


def parse_kafka_listeners(spec: str, flag: str = "--kafka-listeners",
                          protocol_map: dict[str, str] | None = None) -> tuple[KafkaListener, ...]:
    """``spec`` as listeners; ValueError with a one-line reason naming ``flag`` when it is not acceptable."""
    mapping = protocol_map if protocol_map is not None else parse_protocol_map(None)
    out: list[KafkaListener] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        name, sep, rest = item.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{flag}: {item!r} is not NAME://HOST:PORT (e.g. PLAINTEXT://127.0.0.1:9092)")
        name = name.upper()
        protocol = mapping.get(name)
        if protocol is None:
            raise ValueError(f"{flag}: listener {name} names no security protocol; name one of "
                             f"{', '.join(SUPPORTED_PROTOCOLS)} or map it with "
                             "--kafka-listener-security-protocol-map")
        out.append(KafkaListener(name, host.strip("[]") or "127.0.0.1", int(port), protocol))
    if not out:
        raise ValueError(f"{flag} names no listener")
    if len({lst.name for lst in out}) != len(out) or len({lst.port for lst in out}) != len(out):
        raise ValueError(f"{flag}: each listener needs its own name and port")
    return tuple(out)


def check_tls(listeners: tuple[KafkaListener, ...], security: SecuritySettings) -> None:
    """A TLS listener serves the broker's certificate (the HTTPS listeners' ``--ssl-certfile``/``--ssl-keyfile``);
    ValueError when there is none."""
    tls = [str(lst) for lst in listeners if lst.tls]
    if tls and not (security.ssl_certfile and security.ssl_keyfile):
        raise ValueError(f"--kafka-listeners: {', '.join(tls)} needs --ssl-certfile and --ssl-keyfile")


def advertised(listeners: tuple[KafkaListener, ...], advertised_spec: str | None) -> tuple[KafkaListener, ...]:
    """The endpoints registered in ZooKeeper: ``advertised_spec`` (checked against ``listeners``, whose protocols
    the advertised names take), else the listeners themselves."""
    if not advertised_spec:
        chosen = listeners
    else:
        if not listeners:
            raise ValueError("--kafka-advertised-listeners needs --kafka-listeners")
        protocols = {lst.name: lst.security_protocol for lst in listeners}
        chosen = parse_kafka_listeners(advertised_spec, "--kafka-advertised-listeners",
                                       {**parse_protocol_map(None), **protocols})
        for lst in chosen:
            if lst.name not in protocols:
                raise ValueError(f"--kafka-advertised-listeners: {lst.name} is not a listener in --kafka-listeners")
    for lst in chosen:
        if lst.host in ("0.0.0.0", "::"):
            raise ValueError(f"advertised Kafka listener {lst} is not an address clients can reach; "
                             "give --kafka-advertised-listeners")
    return chosen
