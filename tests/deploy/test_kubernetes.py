"""deploy/k8s, checked offline (no cluster here): `kubectl kustomize` renders the base,
each component, the dev overlay (Kafka with the plugin) and its sidecar alternative
(as the overlay's comment says to make it); every object is valid by the Kubernetes API's
schemas (kubernetes-validate, strict); every container has probes, runs as non-root
on a read-only root filesystem; the services' probes, ports and properties agree."""

import copy
import os
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from support.deploy import DEPLOY, SERVICES, config_check, effective, environment_key, port_of
from support.kafka_image import (
    assert_tiers_through_the_plugin,
    kafka_properties,
    pinned_kafka_version,
)

from remotelog.cli.health import HEALTH_NAMES

K8S = DEPLOY / "k8s"
KUBERNETES_VERSION = "1.32.0"
# What is rendered: a kustomization's resources and components under deploy/k8s.
RENDERS = {
    "base": (["base"], []),
    "base+otel": (["base"], ["components/otel"]),
    "base+tls": (["base"], ["components/tls"]),
    "base+encryption": (["base"], ["components/encryption"]),
    "base+gcs": (["base"], ["components/gcs"]),
    "base+azure": (["base"], ["components/azure"]),
    "dev": (["overlays/dev"], []),
    "dev+tls": (["overlays/dev"], ["components/tls"]),
    "dev-sidecar": (["overlays/dev-sidecar"], []),
    "dev-sidecar+tls": (["overlays/dev-sidecar"], ["components/tls"]),
}
# The overlay's own instruction for a broker without the plugin.
PLUGIN_COMPONENT = "  - ../../components/kafka-plugin\n"
SIDECAR_COMPONENT = "  - ../../components/kafka-sidecar\n"
WORKLOADS = ("Deployment", "StatefulSet", "Job")
TLS_DIR = "/etc/remotelog-tls"

pytestmark = pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl (with kustomize) is not installed"
)


def kustomize(directory: Path) -> list[dict]:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert rendered.returncode == 0, rendered.stderr
    return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]


def with_sidecar_overlay(tree: Path) -> Path:
    """A copy of deploy/k8s with overlays/dev-sidecar: the dev overlay with the sidecar
    component in place of the plugin's, as its comment tells an operator to do."""
    shutil.copytree(K8S, tree)
    dev = (tree / "overlays/dev/kustomization.yaml").read_text()
    assert dev.count(PLUGIN_COMPONENT) == 1
    assert "kafka-sidecar below" in dev
    shutil.copytree(tree / "overlays/dev", tree / "overlays/dev-sidecar")
    sidecar = dev.replace(PLUGIN_COMPONENT, SIDECAR_COMPONENT)
    (tree / "overlays/dev-sidecar/kustomization.yaml").write_text(sidecar)
    return tree


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, list[dict]]:
    """Each of RENDERS, through a kustomization of its own (kustomize takes relative paths)."""
    tree = with_sidecar_overlay(tmp_path_factory.mktemp("deploy") / "k8s")
    out = {}
    for name, (resources, components) in RENDERS.items():
        directory = tmp_path_factory.mktemp(name.replace("+", "-"))
        relative = Path(os.path.relpath(tree, directory))
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [str(relative / r) for r in resources],
            "components": [str(relative / c) for c in components],
        }
        (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        out[name] = kustomize(directory)
    return out


def workloads(objects: list[dict]):
    for obj in objects:
        if obj["kind"] in WORKLOADS:
            yield obj, obj["spec"]["template"]["spec"]


def containers(objects: list[dict]):
    """(workload, pod spec, container) for every container of every pod template."""
    for obj, pod in workloads(objects):
        for container in pod["containers"] + pod.get("initContainers", []):
            yield obj, pod, container


def remotelog_containers(objects: list[dict]):
    for obj, pod, container in containers(objects):
        if container["image"].split(":")[0] == "remotelog":
            yield obj, pod, container


def find(objects: list[dict], kind: str, name: str) -> dict:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def properties_of(objects: list[dict], pod: dict, container: dict, tmp: Path) -> Path:
    """The properties file the container is served with, from its ConfigMap."""
    config = container["args"][container["args"].index("--config") + 1]
    (mount,) = [m for m in container["volumeMounts"] if config.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    config_map = find(objects, "ConfigMap", volume["configMap"]["name"])
    path = tmp / f"{container['name']}.properties"
    path.write_text(config_map["data"][Path(config).name])
    return path


def environment_of(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def test_everything_renders_with_every_service(rendered):
    for name, objects in rendered.items():
        served = {c["args"][1] for _, _, c in remotelog_containers(objects)}
        sidecar = name.startswith("dev-sidecar")
        expected = set(SERVICES) - (set() if sidecar else {"copy-scheduler"})
        assert served == expected, name


@pytest.mark.parametrize("name", RENDERS)
def test_every_object_is_valid_by_the_kubernetes_schemas(rendered, name):
    invalid = []
    for obj in rendered[name]:
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            invalid.append(f"{obj['kind']}/{obj['metadata']['name']}: {error.message}")
    assert invalid == []
    assert len(rendered[name]) >= 12  # the four services' objects at least


def test_the_validation_can_fail(rendered):
    deployment = copy.deepcopy(find(rendered["base"], "Deployment", "segment-store"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpc"]["port"] = (
        "seven"
    )
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name", RENDERS)
def test_every_container_is_probed_non_root_with_a_read_only_root(rendered, name):
    for obj, pod, container in containers(rendered[name]):
        where = f"{name}: {obj['metadata']['name']}/{container['name']}"
        security = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
        assert security.get("runAsNonRoot") is True, where
        assert security.get("readOnlyRootFilesystem") is True, where
        assert security.get("allowPrivilegeEscalation") is False, where
        assert container["resources"]["requests"], where
        assert container["resources"]["limits"]["memory"], where
        if obj["kind"] != "Job":  # a run to completion has nothing to be ready for
            assert container.get("readinessProbe"), where
            assert container.get("livenessProbe"), where


@pytest.mark.parametrize("name", ["base", "dev", "dev-sidecar"])
def test_services_are_probed_by_native_grpc_health_on_their_listen_port(rendered, name, tmp_path):
    objects = rendered[name]
    for _, pod, container in remotelog_containers(objects):
        service = container["args"][1]
        path = properties_of(objects, pod, container, tmp_path)
        checked = config_check(service, path)
        assert checked.returncode == 0, checked.stderr
        environment = environment_of(container)
        assert all(environment_key(variable) for variable in environment), environment
        config = effective(service, path, environment)
        port = port_of(config.listen_address)
        assert [p["containerPort"] for p in container["ports"]] == [port]
        assert container["readinessProbe"]["grpc"] == {
            "port": port,
            "service": HEALTH_NAMES[service],
        }
        assert container["livenessProbe"]["grpc"] == {"port": port}
        assert container["startupProbe"]["grpc"] == {"port": port}


def test_each_service_has_a_service_and_a_disruption_budget(rendered):
    objects = rendered["base"]
    for obj, _, container in remotelog_containers(objects):
        name = obj["metadata"]["name"]
        labels = obj["spec"]["template"]["metadata"]["labels"]
        assert obj["spec"]["replicas"] >= 2
        service = find(objects, "Service", name)
        assert service["spec"]["selector"].items() <= labels.items()
        assert service["spec"]["ports"][0]["port"] == container["ports"][0]["containerPort"]
        budget = find(objects, "PodDisruptionBudget", name)
        assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert budget["spec"]["minAvailable"] == 1


def test_the_copy_scheduler_reads_the_brokers_log_volume_read_only(rendered, tmp_path):
    objects = rendered["dev-sidecar"]
    kafka = find(objects, "StatefulSet", "kafka")
    pod = kafka["spec"]["template"]["spec"]
    by_name = {c["name"]: c for c in pod["containers"]}
    broker, scheduler = by_name["kafka"], by_name["copy-scheduler"]
    log_dir = environment_of(broker)["KAFKA_LOG_DIRS"]
    (written,) = [m for m in broker["volumeMounts"] if m["mountPath"] == log_dir]
    (read,) = [m for m in scheduler["volumeMounts"] if m["name"] == written["name"]]
    assert read == {"name": written["name"], "mountPath": log_dir, "readOnly": True}
    config = effective(
        "copy-scheduler",
        properties_of(objects, pod, scheduler, tmp_path),
        {"REMOTELOG_BROKER_ID": "0"},
    )
    assert config.local_retention_enabled is False
    # Discovery finds the partitions in the same directory and asks the broker of its pod.
    assert config.discovery_enabled is True
    assert config.discovery_log_dirs() == [log_dir]
    listener = environment_of(broker)["KAFKA_LISTENERS"].split(",")[0]
    assert config.bootstrap_servers == f"localhost:{port_of(listener)}"
    remover = find(objects, "Service", "partition-remover")
    assert (
        config.partition_remover_address
        == f"partition-remover:{remover['spec']['ports'][0]['port']}"
    )
    (broker_id,) = [e for e in scheduler["env"] if e["name"] == "REMOTELOG_BROKER_ID"]
    assert "apps.kubernetes.io/pod-index" in broker_id["valueFrom"]["fieldRef"]["fieldPath"]
    assert environment_of(broker)["KAFKA_NODE_ID"] == "0"


def test_the_otel_component_points_every_service_at_the_collector(rendered):
    for name in ("base+otel", "dev", "dev-sidecar"):
        objects = rendered[name]
        collector = find(objects, "Service", "otel-collector")
        (otlp,) = [p for p in collector["spec"]["ports"] if p["name"] == "otlp-grpc"]
        for _, _, container in remotelog_containers(objects):
            endpoint = environment_of(container)["REMOTELOG_OTEL_EXPORTER_OTLP_ENDPOINT"]
            assert endpoint == f"http://otel-collector:{otlp['port']}"


@pytest.mark.parametrize("name", ["base+tls", "dev+tls", "dev-sidecar+tls"])
def test_the_tls_component_serves_and_calls_with_the_secrets_certificates(rendered, name):
    expected = {
        "REMOTELOG_TLS_CERT_FILE": f"{TLS_DIR}/tls.crt",
        "REMOTELOG_TLS_KEY_FILE": f"{TLS_DIR}/tls.key",
        "REMOTELOG_TLS_CLIENT_CA_FILE": f"{TLS_DIR}/ca.crt",
        "REMOTELOG_CLIENT_TLS_CA_FILE": f"{TLS_DIR}/ca.crt",
        "REMOTELOG_CLIENT_TLS_CERT_FILE": f"{TLS_DIR}/tls.crt",
        "REMOTELOG_CLIENT_TLS_KEY_FILE": f"{TLS_DIR}/tls.key",
        # Roles by certificate: the services' own is a broker's.
        "REMOTELOG_AUTHORIZATION_ENABLED": "true",
        "REMOTELOG_AUTHORIZATION_CERTIFICATE_ROLES": "remotelog=broker",
    }
    for _, pod, container in remotelog_containers(rendered[name]):
        service = container["args"][1]
        assert environment_of(container).items() >= expected.items(), service
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == TLS_DIR]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume["secret"]["secretName"] == "remotelog-tls"
        port = container["ports"][0]["containerPort"]
        tls = ["--tls-ca-file", f"{TLS_DIR}/ca.crt", "--tls-cert-file", f"{TLS_DIR}/tls.crt"]
        tls += ["--tls-key-file", f"{TLS_DIR}/tls.key"]
        check = ["remotelog", "health", f"localhost:{port}", "--timeout", "4"]
        # gRPC probes speak no TLS: `remotelog health` over TLS instead.
        assert container["readinessProbe"] == {
            "exec": {"command": [*check, "--service", service, *tls]},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        }
        for probe in ("livenessProbe", "startupProbe"):
            assert container[probe]["exec"]["command"] == [*check, *tls]


def service_address(objects: list[dict], name: str) -> str:
    return f"{name}:{find(objects, 'Service', name)['spec']['ports'][0]['port']}"


def broker_container(objects: list[dict]) -> dict:
    pod = find(objects, "StatefulSet", "kafka")["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod["containers"]}["kafka"]


def test_the_dev_broker_tiers_through_the_plugin_alone(rendered, tmp_path):
    objects = rendered["dev"]
    kafka = find(objects, "StatefulSet", "kafka")
    pod = kafka["spec"]["template"]["spec"]
    # No copy scheduler beside a broker that tiers by itself: both would copy.
    assert [c["name"] for c in pod["containers"]] == ["kafka"]
    broker = broker_container(objects)
    assert broker["image"] == "remotelog-kafka:0.1.0"
    properties = kafka_properties(environment_of(broker))
    store, metadata = (service_address(objects, s) for s in ("segment-store", "metadata-manager"))
    assert_tiers_through_the_plugin(properties, store, metadata)
    # It reads segments by the URLs the store signs.
    assert properties["rsm.config.fetch.urls.enabled"] == "true"
    (deployment,) = [
        o for o, _, _ in remotelog_containers(objects) if o["metadata"]["name"] == "segment-store"
    ]
    pod = deployment["spec"]["template"]["spec"]
    signing = effective(
        "segment-store",
        properties_of(objects, pod, pod["containers"][0], tmp_path),
        environment_of(pod["containers"][0]),
    )
    assert signing.s3_fetch_url_expiry_ms > 0


def test_the_encryption_component_keeps_segments_under_the_secrets_key_ring(rendered, tmp_path):
    objects = rendered["base+encryption"]
    deployment = find(objects, "Deployment", "segment-store")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    config = effective(
        "segment-store",
        properties_of(objects, pod, container, tmp_path),
        environment_of(container),
    )
    assert config.compression_enabled
    assert (config.encryption_key_provider, config.encryption_key_id) == ("local", "key-1")
    (mount,) = [
        m for m in container["volumeMounts"] if m["mountPath"] == config.encryption_key_ring_dir
    ]
    assert mount["readOnly"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"] == {"secretName": "remotelog-keys", "defaultMode": 0o400}
    # The other services are as they were: only the store holds the keys.
    for name in ("metadata-manager", "remote-fetch", "partition-remover"):
        env = environment_of(
            find(objects, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]
        )
        assert not [k for k in env if k.startswith("REMOTELOG_ENCRYPTION")], name


# What each cloud's component takes its credentials from (a Secret; optional: the
# pod's own identity without it), and a Secret's content as an operator
# would create it.
CLOUDS = {
    "gcs": (
        "remotelog-gcs",
        True,
        {"REMOTELOG_STORAGE_GCS_CREDENTIALS_JSON": '{"type": "service_account"}'},
    ),
    "azure": (
        "remotelog-azure",
        False,
        {
            "REMOTELOG_STORAGE_AZURE_ACCOUNT_NAME": "remotelogprod",
            "REMOTELOG_STORAGE_AZURE_ACCOUNT_KEY": "a2V5",
        },
    ),
}


@pytest.mark.parametrize("cloud", CLOUDS)
def test_a_cloud_component_stores_in_its_bucket_with_the_secrets_credentials(
    rendered, cloud, tmp_path
):
    objects = rendered[f"base+{cloud}"]
    pod = find(objects, "Deployment", "segment-store")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    secret, optional, content = CLOUDS[cloud]
    # The cloud's Secret alone, in place of S3's: no S3 keys reach a GCS or Azure store.
    assert container["envFrom"] == [
        {"secretRef": {"name": secret, **({"optional": True} if optional else {})}}
    ]
    for environment in ({}, content) if optional else (content,):
        config = effective(
            "segment-store",
            properties_of(objects, pod, container, tmp_path),
            environment_of(container) | environment,
        )
        assert config.storage_backend == cloud
        bucket = config.gcs_bucket_name if cloud == "gcs" else config.azure_container_name
        assert bucket == "remotelog"
    for name in ("metadata-manager", "remote-fetch", "partition-remover"):
        env = environment_of(
            find(objects, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]
        )
        assert "REMOTELOG_STORAGE_BACKEND" not in env, name


def test_without_the_plugin_the_broker_is_the_pinned_apache_kafka(rendered):
    broker = broker_container(rendered["dev-sidecar"])
    assert broker["image"] == f"apache/kafka:{pinned_kafka_version()}"
    assert "remote.log.storage.system.enable" not in kafka_properties(environment_of(broker))


def test_with_tls_the_plugin_calls_with_the_services_certificate(rendered):
    objects = rendered["dev+tls"]
    pod = find(objects, "StatefulSet", "kafka")["spec"]["template"]["spec"]
    broker = broker_container(objects)
    properties = kafka_properties(environment_of(broker))
    for prefix in ("rsm.config", "rlmm.config"):
        assert {k: v for k, v in properties.items() if k.startswith(f"{prefix}.client.tls")} == {
            f"{prefix}.client.tls.ca.file": f"{TLS_DIR}/ca.crt",
            f"{prefix}.client.tls.cert.file": f"{TLS_DIR}/tls.crt",
            f"{prefix}.client.tls.key.file": f"{TLS_DIR}/tls.key",
        }
    (mount,) = [m for m in broker["volumeMounts"] if m["mountPath"] == TLS_DIR]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "remotelog-tls"
