"""The broker's security service and the one middleware that authenticates and authorizes every request.

Why here and not in the handlers: each route's need is declared once (broker/security/acl_table.py) and
enforced once, before the handler runs, so no handler can forget a check. The middleware sits after the limits
middleware (the body, if any, has been read within the size and time limits) and before the handler.

Forwarding: a broker that forwards a REST consumer-instance call to the broker holding the instance sends the
caller's principal in ``Odradek-Principal``; the holder believes that header only from a principal allowed
ClusterAction (another broker), so instance ownership holds across brokers and a client cannot claim to be
someone else.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from broker.security import acl_table
from broker.security.authn import ANONYMOUS, Authenticator, TokenSigner
from broker.security.authorizer import CLUSTER_NAME, AclCache, Authorizer
from broker.security.settings import Listener, SecuritySettings
from broker.security.tls import peer_principal
from odradek.protocol.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    OdradekError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnknownServerError,
)

if TYPE_CHECKING:
    from zk.client import ZkClient

log = logging.getLogger(__name__)

PRINCIPAL_HEADER = "Odradek-Principal"
PRINCIPAL_KEY: web.RequestKey[str] = web.RequestKey("principal", str)
# Set by the limits middleware: the handler reads the body, not us.
BODY_STREAMED: web.RequestKey[bool] = web.RequestKey("body_streamed", bool)
_DENIED: dict[str, type[OdradekError]] = {
    "Topic": TopicAuthorizationFailedError, "Group": GroupAuthorizationFailedError,
    "Cluster": ClusterAuthorizationFailedError, "TransactionalId": TransactionalIdAuthorizationFailedError,
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class SecurityService:
    """Per broker: listeners by port, the authenticator, the authorizer and its ACL cache, instance owners."""

    def __init__(self, settings: SecuritySettings, zk: ZkClient | None) -> None:
        self.settings = settings
        self.by_port: dict[int, Listener] = {lst.port: lst for lst in settings.listeners}
        self.authorizer = Authorizer(settings.super_users, settings.allow_everyone_if_no_acl_found)
        self.enforce = settings.authorizer_enabled
        self._zk = zk
        self.authenticator = Authenticator(self._lookup_credentials, None)
        self.owners: dict[tuple[str, str], str] = {}  # (group, instance) -> principal that created it
        self._cache: AclCache | None = None
        self._task: asyncio.Task[None] | None = None

    def _lookup_credentials(self, user: str) -> dict[str, str]:
        from zk.configs import EntityConfigs

        assert self._zk is not None
        return EntityConfigs(self._zk).describe("users", user)

    async def start(self) -> None:
        """Load ACLs and the token key from ZooKeeper; keep the ACLs current (watch)."""
        from zk.acls import AclStore

        assert self._zk is not None
        store = AclStore(self._zk)
        key = await asyncio.to_thread(store.get_or_create_token_key, os.urandom(32))
        self.authenticator.signer = TokenSigner(key, self.settings.token_lifetime_ms)
        self._cache = AclCache(self.authorizer, store)
        await self._cache.load()
        self._task = asyncio.create_task(self._cache.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    # ------------------------------------------------------------------------------------------- requests

    def listener_of(self, request: web.Request) -> Listener | None:
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        return self.by_port.get(sock[1]) if sock else None

    async def authenticate(self, request: web.Request, listener: Listener | None) -> str:
        header = request.headers.get("Authorization")
        tls = listener is not None and listener.tls
        if header:
            if not tls:
                raise AuthenticationFailedError("credentials are refused on a plaintext listener; use TLS")
            if self.authenticator.needs_thread(header):
                return await asyncio.to_thread(self.authenticator.from_header, header)
            return self.authenticator.from_header(header)
        cert = peer_principal(request.transport.get_extra_info("peercert")) if tls and request.transport else None
        if cert is not None:
            return cert
        if listener is not None and listener.protocol == "SASL_SSL":
            raise AuthenticationFailedError("authentication required: HTTP Basic (a SCRAM user), a bearer token "
                                            "from POST /auth/token, or a client certificate")
        return ANONYMOUS

    def allowed(self, principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
        return not self.enforce or self.authorizer.authorize(principal, host, operation, resource_type, name)

    def check(self, principal: str, host: str, need: acl_table.Need, names: list[str]) -> None:
        if need.or_cluster and self.allowed(principal, host, need.operation, "Cluster", CLUSTER_NAME):
            return
        for name in names:
            if not self.allowed(principal, host, need.operation, need.resource_type, name):
                raise _DENIED[need.resource_type](
                    f"{principal} is not allowed {need.operation} on {need.resource_type}:{name}")

    def is_broker(self, principal: str, host: str) -> bool:
        """A broker's principal: a super user, or granted ClusterAction on the cluster by an ACL of the enforced
        authorizer. Never by default: under ``allow.everyone.if.no.acl.found`` with no cluster ACL at all,
        ``allowed`` would say yes to everyone, and everyone could then speak for someone else or skip quotas."""
        authorizer = self.authorizer
        if principal in authorizer.super_users:
            return True
        return (self.enforce and bool(authorizer.matching("Cluster", CLUSTER_NAME))
                and authorizer.authorize(principal, host, "ClusterAction", "Cluster", CLUSTER_NAME))

    def effective_principal(self, request: web.Request, principal: str, host: str) -> str:
        claimed = request.headers.get(PRINCIPAL_HEADER)
        if claimed and self.is_broker(principal, host):
            return claimed
        return principal


SECURITY: web.AppKey[SecurityService | None] = web.AppKey("security", object)  # type: ignore[arg-type]


def forwarded_identity(request: web.Request) -> dict[str, str]:
    """Headers a broker adds when it forwards a request on a caller's behalf (its principal, if any)."""
    principal = request.get(PRINCIPAL_KEY)
    return {PRINCIPAL_HEADER: principal} if principal else {}


async def guarded(service: SecurityService, request: web.Request, handler: Handler) -> web.StreamResponse:
    """``handler``'s answer once the caller is authenticated and authorized for the route (its rule in
    broker/security/acl_table.py); the body is read first when the rule names resources from it."""
    resource = request.match_info.route.resource
    if resource is None:
        return await handler(request)  # no route: the 404/405 answer reveals nothing
    rule = acl_table.lookup(request.method, resource.canonical)
    if rule is None:
        log.error("route %s %s has no rule in broker/security/acl_table.py: refused", request.method,
                  resource.canonical)
        raise UnknownServerError("this route has no authorization rule")
    rule = rule.resolve(request)
    if rule.public:
        return await handler(request)
    listener = service.listener_of(request)
    host = request.remote or "*"
    principal = await service.authenticate(request, listener)
    principal = service.effective_principal(request, principal, host)
    request[PRINCIPAL_KEY] = principal
    streamed = request.get(BODY_STREAMED, False)  # such a route's rule names resources from its path only
    body = acl_table.Body(await request.read() if rule.needs and request.body_exists and not streamed else b"")
    for need in rule.needs:
        service.check(principal, host, need, need.names(request, body))
    key = (request.match_info.get("group", ""), request.match_info.get("instance", ""))
    if rule.owner_checked:
        owner = service.owners.get(key)
        if owner is not None and owner != principal and principal not in service.authorizer.super_users:
            raise GroupAuthorizationFailedError(f"consumer instance {key[1]} belongs to another principal")
    response = await handler(request)
    if request.method == "POST" and resource.canonical == "/consumers/{group}" and response.status == 200:
        _remember_owner(service, key[0], response, principal)
    elif request.method == "DELETE" and rule.owner_checked and response.status < 300 and "instance" in \
            request.match_info and resource.canonical.endswith("{instance}"):
        service.owners.pop(key, None)
    return response


def _remember_owner(service: SecurityService, group: str, response: web.StreamResponse, principal: str) -> None:
    body = getattr(response, "body", None)
    data = acl_table.body_json(bytes(body)) if isinstance(body, (bytes, bytearray)) else None
    if isinstance(data, dict) and isinstance(data.get("instance_id"), str):
        service.owners[(group, data["instance_id"])] = principal


async def issue_token(request: web.Request) -> web.Response:
    """POST /auth/token: a short-lived bearer token for the caller (who authenticated with a password, a
    certificate or a token). ``?lifetime_ms=`` may shorten it, never lengthen it."""
    service = request.app.get(SECURITY)
    if service is None or service.authenticator.signer is None:
        raise AuthenticationFailedError("this broker issues no tokens (no TLS listener)")
    principal = request[PRINCIPAL_KEY]
    if principal == ANONYMOUS:
        raise AuthenticationFailedError("an anonymous caller cannot have a token")
    raw = request.query.get("lifetime_ms", "")
    lifetime = int(raw) if raw.isdigit() and 0 < int(raw) < 2**31 else None
    token, life_ms = service.authenticator.signer.issue(principal, lifetime)
    return web.json_response({"access_token": token, "token_type": "Bearer", "expires_in": life_ms // 1000,
                              "expires_in_ms": life_ms, "principal": principal})
