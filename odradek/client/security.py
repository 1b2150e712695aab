"""The client's TLS and credentials options (kafka-python's names where it has them), in one value.

Why a value the transport holds: every request of a client (metadata, produce, fetch, groups, admin) goes through
one ``Transport``, so the CA, the client certificate and the ``Authorization`` header are set in one place.

* ``ssl_cafile``: the CA that signed the brokers' certificates (turns TLS on; so does ``security_protocol``);
  ``ssl_certfile``/``ssl_keyfile``: a client certificate (mutual TLS; the principal is ``User:CN=...``).
* ``sasl_username``/``sasl_password``: a SCRAM user (created with ``odradek configs --alter --add-config
  'SCRAM-SHA-256=[password=...]' --entity-type users --entity-name NAME``), sent as HTTP Basic over TLS;
  ``sasl_token``: a bearer token from ``POST /auth/token`` instead.
* ``security_protocol``: PLAINTEXT, SSL or SASL_SSL (Kafka's names); when TLS is on, every broker URL is
  reached over TLS, whatever scheme the bootstrap string gave.
"""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    security_protocol: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_check_hostname: bool = True
    sasl_username: str | None = None
    sasl_password: str | None = None
    sasl_token: str | None = None

    @staticmethod
    def from_kwargs(options: Mapping[str, Any] | None) -> ClientSecurity | None:
        """Keyword arguments of Producer/Consumer/AdminClient -> a value (None when none was given)."""
        if not options:
            return None
        known = {f.name for f in fields(ClientSecurity)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)} (security options: "
                            f"{', '.join(sorted(known))})")
        sec = ClientSecurity(**options)
        if sec.security_protocol not in (None, "PLAINTEXT", "SSL", "SASL_SSL"):
            raise ValueError("security_protocol must be PLAINTEXT, SSL or SASL_SSL")
        if (sec.sasl_username is None) != (sec.sasl_password is None):
            raise ValueError("give both sasl_username and sasl_password")
        if (sec.sasl_password is not None or sec.sasl_token is not None) and not sec.tls:
            raise ValueError("credentials are only sent over TLS: give ssl_cafile or security_protocol='SASL_SSL'")
        return sec

    @property
    def tls(self) -> bool:
        if self.security_protocol is not None:
            return self.security_protocol in ("SSL", "SASL_SSL")
        return bool(self.ssl_cafile or self.ssl_certfile)

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ssl_cafile)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = self.ssl_check_hostname
        if self.ssl_certfile:
            ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return ctx

    def authorization(self) -> str | None:
        if self.sasl_token:
            return f"Bearer {self.sasl_token}"
        if self.sasl_username is not None:
            raw = f"{self.sasl_username}:{self.sasl_password}".encode()
            return "Basic " + base64.b64encode(raw).decode()
        return None


ENV_OPTIONS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "sasl_username", "sasl_password", "sasl_token")


def security_from_env() -> dict[str, str]:
    """The options from ODRADEK_SSL_CAFILE, ODRADEK_SSL_CERTFILE, ODRADEK_SSL_KEYFILE, ODRADEK_SASL_USERNAME,
    ODRADEK_SASL_PASSWORD and ODRADEK_SASL_TOKEN, for tools and scripts: the environment, so no password
    appears in a command line that ps shows. Pass them on explicitly (``Producer(url, **security_from_env())``);
    the client itself never reads the environment."""
    return {n: os.environ[f"ODRADEK_{n.upper()}"] for n in ENV_OPTIONS if os.environ.get(f"ODRADEK_{n.upper()}")}
