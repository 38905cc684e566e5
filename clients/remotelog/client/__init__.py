"""Typed async clients for the remotelog services."""

from remotelog.client.base import ClientOptions, ServiceClient
from remotelog.client.errors import from_rpc_error

__all__ = ["ClientOptions", "ServiceClient", "from_rpc_error"]
