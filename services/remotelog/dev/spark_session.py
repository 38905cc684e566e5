"""A local SparkSession with the `remotelog` source registered: for the demo, the
benchmarks and the tests, which each run Spark on this machine."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from remotelog.process.memory import GLIBC_TUNABLES
from remotelog.spark import register


def local_session(app_name: str, conf: Mapping[str, str] | None = None, cores: int = 2) -> Any:
    """`local[cores]`, on loopback, no UI; `conf` adds Spark settings.

    Spark's Python workers must run the interpreter remotelog is installed in:
    the JVM starts them from PYSPARK_PYTHON, set here to this one. They start with
    the services' malloc thresholds: on glibc's defaults each chunk's message and
    column buffers are mapped fresh and their pages faulted in, and keeping freed
    memory made fetch and decode 25-30% faster (bench/README.md).
    """
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # else a warning per start
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.executorEnv.GLIBC_TUNABLES", GLIBC_TUNABLES)
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
