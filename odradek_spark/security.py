"""The connector's TLS and credentials options, with Kafka's names (docs/security.md, "Spark").

Why Kafka's names: a job written for Spark's Kafka source sets ``kafka.security.protocol``,
``kafka.ssl.truststore.location`` and ``kafka.sasl.jaas.config``; the same options work here, mapped onto the
Python client's (odradek/client/security.py). Certificates and keys are PEM files (Kafka's
``ssl.keystore.type=PEM``); Java keystores (JKS, PKCS12) are refused with a clear message.

The parsed options are a tuple of pairs, so the reader and writer option values stay hashable and pickle small
to Spark's Python workers; ``client_kwargs`` turns them into the client's keyword arguments.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from odradek.client.security import ClientSecurity

SecurityPairs = tuple[tuple[str, str], ...]

# option (lower-cased, with or without the "kafka." prefix) -> client keyword
_DIRECT = {
    "security.protocol": "security_protocol",
    "ssl.truststore.location": "ssl_cafile",
    "ssl.cafile": "ssl_cafile",
    "ssl.keystore.location": "ssl_certfile",
    "ssl.certfile": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.keyfile": "ssl_keyfile",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "sasl.token": "sasl_token",
}
_JAAS = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN", "OAUTHBEARER")


class SecurityOptionError(ValueError):
    pass


def parse_security(opts: Mapping[str, str]) -> SecurityPairs:
    """Lower-cased Spark options -> the client's security keywords (checked by ``ClientSecurity``)."""
    out: dict[str, str] = {}
    for key, value in opts.items():
        bare = key.removeprefix("kafka.")
        if bare in _DIRECT:
            out[_DIRECT[bare]] = value.upper() if bare == "security.protocol" else value
        elif bare in ("ssl.truststore.type", "ssl.keystore.type") and value.upper() != "PEM":
            raise SecurityOptionError(f"option '{key}': only PEM files are supported, not {value}")
        elif bare == "sasl.mechanism" and value.upper() not in _MECHANISMS:
            raise SecurityOptionError(f"option '{key}' must be one of {', '.join(_MECHANISMS)}")
        elif bare == "sasl.jaas.config":
            found = dict(_JAAS.findall(value))
            if "username" not in found or "password" not in found:
                raise SecurityOptionError(f"option '{key}' names no username and password")
            out["sasl_username"], out["sasl_password"] = found["username"], found["password"]
    try:
        ClientSecurity.from_kwargs(out)
    except (TypeError, ValueError) as e:
        raise SecurityOptionError(f"security options: {e}") from None
    return tuple(sorted(out.items()))


def client_kwargs(pairs: SecurityPairs) -> dict[str, str]:
    return dict(pairs)


def client_security(pairs: SecurityPairs) -> ClientSecurity | None:
    return ClientSecurity.from_kwargs(dict(pairs))
