"""The Kafka clients' security settings (security.protocol, ssl.*, sasl.*): what reaches
librdkafka, exactly; what is refused at start, naming the key; secrets never shown."""

import pytest
from confluent_kafka import Producer
from support.cli import run_remotelog
from support.services import load_properties

from remotelog.core.config import ConfigError
from remotelog.core.errors import InvalidArgumentError
from remotelog.core.kafka_client import connection_problem, kafka_client_config
from remotelog.metadata.config import MetadataManagerConfig
from remotelog.remover.config import PartitionRemoverConfig

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="alice" password="alice-secret";'
)
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="bob" password="pa\\"ss";'
)


def config(tmp_path, cls=MetadataManagerConfig, **properties):
    settings = {"bootstrap.servers": "kafka-1:9093", **properties}
    return load_properties(cls, tmp_path / "kafka.properties", settings)


@pytest.fixture
def pem_files(tmp_path):
    for name in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\n")
    return tmp_path


def test_plaintext_by_default(tmp_path):
    assert kafka_client_config(config(tmp_path)) == {
        "bootstrap.servers": "kafka-1:9093",
        "security.protocol": "PLAINTEXT",
    }


@pytest.mark.parametrize("cls", [MetadataManagerConfig, PartitionRemoverConfig])
def test_sasl_ssl_with_kafkas_jaas_line(tmp_path, pem_files, cls):
    settings = config(
        tmp_path,
        cls,
        **{
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pem_files / "ca.pem"),
            "sasl.jaas.config": PLAIN_JAAS,
        },
    )
    expected = {
        "bootstrap.servers": "kafka-1:9093",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pem_files / "ca.pem"),
        "ssl.endpoint.identification.algorithm": "https",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }
    assert kafka_client_config(settings) == expected
    # librdkafka knows every key and takes every value (it checks them as a client is made).
    Producer({k: v for k, v in expected.items() if k != "ssl.ca.location"})


def test_scram_with_librdkafkas_username_and_password(tmp_path):
    settings = config(
        tmp_path,
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "bob",
            "sasl.password": "bob-secret",
        },
    )
    expected = {
        "bootstrap.servers": "kafka-1:9093",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bob",
        "sasl.password": "bob-secret",
    }
    assert kafka_client_config(settings) == expected
    Producer(expected)
    jaas = config(
        tmp_path,
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": SCRAM_JAAS,
        },
    )
    assert kafka_client_config(jaas)["sasl.password"] == 'pa"ss'


def test_mutual_tls_to_the_brokers(tmp_path, pem_files):
    files = {
        "ssl.ca.location": str(pem_files / "ca.pem"),
        "ssl.certificate.location": str(pem_files / "client.pem"),
        "ssl.key.location": str(pem_files / "client.key"),
        "ssl.key.password": "key-secret",
    }
    settings = config(
        tmp_path,
        **{"security.protocol": "SSL", **files, "ssl.endpoint.identification.algorithm": ""},
    )
    assert kafka_client_config(settings) == {
        "bootstrap.servers": "kafka-1:9093",
        "security.protocol": "SSL",
        **files,
        "ssl.endpoint.identification.algorithm": "none",
    }


@pytest.mark.parametrize(
    ("properties", "field", "message"),
    [
        (
            {"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
            "ssl.ca.location",
            "/nonexistent/ca.pem is not a readable file",
        ),
        (
            {"security.protocol": "SSL", "ssl.certificate.location": "{tmp}/client.pem"},
            "ssl.certificate.location",
            "set it and ssl.key.location together, or neither",
        ),
        (
            {"ssl.ca.location": "{tmp}/ca.pem"},
            "ssl.ca.location",
            "is set but security.protocol=PLAINTEXT does not use it",
        ),
        (
            {"security.protocol": "SSL", "sasl.username": "alice"},
            "sasl.username",
            "is set but security.protocol=SSL does not use it",
        ),
        (
            {"security.protocol": "SASL_SSL"},
            "sasl.username",
            "security.protocol=SASL_SSL needs sasl.username and sasl.password "
            "(or sasl.jaas.config)",
        ),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": "alice:secret"},
            "sasl.jaas.config",
            'expected \'<LoginModule> required username="..." password="...";\'',
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.jaas.config": "com.example.KerberosModule required;",
            },
            "sasl.jaas.config",
            "com.example.KerberosModule is not supported",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.jaas.config": PLAIN_JAAS,
            },
            "sasl.jaas.config",
            "PlainLoginModule does not serve sasl.mechanism=SCRAM-SHA-256",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.jaas.config": PLAIN_JAAS.replace(' password="alice-secret"', ""),
            },
            "sasl.jaas.config",
            "has no password",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.jaas.config": PLAIN_JAAS,
                "sasl.username": "alice",
            },
            "sasl.jaas.config",
            "set it or sasl.username and sasl.password, not both",
        ),
    ],
)
def test_a_wrong_setting_is_refused_naming_its_key(tmp_path, pem_files, properties, field, message):
    properties = {key: value.format(tmp=tmp_path) for key, value in properties.items()}
    with pytest.raises(InvalidArgumentError) as refused:
        kafka_client_config(config(tmp_path, **properties))
    assert refused.value.field == field
    assert message in refused.value.detail


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("security.protocol", "SASL_SCRAM"),
        ("sasl.mechanism", "GSSAPI"),
        ("ssl.endpoint.identification.algorithm", "http"),
    ],
)
def test_an_unknown_value_is_refused_when_read(tmp_path, key, value):
    with pytest.raises(ConfigError, match=key):
        config(tmp_path, **{key: value})


def test_config_check_hides_the_secrets_and_refuses_what_the_service_would(tmp_path):
    path = tmp_path / "metadata.properties"
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.jaas.config={PLAIN_JAAS}\n")
    checked = run_remotelog("config", "check", "--service", "metadata-manager", str(path))
    assert checked.returncode == 0, checked.stderr
    assert f"sasl.jaas.config=[hidden]  # {path}:2" in checked.stdout.splitlines()
    assert "alice-secret" not in checked.stdout + checked.stderr
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.username=alice\n")
    refused = run_remotelog("config", "check", "--service", "partition-remover", str(path))
    assert refused.returncode == 2
    assert refused.stderr == (
        "remotelog: config check: sasl.username: security.protocol=SASL_PLAINTEXT needs "
        "sasl.username and sasl.password (or sasl.jaas.config)\n"
    )


def test_a_service_with_a_wrong_setting_stops_at_start_in_one_line(tmp_path):
    path = tmp_path / "metadata.properties"
    path.write_text(
        "listen.address=127.0.0.1:0\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        f"sasl.jaas.config={PLAIN_JAAS}\n"
    )
    served = run_remotelog("serve", "metadata-manager", "--config", str(path))
    assert served.returncode == 2
    last = served.stderr.strip().splitlines()[-1]
    assert last == (
        "remotelog: serve metadata-manager: sasl.jaas.config: "
        "org.apache.kafka.common.security.plain.PlainLoginModule does not serve "
        "sasl.mechanism=SCRAM-SHA-256"
    )
    assert "alice-secret" not in served.stderr
    assert "Traceback" not in served.stderr


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("_TRANSPORT", "127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed"),
        ("_ALL_BROKERS_DOWN", "1/1 brokers are down"),
        ("_TRANSPORT", "Disconnected: connection reset by peer (after 9ms in state UP)"),
        ("_SSL", "SSL handshake failed: unexpected eof while reading"),
    ],
)
def test_connection_errors_that_may_pass_name_no_setting(name, message):
    """A broker still starting, or restarting: retried until the deadline."""
    assert connection_problem(name, message, {"bootstrap.servers": "b:9092"}) is None
