"""A secured Apache Kafka broker's users, and a service's settings for each way in."""

from dataclasses import dataclass

from support.tls import Certificates

from remotelog.dev.kafka_broker import KafkaBroker

SCRAM_USERS = {"remotelog": "scram-secret"}
PLAIN_USERS = {"remotelog-plain": "plain-secret"}
# The ways a service reaches the secured broker: SASL_SSL with each mechanism, mutual TLS.
WAYS_IN = ("SASL_SSL/SCRAM-SHA-512", "SASL_SSL/PLAIN", "SSL")


@dataclass(frozen=True)
class SecuredBroker:
    broker: KafkaBroker
    certificates: Certificates

    def settings(self, way_in: str) -> dict[str, str]:
        """A remotelog service's Kafka settings (librdkafka's names) for `way_in`."""
        ca = {"ssl.ca.location": str(self.certificates.ca)}
        if way_in == "SSL":
            return {
                "bootstrap.servers": self.broker.ssl_bootstrap_servers,
                "security.protocol": "SSL",
                **ca,
                "ssl.certificate.location": str(self.certificates.client_cert),
                "ssl.key.location": str(self.certificates.client_key),
            }
        sasl_ssl = {
            "bootstrap.servers": self.broker.sasl_ssl_bootstrap_servers,
            "security.protocol": "SASL_SSL",
            **ca,
        }
        if way_in == "SASL_SSL/SCRAM-SHA-512":
            ((user, secret),) = SCRAM_USERS.items()
            return {
                **sasl_ssl,
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": user,
                "sasl.password": secret,
            }
        # PLAIN through Kafka's JAAS line, as a broker's own client properties say it.
        ((user, secret),) = PLAIN_USERS.items()
        jaas = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{user}" password="{secret}";'
        )
        return {**sasl_ssl, "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas}
