import re
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from remotelog.cli.main import main
from remotelog.cli.services import SERVICE_CONFIGS, all_config_keys
from remotelog.core.config import (
    ConfigError,
    config_fields,
    env_name,
    load_config,
    render,
    shown_settings,
)
from remotelog.core.settings import RetrySettings
from remotelog.fetch.config import RemoteFetchConfig
from remotelog.metadata.config import MetadataManagerConfig
from remotelog.scheduler.config import CopySchedulerConfig
from remotelog.segmentstore.config import SegmentStoreConfig
from remotelog.segmentstore.factory import open_backend


def write(tmp_path, text, name="service.properties"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_are_kafkas():
    config, sources = load_config(RemoteFetchConfig)
    assert config.reader_threads == 10
    assert config.reader_max_pending_tasks == 100
    assert config.fetch_max_wait_ms == 500
    assert config.index_cache_total_size_bytes == 1024**3
    assert config.retry_backoff_ms == 500
    assert config.retry_backoff_max_ms == 30_000
    assert config.retry_jitter == 0.2
    assert set(sources.values()) == {"default"}


def test_precedence_default_then_file_then_environment(tmp_path):
    path = write(
        tmp_path,
        "# Kafka-style comment\n! another\nremote.log.reader.threads=4\n"
        "remote.fetch.max.wait.ms : 250\nredis.url=redis://file\n",
    )
    environ = {"REMOTELOG_REMOTE_LOG_READER_THREADS": "6", "PATH": "/bin"}
    config, sources = load_config(RemoteFetchConfig, path, environ)
    assert config.reader_threads == 6  # environment beats the file
    assert config.fetch_max_wait_ms == 250  # file beats the default
    assert config.redis_url == "redis://file"
    assert config.reader_max_pending_tasks == 100  # default
    assert sources["remote.log.reader.threads"] == "env REMOTELOG_REMOTE_LOG_READER_THREADS"
    assert sources["remote.fetch.max.wait.ms"] == f"{path}:4"
    assert sources["remote.log.reader.max.pending.tasks"] == "default"


def test_config_is_frozen():
    config, _ = load_config(RemoteFetchConfig)
    with pytest.raises(FrozenInstanceError):
        config.reader_threads = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "remote.log.reader.thread=4\n",
            ":1: remote.log.reader.thread: unknown key for RemoteFetchConfig "
            "(did you mean 'remote.log.reader.threads'?)",
        ),
        (
            "\nremote.log.reader.threads=four\n",
            ":2: remote.log.reader.threads: expected an integer",
        ),
        ("remote.log.reader.threads=0\n", "remote.log.reader.threads: 0 is below the minimum 1"),
        ("remote.log.manager.task.retry.jitter=1.5\n", "jitter: 1.5 is above the maximum 1.0"),
        ("remote.log.reader.threads\n", "remote.log.reader.threads: expected key=value"),
        (
            "remote.log.reader.threads=1\nremote.log.reader.threads=2\n",
            ":2: remote.log.reader.threads: repeated (first set at",
        ),
        (
            "redis.url=localhost:6379\n",
            "redis.url: 'localhost:6379' is not a redis://, rediss:// or unix:// URL (or empty)",
        ),
        ("listen.address=0.0.0.0\n", "listen.address: '0.0.0.0' is not host:port or unix:/path"),
        # README's own examples once wrote comments after values.
        (
            "redis.url=redis://redis:6379/0   # several instances\n",
            "redis.url: 'redis://redis:6379/0   # several instances' ends in what looks like a "
            "comment ('# several instances'); in a .properties file a comment goes on a line "
            "of its own",
        ),
        (
            "remote.fetch.max.wait.ms=500  ! then empty\n",
            "remote.fetch.max.wait.ms: '500  ! then empty' ends in what looks like a comment",
        ),
        (
            "segment.store.address=store:7301 store2:7301\n",
            "segment.store.address: 'store:7301 store2:7301' is not host:port or unix:/path",
        ),
        (
            "redis.url=redis://redis:6379/0 x\n",
            "redis.url: 'redis://redis:6379/0 x' is not a redis://",
        ),
        (
            "otel.exporter.otlp.endpoint=collector:4317\n",
            "otel.exporter.otlp.endpoint: 'collector:4317' is not an http:// or https:// URL",
        ),
    ],
)
def test_bad_file_entries_are_refused_naming_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(RemoteFetchConfig, path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # gRPC would bind 0.0.0.0:99999 as port 34463 (99999 mod 65536).
        ("listen.address=0.0.0.0:99999\n", "'0.0.0.0:99999': port 99999 is outside 0..65535"),
        ("segment.store.address=store:0\n", "'store:0': port 0 is outside 1..65535"),
        ("metadata.manager.address=::1:7302\n", "an IPv6 host goes in brackets: [::1]:7302"),
        ("metrics.listen.address=0.0.0.0:65536\n", "port 65536 is outside 0..65535"),
        ("redis.url=redis://redis:70000/0\n", "'redis://redis:70000/0': port '70000' is not in"),
        (
            "otel.exporter.otlp.endpoint=http://collector:0\n",
            "'http://collector:0': port '0' is not in 1..65535",
        ),
    ],
)
def test_ports_out_of_range_are_refused_naming_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as info:
        load_config(RemoteFetchConfig, write(tmp_path, text))
    assert str(info.value).split(": ", 2)[1] == text.partition("=")[0]
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("listen.address", "0.0.0.0:0"),  # any free port
        ("listen.address", "[::1]:7304"),
        ("listen.address", "unix:/run/remotelog/fetch.sock"),
        ("metrics.listen.address", "127.0.0.1:0"),
        ("segment.store.address", "store:65535"),
        ("redis.url", "redis://redis/0"),  # redis-py's default port
    ],
)
def test_addresses_in_range_are_taken(tmp_path, key, value):
    config, sources = load_config(RemoteFetchConfig, write(tmp_path, f"{key}={value}\n"))
    assert dict(shown_settings(config))[key] == value
    assert sources[key].endswith(":1")


def test_bootstrap_servers_each_need_a_port_in_range(tmp_path):
    path = write(tmp_path, "bootstrap.servers=kafka-0:9092, kafka-1:0\n")
    with pytest.raises(ConfigError, match=r"'kafka-0:9092, kafka-1:0': kafka-1:0: port 0 is"):
        load_config(MetadataManagerConfig, path)


async def test_data_goes_under_the_users_home_whatever_the_working_directory(tmp_path, monkeypatch):
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    store = await open_backend(SegmentStoreConfig(), RetrySettings().backoff())
    await store.put("k", b"segment")
    await store.close()
    assert (home / ".local/share/remotelog/segments/k").read_bytes() == b"segment"
    assert list(work.iterdir()) == []
    assert RemoteFetchConfig().index_cache_dir == "~/.local/share/remotelog/index-cache"
    assert MetadataManagerConfig().snapshot_dir == "~/.local/share/remotelog/metadata"


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("kafka:9092", True),
        ("kafka-0:9092,kafka-1:9092", True),
        ("kafka-0:9092, kafka-1:9092", True),  # Kafka's list type trims around commas
        ("kafka:9092 kafka2:9092", False),
        ("kafka:9092,", False),
    ],
)
def test_bootstrap_servers_is_a_list_without_spaces_inside_entries(tmp_path, value, accepted):
    path = write(tmp_path, f"bootstrap.servers={value}\n")
    if accepted:
        assert load_config(MetadataManagerConfig, path)[0].bootstrap_servers == value
    else:
        with pytest.raises(ConfigError, match=r"is not host:port\[,host:port\.\.\.\]"):
            load_config(MetadataManagerConfig, path)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("listen.address", "0.0.0.0:7304"),
        ("listen.address", "[::]:0"),
        ("listen.address", "unix:/run/remotelog/fetch.sock"),
        ("redis.url", ""),
        ("redis.url", "redis://redis:6379/0"),
        ("redis.url", "rediss://user:secret@redis:6380/1"),
        ("redis.url", "unix:///run/redis.sock"),
        ("segment.store.address", "[fd00::1]:7301"),
        ("metadata.manager.address", "unix:/run/remotelog/metadata.sock"),
        ("otel.exporter.otlp.endpoint", "http://otel-collector:4317"),
    ],
)
def test_addresses_in_every_accepted_form(tmp_path, key, value):
    path = write(tmp_path, f"{key}={value}\n")
    config, sources = load_config(RemoteFetchConfig, path)
    assert f"{key}={value}  # {path}:1" in render(config, sources)


def test_choices_and_booleans(tmp_path):
    path = write(tmp_path, "storage.backend=s3\nstorage.s3.path.style.access.enabled=TRUE\n")
    config, _ = load_config(SegmentStoreConfig, path)
    assert (config.storage_backend, config.s3_path_style_access) == ("s3", True)
    with pytest.raises(ConfigError, match="'hdfs' is not one of: filesystem, s3, gcs, azure"):
        load_config(SegmentStoreConfig, write(tmp_path, "storage.backend=hdfs\n", "b.properties"))
    with pytest.raises(ConfigError, match="expected true or false, got 'yes'"):
        load_config(
            SegmentStoreConfig,
            write(tmp_path, "storage.s3.path.style.access.enabled=yes\n", "c.properties"),
        )


def test_environment_typos_are_refused_but_other_services_keys_ignored():
    shared = {"REMOTELOG_BROKER_ID": "3", "REMOTELOG_STORAGE_BACKEND": "s3"}
    config, _ = load_config(
        RemoteFetchConfig, None, shared, service="remote-fetch", all_known_keys=all_config_keys()
    )
    assert config.reader_threads == 10
    with pytest.raises(ConfigError) as info:
        load_config(
            RemoteFetchConfig,
            None,
            {"REMOTELOG_REMOTE_LOG_READER_THREDS": "3"},
            service="remote-fetch",
            all_known_keys=all_config_keys(),
        )
    assert str(info.value).startswith("environment: REMOTELOG_REMOTE_LOG_READER_THREDS: unknown")
    assert "did you mean 'REMOTELOG_REMOTE_LOG_READER_THREADS'" in str(info.value)


def test_secrets_are_masked_when_rendered(tmp_path):
    path = write(tmp_path, "storage.aws.secret.access.key=hunter2\n")
    config, sources = load_config(SegmentStoreConfig, path)
    lines = render(config, sources)
    assert config.aws_secret_access_key == "hunter2"
    assert f"storage.aws.secret.access.key=[hidden]  # {path}:1" in lines
    assert not any("hunter2" in line for line in lines)


@pytest.mark.parametrize("cls", list(SERVICE_CONFIGS.values()))
def test_every_service_config_has_unique_well_formed_keys(cls):
    keys = config_fields(cls)
    assert "listen.address" in keys
    for key in keys:
        assert key == key.lower()
        assert env_name(key).startswith("REMOTELOG_")
    config, _ = load_config(cls)  # defaults satisfy their own bounds
    assert config.listen_address.startswith("127.0.0.1:")


def test_cli_config_check_prints_effective_config(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("REMOTELOG_REMOTE_FETCH_MAX_WAIT_MS", "100")
    path = write(tmp_path, "remote.log.reader.threads=3\n")
    assert main(["config", "check", "--service", "remote-fetch", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"remote.log.reader.threads=3  # {path}:1" in out
    assert "remote.fetch.max.wait.ms=100  # env REMOTELOG_REMOTE_FETCH_MAX_WAIT_MS" in out


def test_cli_config_check_names_the_offending_key(tmp_path, capsys):
    path = write(tmp_path, "listen.adress=0.0.0.0:1\n")
    assert main(["config", "check", "--service", "segment-store", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"remotelog: config error: {path}:1: listen.adress: unknown key for segment-store "
        "(did you mean 'listen.address'?)"
    )


def test_cli_missing_file(tmp_path, capsys):
    assert main(["config", "check", "--service", "segment-store", str(tmp_path / "nope")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_cli_version(capsys):
    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith("remotelog 0.")


DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("service", sorted(SERVICE_CONFIGS))
def test_each_services_documented_properties_load_as_written(tmp_path, service):
    """The example under `remotelog serve <service>` in docs/<service>.md is a valid file."""
    text = (DOCS / f"{service}.md").read_text()
    blocks = text.split("```")[1::2]  # the fenced blocks' contents
    serve = next(i for i, b in enumerate(blocks) if f"remotelog serve {service}" in b)
    example = blocks[serve + 1]
    assert "=" in example, f"docs/{service}.md: no properties after the serve command"
    path = write(tmp_path, example)
    _, sources = load_config(SERVICE_CONFIGS[service], path)
    written = [
        line.split("=", 1)[0] for line in example.splitlines() if line and line[0] not in "#!"
    ]
    from_file = [key for key, source in sources.items() if source.startswith(str(path))]
    assert sorted(from_file) == sorted(written)


def test_the_documented_health_service_names_are_the_services_own():
    from remotelog.fetch import server as fetch
    from remotelog.metadata import server as metadata
    from remotelog.remover import server as remover
    from remotelog.scheduler import server as scheduler
    from remotelog.segmentstore import server as segmentstore

    text = (DOCS / "configuration.md").read_text()
    documented = dict(re.findall(r"^\| ([a-z-]+) \| `([\w.]+)` \|$", text, re.MULTILINE))
    assert documented == {
        "segment-store": segmentstore.SERVICE_NAME,
        "metadata-manager": metadata.SERVICE_NAME,
        "copy-scheduler": scheduler.SERVICE_NAME,
        "remote-fetch": fetch.SERVICE_NAME,
        "partition-remover": remover.SERVICE_NAME,
    }


def test_every_key_is_declared_once_whichever_services_take_it():
    declared: dict[str, set[int]] = {}
    for cls in SERVICE_CONFIGS.values():
        for key, field in config_fields(cls).items():
            declared.setdefault(key, set()).add(id(field))
    # listen.address alone: one declaration (listen_address_setting), a default port each
    assert {key for key, fields in declared.items() if len(fields) > 1} == {"listen.address"}
    shared = (
        "remote.log.metadata.custom.metadata.max.bytes",
        "remote.partition.remover.rpc.timeout.ms",
    )
    assert all(key in declared for key in shared)


def test_the_scheduler_leaves_a_brokers_files_alone_unless_told(tmp_path, capsys):
    config, sources = load_config(CopySchedulerConfig)
    assert config.local_retention_enabled is False
    assert sources["remote.log.manager.local.retention.enabled"] == "default"
    # A sidecar beside a real broker never deletes its segments: refused together.
    path = write(
        tmp_path,
        "remote.log.manager.discovery.enabled=true\nlog.dirs=/var/lib/kafka\n"
        "remote.log.manager.local.retention.enabled=true\n",
    )
    with pytest.raises(ConfigError) as refused:
        load_config(CopySchedulerConfig, path)
    assert refused.value.key == "remote.log.manager.local.retention.enabled"
    assert refused.value.source == f"{path}:3"
    assert "remote.log.manager.discovery.enabled=true" in str(refused.value)
    assert main(["config", "check", "--service", "copy-scheduler", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"remotelog: config error: {path}:3: ")
    assert "remote.log.manager.local.retention.enabled: true together with" in err
    # Either alone loads.
    for kept in ("remote.log.manager.discovery.enabled", "log.dirs"):
        path.write_text(
            "".join(line for line in path.read_text().splitlines(True) if not line.startswith(kept))
        )
    config, _ = load_config(CopySchedulerConfig, path)
    assert config.local_retention_enabled is True
