"""A local SparkSession with the `remotelog` source registered: for the demo, the
benchmarks and the tests, which each run Spark on this machine."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from remotelog.process.memory import GLIBC_TUNABLES
from remotelog.spark import register

KAFKA_SOURCE_ENV = "SPARK_KAFKA_JARS_DIR"
# The checkout this module sits in: services/remotelog/dev/spark_session.py.
_CHECKOUT_KAFKA_SOURCE = Path(__file__).resolve().parents[3] / ".tools" / "spark-kafka" / "jars"
_CONNECTOR = "spark-sql-kafka-0-10_2.13-"


class SparkSetupError(Exception):
    """What Spark needs that is not on this machine, and how to get it."""


def kafka_source_jars(configured: str | None = None) -> list[Path]:
    """The jars of Spark's own Kafka source (`format("kafka")`), from `configured`, else
    KAFKA_SOURCE_ENV's folder, else the checkout's, which `make setup` fills. The
    connector must be of the running pyspark's minor version: Spark's internal APIs,
    which it uses, change between minor versions."""
    import pyspark

    configured = configured or os.environ.get(KAFKA_SOURCE_ENV)
    folder = Path(configured) if configured else _CHECKOUT_KAFKA_SOURCE
    jars = sorted(folder.glob("*.jar"))
    connector = [
        jar.name.removeprefix(_CONNECTOR) for jar in jars if jar.name.startswith(_CONNECTOR)
    ]
    if not connector:
        where = f"{KAFKA_SOURCE_ENV}={configured}" if configured else str(folder)
        raise SparkSetupError(
            f"Spark's Kafka source is not in {where}: run `make setup` in the remotelog "
            f"checkout, or set {KAFKA_SOURCE_ENV} to a folder of {_CONNECTOR}*.jar "
            "and its dependencies"
        )
    version = connector[0].removesuffix(".jar")
    if version.split(".")[:2] != pyspark.__version__.split(".")[:2]:
        raise SparkSetupError(
            f"Spark's Kafka source {version} in {folder} does not match pyspark "
            f"{pyspark.__version__}: the two must share a minor version"
        )
    return jars


def local_session(
    app_name: str,
    conf: Mapping[str, str] | None = None,
    cores: int = 2,
    jars: Sequence[Path] = (),
) -> Any:
    """`local[cores]`, on loopback, no UI; `conf` adds Spark settings, `jars` go on
    spark.jars (`kafka_source_jars()` for `format("kafka")`).

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
    if jars:
        builder = builder.config("spark.jars", ",".join(str(jar) for jar in jars))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
