"""Who may call what: each call's role, from its bearer token or its client
certificate, checked against the methods that role may call.

Roles: `broker` may call everything (what a broker and the services acting for
it call); `reader` what reading the remote tier needs (fetch, list offsets,
metadata reads and listings: a Spark job, a consumer); `operator` that plus the
partition remover, partition status (and so the scrub) and the metadata manager's
recovery (`remotelog recover`). The health check
answers anyone: probes and load balancers show no identity.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from remotelog.api.fetch.v1 import remote_fetch_pb2
from remotelog.api.metadata.v1 import metadata_pb2
from remotelog.api.remover.v1 import partition_remover_pb2
from remotelog.api.scheduler.v1 import copy_scheduler_pb2
from remotelog.core.errors import PermissionDeniedError, UnauthenticatedError
from remotelog.core.setting_paths import read_file
from remotelog.core.settings import ServerSettings
from remotelog.rpc.handlers import RewrappingInterceptor, rewrapped

ROLES = ("broker", "reader", "operator")
_HEALTH = "/grpc.health.v1.Health/"


def _methods(file: Any, service: str, names: tuple[str, ...] | None = None) -> frozenset[str]:
    """gRPC paths of `service`'s methods in `file` (all of them if `names` is None)."""
    descriptor = file.DESCRIPTOR.services_by_name[service]
    chosen = names if names is not None else tuple(m.name for m in descriptor.methods)
    for name in chosen:
        descriptor.methods_by_name[name]  # a renamed method fails here, not silently
    return frozenset(f"/{descriptor.full_name}/{name}" for name in chosen)


READER_METHODS = (
    _methods(remote_fetch_pb2, "RemoteFetchService")
    | _methods(copy_scheduler_pb2, "CopySchedulerService", ("ListOffsets",))
    | _methods(
        metadata_pb2,
        "RemoteLogMetadataService",
        (
            "GetRemotePartitionDeleteState",
            "GetRemoteLogSegmentMetadata",
            "GetHighestOffsetForEpoch",
            "ListRemoteLogSegments",
            "GetRemoteLogSize",
            "GetNextSegmentWithTxnIndex",
            "IsReady",
            "ListRemotePartitions",
        ),
    )
)
OPERATOR_METHODS = (
    READER_METHODS
    | _methods(partition_remover_pb2, "PartitionRemoverService")
    | _methods(copy_scheduler_pb2, "CopySchedulerService", ("GetPartitionState",))
    | _methods(metadata_pb2, "RemoteLogMetadataService", ("RecoverRemoteLogSegments",))
)


def may_call(role: str, method: str) -> bool:
    if role == "broker":
        return True
    allowed = READER_METHODS if role == "reader" else OPERATOR_METHODS
    return method in allowed


_TOKEN_LINE = re.compile(r"(?P<role>\S+)\s+(?P<token>\S+)")


def _digest(token: str) -> bytes:
    # Equal-length digests: compare_digest's time then says nothing of the length.
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class Policy:
    """The roles a service knows its callers by."""

    tokens: tuple[tuple[bytes, str], ...]
    certificate_roles: dict[str, str]

    @classmethod
    def of(cls, settings: ServerSettings) -> Policy:
        """From the `authorization.*` settings, each problem naming its key (OSError)."""
        tokens: list[tuple[bytes, str]] = []
        key = "authorization.tokens.file"
        if settings.authorization_tokens_file:
            path = settings.authorization_tokens_file
            text = read_file(path, key).decode("utf-8", "replace")
            for number, line in enumerate(text.splitlines(), 1):
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                match = _TOKEN_LINE.fullmatch(line.strip())
                if match is None or match["role"] not in ROLES:
                    raise OSError(
                        f"{key}: {path}:{number}: expected '<role> <token>', "
                        f"role one of {', '.join(ROLES)}"
                    )
                tokens.append((_digest(match["token"]), match["role"]))
        roles: dict[str, str] = {}
        key = "authorization.certificate.roles"
        for pair in filter(None, settings.authorization_certificate_roles.split(",")):
            name, role = pair.split("=", 1)
            if role not in ROLES:
                raise OSError(f"{key}: {role!r} is not a role ({', '.join(ROLES)})")
            roles[name] = role
        if not tokens and not roles:
            raise OSError(
                "authorization.enabled: no caller could have a role: set "
                "authorization.tokens.file or authorization.certificate.roles"
            )
        if roles and not settings.tls_client_ca_file:
            raise OSError(f"{key}: needs tls.client.ca.file, so that callers show certificates")
        return cls(tuple(tokens), roles)

    def role_of_token(self, token: str) -> str | None:
        given = _digest(token)
        found = None
        for digest, role in self.tokens:  # every one compared: no early exit to time
            if hmac.compare_digest(digest, given) and found is None:
                found = role
        return found

    def caller(self, context: grpc.aio.ServicerContext[Any, Any]) -> tuple[str, str]:
        """(role, who) of the call: its bearer token's, else its certificate's."""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                scheme, _, token = str(value).partition(" ")
                role = self.role_of_token(token) if scheme.lower() == "bearer" else None
                if role is None:
                    raise UnauthenticatedError("the call's bearer token is not known here")
                return role, "a bearer token"
        auth = context.auth_context() or {}
        names = [
            name.decode()
            for field in ("x509_common_name", "x509_subject_alternative_name")
            for name in auth.get(field, ())
        ]
        for name in names:
            if name in self.certificate_roles:
                return self.certificate_roles[name], f"certificate {name}"
        raise UnauthenticatedError(
            "the call shows no bearer token and no client certificate with a role"
        )

    def check(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        if method.startswith(_HEALTH):
            return
        role, who = self.caller(context)
        if not may_call(role, method):
            raise PermissionDeniedError(
                f"role {role} ({who}) may not call {method}",
                metadata={"method": method, "role": role},
            )


def _checked(behavior: Callable[..., Any], check: Callable[[Any], None]) -> Callable[..., Any]:
    """`behavior`, after `check(context)`; an async generator stays one."""
    if inspect.isasyncgenfunction(behavior):

        async def stream(request: Any, context: Any) -> Any:
            check(context)
            async with contextlib.aclosing(behavior(request, context)) as items:
                async for item in items:
                    yield item

        return stream

    async def call(request: Any, context: Any) -> Any:
        check(context)
        return await behavior(request, context)

    return call


class AuthorizationInterceptor(RewrappingInterceptor):
    """Refuses a call its caller's role may not make; inside the error mapping, so a
    refusal is PERMISSION_DENIED (or UNAUTHENTICATED) with ErrorInfo like any error."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.policy = policy

    def rewrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        def check(context: Any) -> None:
            self.policy.check(method, context)

        return rewrapped(
            handler,
            lambda behavior, *_: _checked(behavior, check),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
