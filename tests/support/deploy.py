"""What the deployment tests share: the repository's deploy files, `remotelog config
check` run as an operator runs it, and the environment variables the services read."""

import subprocess
from pathlib import Path

from support.cli import run_remotelog

from remotelog.cli.services import SERVICE_CONFIGS, all_config_keys
from remotelog.core.config import load_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SERVICES = tuple(SERVICE_CONFIGS)


def config_check(service: str, path: Path) -> subprocess.CompletedProcess[str]:
    """`remotelog config check --service SERVICE PATH`, as a separate process."""
    return run_remotelog("config", "check", "--service", service, str(path))


def effective(service: str, path: Path, environment: dict[str, str] | None = None):
    """The service's config from the file and `environment` (REMOTELOG_* variables)."""
    config, _ = load_config(
        SERVICE_CONFIGS[service],
        path,
        environment or {},
        service=service,
        all_known_keys=all_config_keys(),
    )
    return config


def environment_key(name: str) -> str | None:
    """The config key a REMOTELOG_* variable sets, None if it sets none."""
    keys = {"REMOTELOG_" + key.upper().replace(".", "_"): key for key in all_config_keys()}
    return keys.get(name)


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def host_of(address: str) -> str:
    """The host of `host:port` or of a URL `scheme://host:port/...`."""
    authority = address.split("://", 1)[-1].split("/", 1)[0]
    return authority.rsplit(":", 1)[0]
