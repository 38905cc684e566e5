"""S3 endpoints resolved once per bucket, not once per object key.

botocore caches each request's endpoint by the parameters it gives S3's
endpoint rule set. The rule set declares parameters that no rule reads
(`Key`, `Prefix`, `CopySource`: boto/botocore#3528); passed in, they make
every new object key a cache miss and a full evaluation of the rules.
"""

from __future__ import annotations

import re
from typing import Any

# A rule reads a parameter by {"ref": name} or inside a template string: "{Bucket}",
# "{url#scheme}".
_TEMPLATE_NAME = re.compile(r"\{([A-Za-z][A-Za-z0-9_]*)")


def _names_read(node: object, into: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("ref")
        if isinstance(ref, str):
            into.add(ref)
        for value in node.values():
            _names_read(value, into)
    elif isinstance(node, list):
        for value in node:
            _names_read(value, into)
    elif isinstance(node, str):
        into.update(_TEMPLATE_NAME.findall(node))


def unread_parameters(ruleset: dict[str, Any]) -> frozenset[str]:
    """The parameters `ruleset` declares that none of its rules reads.

    Leaving them out cannot change an endpoint: the rules never see them.
    """
    read: set[str] = set()
    _names_read(ruleset.get("rules", []), read)
    return frozenset(ruleset.get("parameters", {})) - read


def resolve_endpoints_per_bucket(client: Any) -> None:
    """Leave the parameters no rule reads out of `client`'s endpoint resolution, so that
    requests for one bucket share one cached endpoint.

    A botocore without the resolver this reaches into is left as it is.
    """
    resolver: Any = getattr(client, "_ruleset_resolver", None)
    definitions = getattr(resolver, "_param_definitions", None)
    loader = getattr(client, "_loader", None)
    if not isinstance(definitions, dict) or loader is None:
        return
    model = client.meta.service_model
    ruleset = loader.load_service_model(
        model.service_name, "endpoint-rule-set-1", model.api_version
    )
    unread = unread_parameters(ruleset) & definitions.keys()
    # A new dict for this client: the provider's rule set (which may be shared) keeps its own.
    resolver._param_definitions = {k: v for k, v in definitions.items() if k not in unread}
