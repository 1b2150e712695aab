"""``--kafka-listeners`` and ``--kafka-advertised-listeners``: Kafka's ``listeners`` / ``advertised.listeners``.

Syntax as in Kafka: ``NAME://HOST:PORT[,NAME://HOST:PORT...]``. Without a security-protocol map, a listener's
name is its security protocol (Kafka's default map), so the name must be one of Kafka's protocols; only
PLAINTEXT is served so far, and anything else is refused at startup with a one-line reason rather than served
less securely than asked. An empty host binds 127.0.0.1 (the project's servers never bind every interface by
default). Advertised listeners default to the listeners; each advertised name must be a listener's name, and an
advertised host must be one clients can reach (never ``0.0.0.0``).
"""

from __future__ import annotations

from dataclasses import dataclass

KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED_PROTOCOLS = ("PLAINTEXT",)


@dataclass(frozen=True, slots=True)
class KafkaListener:
    name: str
    host: str
    port: int
    security_protocol: str

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_kafka_listeners(spec: str, flag: str = "--kafka-listeners") -> tuple[KafkaListener, ...]:
    """``spec`` as listeners; ValueError with a one-line reason naming ``flag`` when it is not acceptable."""
    out: list[KafkaListener] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        name, sep, rest = item.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{flag}: {item!r} is not NAME://HOST:PORT (e.g. PLAINTEXT://127.0.0.1:9092)")
        name = name.upper()
        if name not in KAFKA_PROTOCOLS:
            raise ValueError(f"{flag}: listener {name} names no security protocol; supported: "
                             f"{', '.join(SUPPORTED_PROTOCOLS)}")
        if name not in SUPPORTED_PROTOCOLS:
            raise ValueError(f"{flag}: security protocol {name} is not supported on the Kafka listener yet; "
                             f"supported: {', '.join(SUPPORTED_PROTOCOLS)}")
        out.append(KafkaListener(name, host.strip("[]") or "127.0.0.1", int(port), name))
    if not out:
        raise ValueError(f"{flag} names no listener")
    if len({lst.name for lst in out}) != len(out) or len({lst.port for lst in out}) != len(out):
        raise ValueError(f"{flag}: each listener needs its own name and port")
    return tuple(out)


def advertised(listeners: tuple[KafkaListener, ...],
               advertised_spec: str | None) -> tuple[KafkaListener, ...]:
    """The endpoints registered in ZooKeeper: ``advertised_spec`` (checked against ``listeners``), else the
    listeners themselves."""
    if not advertised_spec:
        chosen = listeners
    else:
        if not listeners:
            raise ValueError("--kafka-advertised-listeners needs --kafka-listeners")
        chosen = parse_kafka_listeners(advertised_spec, "--kafka-advertised-listeners")
        names = {lst.name for lst in listeners}
        for lst in chosen:
            if lst.name not in names:
                raise ValueError(f"--kafka-advertised-listeners: {lst.name} is not a listener in --kafka-listeners")
    for lst in chosen:
        if lst.host in ("0.0.0.0", "::"):
            raise ValueError(f"advertised Kafka listener {lst} is not an address clients can reach; "
                             "give --kafka-advertised-listeners")
    return chosen
