"""The librdkafka configuration of a service's Kafka clients, security included.

Checked when the service starts, each problem naming its key: librdkafka would
report a wrong protocol, a missing file or an unparsable JAAS line only as a
broker that never answers.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from remotelog.core.errors import InvalidArgumentError
from remotelog.core.settings import KafkaClusterSettings, KafkaSecuritySettings

_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": (
        "SCRAM-SHA-256",
        "SCRAM-SHA-512",
    ),
}
_JAAS = re.compile(r"\s*(?P<module>[\w.$]+)\s+required\b(?P<options>.*?);?\s*", re.DOTALL)
_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _jaas_credentials(settings: KafkaSecuritySettings) -> tuple[str, str]:
    """(username, password) of Kafka's `sasl.jaas.config` line."""
    key = "sasl.jaas.config"
    line = _JAAS.fullmatch(settings.sasl_jaas_config)
    if line is None:
        raise InvalidArgumentError(
            key, 'expected \'<LoginModule> required username="..." password="...";\''
        )
    mechanisms = _LOGIN_MODULES.get(line["module"])
    if mechanisms is None:
        known = ", ".join(_LOGIN_MODULES)
        raise InvalidArgumentError(key, f"{line['module']} is not supported (use one of: {known})")
    if settings.sasl_mechanism not in mechanisms:
        raise InvalidArgumentError(
            key, f"{line['module']} does not serve sasl.mechanism={settings.sasl_mechanism}"
        )
    options = {name: value.replace('\\"', '"') for name, value in _OPTION.findall(line["options"])}
    missing = [name for name in ("username", "password") if name not in options]
    if missing:
        raise InvalidArgumentError(key, f"has no {' or '.join(missing)}")
    return options["username"], options["password"]


def _sasl(settings: KafkaSecuritySettings) -> dict[str, str]:
    if settings.sasl_jaas_config:
        if settings.sasl_username or settings.sasl_password:
            raise InvalidArgumentError(
                "sasl.jaas.config", "set it or sasl.username and sasl.password, not both"
            )
        username, password = _jaas_credentials(settings)
    else:
        username, password = settings.sasl_username, settings.sasl_password
        if not username or not password:
            raise InvalidArgumentError(
                "sasl.username",
                f"security.protocol={settings.security_protocol} needs sasl.username and "
                "sasl.password (or sasl.jaas.config)",
            )
    return {
        "sasl.mechanism": settings.sasl_mechanism,
        "sasl.username": username,
        "sasl.password": password,
    }


def _ssl(settings: KafkaSecuritySettings) -> dict[str, str]:
    files = {
        "ssl.ca.location": settings.ssl_ca_location,
        "ssl.certificate.location": settings.ssl_certificate_location,
        "ssl.key.location": settings.ssl_key_location,
    }
    for key, path in files.items():
        if path and not Path(path).is_file():
            raise InvalidArgumentError(key, f"{path} is not a readable file")
    if bool(settings.ssl_certificate_location) != bool(settings.ssl_key_location):
        raise InvalidArgumentError(
            "ssl.certificate.location", "set it and ssl.key.location together, or neither"
        )
    out = {key: path for key, path in files.items() if path}
    if settings.ssl_key_password:
        out["ssl.key.password"] = settings.ssl_key_password
    out["ssl.endpoint.identification.algorithm"] = (
        settings.ssl_endpoint_identification_algorithm or "none"
    )
    return out


def _unused(settings: KafkaSecuritySettings, uses_ssl: bool, uses_sasl: bool) -> None:
    """A setting the protocol ignores is a mistake worth a word, not a silent no-op."""
    ignored = [
        *(
            key
            for key, value in (
                ("ssl.ca.location", settings.ssl_ca_location),
                ("ssl.certificate.location", settings.ssl_certificate_location),
                ("ssl.key.location", settings.ssl_key_location),
                ("ssl.key.password", settings.ssl_key_password),
            )
            if value and not uses_ssl
        ),
        *(
            key
            for key, value in (
                ("sasl.username", settings.sasl_username),
                ("sasl.password", settings.sasl_password),
                ("sasl.jaas.config", settings.sasl_jaas_config),
            )
            if value and not uses_sasl
        ),
    ]
    if ignored:
        raise InvalidArgumentError(
            ignored[0],
            f"is set but security.protocol={settings.security_protocol} does not use it",
        )


def kafka_client_config(settings: KafkaClusterSettings) -> dict[str, str]:
    """librdkafka's settings for `bootstrap.servers` under the configured security."""
    protocol = settings.security_protocol
    uses_ssl = protocol in ("SSL", "SASL_SSL")
    uses_sasl = protocol.startswith("SASL_")
    _unused(settings, uses_ssl, uses_sasl)
    config = {"bootstrap.servers": settings.bootstrap_servers, "security.protocol": protocol}
    if uses_ssl:
        config.update(_ssl(settings))
    if uses_sasl:
        config.update(_sasl(settings))
    return config


def connection_problem(
    error_name: str, message: str, config: Mapping[str, str]
) -> InvalidArgumentError | None:
    """The setting a Kafka client's connection error (librdkafka's `error_cb`: its
    code name and text) points at, when no retry can fix it: Kafka's own clients
    treat a refused login or an untrusted certificate as fatal, so a service
    starting with one fails at once, naming the key, rather than waiting out its
    start-up deadline. None for errors that may pass (a broker still starting)."""
    servers = config.get("bootstrap.servers", "")
    if error_name == "_AUTHENTICATION":
        user, mechanism = config.get("sasl.username", ""), config.get("sasl.mechanism", "")
        return InvalidArgumentError(
            "sasl.password",
            f"the broker at {servers} refused user {user!r} with sasl.mechanism={mechanism}; "
            f"check sasl.username and sasl.password (or sasl.jaas.config): {message}",
        )
    if error_name == "_SSL" and "certificate verify failed" in message:
        trusted = config.get("ssl.ca.location") or "the system's CA certificates"
        return InvalidArgumentError(
            "ssl.ca.location",
            f"{trusted} does not verify the certificate of the broker at {servers}: {message}",
        )
    if "alert bad certificate" in message or "alert certificate required" in message:
        return InvalidArgumentError(
            "ssl.certificate.location",
            f"the broker at {servers} requires a client certificate it accepts: {message}",
        )
    if "alert certificate unknown" in message:
        return InvalidArgumentError(
            "ssl.certificate.location",
            f"the broker at {servers} does not trust this client certificate: {message}",
        )
    return None


def uuid_of(kafka_uuid: Any) -> uuid.UUID:
    """A topic id as confluent-kafka's admin answers give it (its Uuid), as a UUID."""
    high = kafka_uuid.get_most_significant_bits() & (2**64 - 1)
    low = kafka_uuid.get_least_significant_bits() & (2**64 - 1)
    return uuid.UUID(int=(high << 64) | low)
