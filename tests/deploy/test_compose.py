"""docker-compose.yml, checked offline (no Docker daemon here): it is valid by the
Compose Specification's JSON schema, every properties file it gives a service passes
that service's `remotelog config check`, and the services find one another, wait for
each other's health and sit beside Kafka as deploy/compose's comments say."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.deploy import (
    DEPLOY,
    ROOT,
    SERVICES,
    config_check,
    effective,
    environment_key,
    host_of,
    port_of,
)
from support.kafka_cluster import pinned_kafka
from support.kafka_image import (
    assert_tiers_through_the_plugin,
    dockerfile_stages,
    kafka_properties,
    pinned_kafka_version,
    plugin_copy,
    plugin_jar_in_image,
    plugin_jar_name,
    stage,
)

COMPOSE = ROOT / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def schema_check(path: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema with the Compose Specification schema it ships."""
    command = Path(sys.executable).parent / "check-jsonschema"
    return subprocess.run(
        [str(command), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def mounted(compose: dict, service: str) -> Path:
    """The properties file `service` is served with (its `--config`), in the repository."""
    spec = compose["services"][service]
    command = spec["command"]
    assert command[:3] == ["serve", service, "--config"]
    (source,) = [c["source"] for c in spec["configs"] if c["target"] == command[3]]
    return ROOT / compose["configs"][source]["file"]


def environment(compose: dict, service: str) -> dict[str, str]:
    return {k: str(v) for k, v in compose["services"][service].get("environment", {}).items()}


def config_of(compose: dict, service: str):
    return effective(service, mounted(compose, service), environment(compose, service))


def test_the_compose_file_is_valid_by_the_compose_specification(tmp_path):
    checked = schema_check(COMPOSE)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The check can fail: a condition the specification does not know.
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("service_healthy", "service_ready", 1))
    refused = schema_check(broken)
    assert refused.returncode == 1
    assert "service_ready" in refused.stdout


def test_every_service_runs_from_the_image_with_a_read_only_root(compose):
    for service in SERVICES:
        spec = compose["services"][service]
        assert spec["image"] == "remotelog:dev"
        assert spec["build"] == {"context": ".", "dockerfile": "deploy/Dockerfile"}
        assert spec["read_only"] is True
        assert (ROOT / spec["build"]["dockerfile"]).is_file()


@pytest.mark.parametrize("service", SERVICES)
def test_each_mounted_properties_file_passes_config_check(compose, service):
    path = mounted(compose, service)
    assert path.parent == DEPLOY / "compose"
    checked = config_check(service, path)
    assert checked.returncode == 0, checked.stderr
    assert f"# effective configuration of {service}" in checked.stdout
    # Its environment names keys of the service, and the two together load.
    for name in environment(compose, service):
        assert environment_key(name) is not None, name
    config_of(compose, service)


def test_each_service_checks_its_own_health_and_waits_for_the_others(compose):
    services = compose["services"]
    for service in SERVICES:
        listen = port_of(config_of(compose, service).listen_address)
        assert services[service]["healthcheck"]["test"] == [
            "CMD",
            "remotelog",
            "health",
            f"127.0.0.1:{listen}",
            "--service",
            service,
        ]
        assert f"{listen}:{listen}" in services[service]["ports"]
        for dependency, condition in services[service]["depends_on"].items():
            assert dependency in services
            if "healthcheck" in services[dependency]:
                assert condition == {"condition": "service_healthy"}, (service, dependency)
    assert services["segment-store"]["depends_on"]["minio-bucket"] == {
        "condition": "service_completed_successfully"
    }


def test_the_addresses_services_are_given_are_where_the_others_listen(compose):
    listening = {
        service: port_of(config_of(compose, service).listen_address) for service in SERVICES
    }
    for service in ("copy-scheduler", "remote-fetch", "partition-remover"):
        config = config_of(compose, service)
        for target, address in (
            ("segment-store", config.segment_store_address),
            ("metadata-manager", config.metadata_manager_address),
        ):
            assert address == f"{target}:{listening[target]}"
            assert target in compose["services"][service]["depends_on"]
        assert host_of(config.redis_url) == "redis"
    kafka = compose["services"]["kafka"]["environment"]
    internal = kafka["KAFKA_ADVERTISED_LISTENERS"].split(",")[0].split("://", 1)[1]
    # The copy scheduler's discovery asks the same cluster.
    for service in ("metadata-manager", "partition-remover", "copy-scheduler"):
        assert config_of(compose, service).bootstrap_servers == internal
    scheduler = config_of(compose, "copy-scheduler")
    assert scheduler.partition_remover_address == (
        f"partition-remover:{listening['partition-remover']}"
    )
    assert "partition-remover" in compose["services"]["copy-scheduler"]["depends_on"]


def test_the_copy_scheduler_only_reads_the_brokers_log_directory(compose):
    config = config_of(compose, "copy-scheduler")
    assert config.local_retention_enabled is False
    log_dir = compose["services"]["kafka"]["environment"]["KAFKA_LOG_DIRS"]
    (broker_volume,) = compose["services"]["kafka"]["volumes"]
    volume = broker_volume.split(":")[0]
    assert broker_volume == f"{volume}:{log_dir}"
    assert compose["services"]["copy-scheduler"]["volumes"] == [f"{volume}:{log_dir}:ro"]
    # Its partitions are found there, with no call: discovery reads the same directory.
    assert config.discovery_enabled is True
    assert config.discovery_log_dirs() == [log_dir]
    assert config.broker_id == int(compose["services"]["kafka"]["environment"]["KAFKA_NODE_ID"])


def test_the_fetch_service_reads_s3_where_the_store_signs_urls_for(compose):
    store = config_of(compose, "segment-store")
    fetch = config_of(compose, "remote-fetch")
    assert store.storage_backend == "s3"
    assert store.s3_fetch_url_expiry_ms > 0
    assert fetch.segment_store_fetch_urls is True
    # The URLs name the store's endpoint: a compose service both reach by name.
    assert host_of(store.s3_endpoint_url) == "minio" in compose["services"]
    bucket = compose["services"]["minio-bucket"]["command"][0]
    assert bucket.endswith(f"local/{store.s3_bucket_name}")
    # The store alone holds the credentials, given by the environment.
    assert store.aws_access_key_id
    assert store.aws_secret_access_key
    assert not fetch.aws_access_key_id


def test_metrics_reach_prometheus_and_traces_reach_jaeger(compose):
    services = compose["services"]
    for service in SERVICES:
        endpoint = config_of(compose, service).otlp_endpoint
        assert (host_of(endpoint), port_of(endpoint)) == ("otel-collector", 4317)
    collector = yaml.safe_load((ROOT / compose["configs"]["otel-collector"]["file"]).read_text())
    pipelines = collector["service"]["pipelines"]
    assert pipelines["metrics"]["exporters"] == ["prometheus"]
    assert pipelines["traces"]["exporters"] == ["otlp/jaeger"]
    assert host_of(collector["exporters"]["otlp/jaeger"]["endpoint"]) == "jaeger"
    assert services["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    metrics_port = port_of(collector["exporters"]["prometheus"]["endpoint"])
    prometheus = yaml.safe_load((ROOT / compose["configs"]["prometheus"]["file"]).read_text())
    (job,) = prometheus["scrape_configs"]
    assert job["static_configs"] == [{"targets": [f"otel-collector:{metrics_port}"]}]


def test_the_compose_configs_are_all_used_and_present(compose):
    used = {c["source"] for s in compose["services"].values() for c in s.get("configs", [])}
    assert used == set(compose["configs"])
    for config in compose["configs"].values():
        assert (ROOT / config["file"]).is_file()


def test_every_service_checks_roles_and_calls_the_others_as_a_broker(compose):
    secrets = {name: ROOT / spec["file"] for name, spec in compose["secrets"].items()}
    roles = {}
    for line in secrets["tokens"].read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            role, token = line.split()
            roles[token] = role
    assert sorted(roles.values()) == ["broker", "operator", "reader"]
    for role in ("reader", "operator"):  # what readers and operators on the host use
        assert roles[(DEPLOY / "compose" / f"{role}.token").read_text().strip()] == role
    for service in SERVICES:
        config = config_of(compose, service)
        assert config.authorization_enabled is True
        assert config.authorization_tokens_file == "/run/secrets/tokens"
        assert "tokens" in compose["services"][service]["secrets"]
        if hasattr(config, "client_auth_token_file"):
            assert config.client_auth_token_file == "/run/secrets/broker.token"
            assert roles[secrets["broker.token"].read_text().strip()] == "broker"


def test_the_kafka_image_is_the_pinned_kafka_with_the_plugin_built_from_the_protos():
    preamble, _ = dockerfile_stages()
    kafka = stage("kafka")
    assert kafka[0] == ("FROM", "apache/kafka:${KAFKA_VERSION} AS kafka")
    # The build argument, declared before the first FROM, defaults to the pinned Kafka.
    assert ("ARG", f"KAFKA_VERSION={pinned_kafka_version()}") in preamble
    plugin = stage("plugin")
    copies = [shlex.split(a) for i, a in plugin if i == "COPY"]
    for words in copies:
        assert (ROOT / words[0]).exists(), words[0]
    assert {"protos", "jvm/pom.xml", "clients/kafka-plugin/src"} <= {w[0] for w in copies}
    jar, _ = plugin_copy(kafka)
    assert jar.endswith(f"/target/{plugin_jar_name()}")


def test_the_docs_load_the_plugin_from_where_the_image_ships_it(compose):
    shipped = plugin_jar_in_image()
    docs = (ROOT / "docs" / "kafka-plugin.md").read_text()
    paths = re.findall(r"^remote\.log\.\w+\.manager\.class\.path=(\S+)$", docs, re.MULTILINE)
    assert paths
    assert set(paths) == {shipped}
    kafka = compose["services"]["kafka"]["environment"]
    assert {v for k, v in kafka.items() if k.endswith("_MANAGER_CLASS_PATH")} == {shipped}


def test_the_kafka_version_is_a_build_argument_defaulting_to_the_pinned_one(compose):
    """`KAFKA_VERSION=3.9.1 docker compose up` builds and runs that Kafka with the plugin;
    the default is the pinned one, itself one of the versions the plugin is tested on."""
    kafka = compose["services"]["kafka"]
    pinned = pinned_kafka_version()
    argument = f"${{KAFKA_VERSION:-{pinned}}}"
    assert kafka["build"]["args"] == {"KAFKA_VERSION": argument}
    assert kafka["image"] == f"remotelog-kafka:{argument}"
    assert pinned in pinned_kafka("kafka.matrix.versions").split()


def test_kafka_tiers_through_the_plugin_calling_the_services_where_they_listen(compose):
    kafka = compose["services"]["kafka"]
    assert kafka["build"]["dockerfile"] == "deploy/Dockerfile"
    assert kafka["build"]["target"] == "kafka"
    properties = kafka_properties(kafka["environment"])
    store, metadata = (
        f"{service}:{port_of(config_of(compose, service).listen_address)}"
        for service in ("segment-store", "metadata-manager")
    )
    assert_tiers_through_the_plugin(properties, store, metadata)
    # It reads segments by the URLs the store signs, of an endpoint on this network.
    assert properties["rsm.config.fetch.urls.enabled"] == "true"
    signing = config_of(compose, "segment-store")
    assert signing.s3_fetch_url_expiry_ms > 0
    assert host_of(signing.s3_endpoint_url) in compose["services"]
    # The plugin calls as the broker role, as the services call each other.
    for prefix in ("rsm.config", "rlmm.config"):
        assert properties[f"{prefix}.client.auth.token.file"] == "/run/secrets/broker.token"
    assert "broker.token" in kafka["secrets"]


def test_the_copy_scheduler_runs_only_in_the_sidecar_profile(compose):
    """Never beside a broker that tiers by itself: the two would copy the same segments."""
    services = compose["services"]
    assert services["copy-scheduler"]["profiles"] == ["sidecar"]
    assert [n for n, s in services.items() if "profiles" in s] == ["copy-scheduler"]


# deploy/compose's override per cloud, and what an operator gives its variables.
CLOUD_OVERRIDES = {
    "gcs": {"REMOTELOG_GCS_BUCKET": "tiered", "REMOTELOG_GCS_KEY_FILE": "./key.json"},
    "azure": {
        "REMOTELOG_AZURE_CONTAINER": "tiered",
        "AZURE_STORAGE_CONNECTION_STRING": "AccountName=a;AccountKey=a2V5",
    },
}
_REQUIRED_VARIABLE = re.compile(r"\$\{(\w+):\?[^}]*\}")


def overridden(compose: dict, cloud: str) -> tuple[dict, dict]:
    """(docker-compose.yml with the cloud's override merged in, as `docker compose -f
    ... -f` merges mappings; the override itself), its variables given."""
    text = (DEPLOY / "compose" / f"{cloud}.yml").read_text()
    override = yaml.safe_load(
        _REQUIRED_VARIABLE.sub(lambda m: CLOUD_OVERRIDES[cloud][m.group(1)], text)
    )
    merged = yaml.safe_load(yaml.safe_dump(compose))
    for name, spec in override["services"].items():
        service = merged["services"][name]
        for field, value in spec.items():
            if isinstance(value, dict):
                service[field] = {**service.get(field, {}), **value}
            else:
                service[field] = value
    return merged, override


@pytest.mark.parametrize("cloud", CLOUD_OVERRIDES)
def test_a_cloud_override_stores_in_its_bucket_and_kafka_copies_to_it_by_url(
    compose, cloud, tmp_path
):
    assert schema_check(DEPLOY / "compose" / f"{cloud}.yml").returncode == 0
    merged, override = overridden(compose, cloud)
    given = CLOUD_OVERRIDES[cloud]
    env = merged["services"]["segment-store"]["environment"]
    key_file = env.get("REMOTELOG_STORAGE_GCS_CREDENTIALS_PATH")
    if key_file is not None:  # the store reads it as it starts: one stands in for it here
        (tmp_path / "key.json").write_text("{}")
        env["REMOTELOG_STORAGE_GCS_CREDENTIALS_PATH"] = str(tmp_path / "key.json")
    store = config_of(merged, "segment-store")
    assert store.storage_backend == cloud
    bucket = store.gcs_bucket_name if cloud == "gcs" else store.azure_container_name
    assert bucket == "tiered"
    if cloud == "gcs":
        # The key file reaches the store as the secret it names, from the operator's path.
        (secret,) = set(override["secrets"])
        assert secret in merged["services"]["segment-store"]["secrets"]
        assert key_file == f"/run/secrets/{secret}"
        assert override["secrets"][secret]["file"] == given["REMOTELOG_GCS_KEY_FILE"]
    else:
        assert store.azure_connection_string == given["AZURE_STORAGE_CONNECTION_STRING"]
    # The plugin PUTs and reads the segments by the URLs the store signs, on every cloud.
    assert "kafka" not in override["services"]
    kafka = merged["services"]["kafka"]["environment"]
    assert kafka["KAFKA_RSM_CONFIG_COPY_METHOD"] == "url"
    assert kafka["KAFKA_RSM_CONFIG_FETCH_URLS_ENABLED"] == "true"
    assert store.s3_copy_urls
    assert store.s3_fetch_url_expiry_ms > 0
