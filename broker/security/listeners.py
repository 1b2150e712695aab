"""What a broker binds, what it registers in ZooKeeper, and how it identifies itself to other brokers.

Why apart from server.py: the listener rules (one socket per declared listener, TLS on SSL and SASL_SSL ones,
the registration's ``endpoints`` and ``listener_security_protocol_map`` written truthfully, the registered
host:port being the inter-broker listener's) are security decisions, kept next to the other ones.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

from broker.security.authn import basic_header
from broker.security.settings import SecuritySettings
from broker.security.tls import server_context
from odradek.protocol.model import BrokerInfo

if TYPE_CHECKING:
    from broker.config import BrokerConfig


def listener_sites(config: BrokerConfig) -> list[tuple[str, int, ssl.SSLContext | None]]:
    """(host, port, TLS context or None) per listener; a broker without --listeners has its one plaintext one."""
    sec = config.security
    if not sec.listeners:
        return [(config.host, config.port, None)]
    tls = server_context(sec) if sec.secured else None
    return [(lst.host, lst.port, tls if lst.tls else None) for lst in sec.listeners]


def kafka_server_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The TLS context of the SSL and SASL_SSL Kafka listeners: the HTTPS listeners' (same certificate, CA and
    ``ssl.client.auth``), so a client trusts one CA and presents one certificate on either door."""
    if not any(lst.tls for lst in config.kafka_listeners):
        return None
    return server_context(config.security)


def registration(broker_id: int, config: BrokerConfig, timestamp_ms: int) -> BrokerInfo:
    """``/brokers/ids/<id>``: the inter-broker listener's address (https when it is TLS), and every endpoint."""
    host, port = config.advertised_address()
    sec = config.security
    inter = sec.inter_broker()
    if inter is None:
        return BrokerInfo(broker_id, host, port, config.rack, timestamp_ms)
    endpoints = tuple(((f"{lst.name}://{host}:{port}" if lst is inter else lst.endpoint), lst.protocol)
                      for lst in sec.listeners)
    return BrokerInfo(broker_id, host, port, config.rack, timestamp_ms, scheme=inter.scheme, endpoints=endpoints)


def inter_broker_headers(sec: SecuritySettings) -> dict[str, str] | None:
    """HTTP Basic for the broker's own user on a SASL_SSL inter-broker listener (else its certificate speaks)."""
    inter = sec.inter_broker()
    if inter is None or inter.protocol != "SASL_SSL" or not sec.inter_broker_user:
        return None
    return {"Authorization": basic_header(sec.inter_broker_user, sec.inter_broker_password or "")}
