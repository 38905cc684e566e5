"""The `remotelog` command as an operator runs it: a separate process."""

import subprocess
import sys


def run_remotelog(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """`remotelog ARGS...` under this interpreter: its exit status, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "remotelog.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
