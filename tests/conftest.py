import asyncio
import gc
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import pytest_asyncio
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.data import KAFKA_LOGS
from support.kafka_security import PLAIN_USERS, SCRAM_USERS, SecuredBroker
from support.scheduling import GroupScheduling, slowest_first
from support.servers import RedisServer, S3Server
from support.services import CloudEmulators
from support.tls import make_certificates

from remotelog.dev.broker import BrokerError
from remotelog.dev.kafka_broker import OPTS_ENV, BrokerTls, KafkaBroker, SaslUsers


def pytest_configure(config: pytest.Config) -> None:
    # The suite starts a hundred-odd short-lived JVMs (brokers, Kafka's tools), most of
    # whose CPU goes to the optimising JIT compiler; C1 alone starts them in half the
    # CPU, and they never run long enough for C2 to pay. Set KAFKA_OPTS to override.
    os.environ.setdefault(OPTS_ENV, "-XX:TieredStopAtLevel=1")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(GroupScheduling())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slowest_first(items)


@pytest.fixture(scope="session")
def kafka_logs() -> Path:
    """Real broker-written partition directories (read-only; see tests/data/kafka-logs)."""
    if not KAFKA_LOGS.is_dir():
        pytest.fail(f"test data missing: {KAFKA_LOGS}")
    return KAFKA_LOGS


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server with fault injection, on a free loopback port, in its own process."""
    try:
        server = S3Server()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_endpoint(s3_server):
    return s3_server.endpoint


@pytest.fixture(scope="session")
def cloud_emulators():
    """GCS's emulator and Azurite, each started when a test of this worker first needs it."""
    emulators = CloudEmulators()
    yield emulators
    emulators.stop()


_SPANS = pytest.StashKey[InMemorySpanExporter]()


@pytest.fixture(scope="session")
def telemetry(pytestconfig):
    """In-memory SDK providers, installed once for the process (OpenTelemetry allows one)."""
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)
    pytestconfig.stash[_SPANS] = spans
    return reader, spans


@pytest.fixture(autouse=True)
def _spans_of_this_test_only(pytestconfig):
    """Once tracing is installed every call of every later test makes spans: kept for
    the session they fill memory, and each full garbage collection walks them all."""
    spans = pytestconfig.stash.get(_SPANS, None)
    if spans is not None:
        spans.clear()


@pytest.fixture(scope="session")
def s3_faults(s3_server) -> Callable[..., None]:
    """s3_faults(mode, count, method=None, delay_ms=0, suffix=""): the next `count`
    matching requests (of `method`, to keys ending in `suffix`) fail.

    Mode "slow" answers them normally after `delay_ms` instead; mode None clears them.
    """

    def inject(
        mode: str | None,
        count: int = 1,
        method: str | None = None,
        delay_ms: int = 0,
        suffix: str = "",
    ) -> None:
        if mode is None:
            s3_server.clear_faults()
        else:
            s3_server.inject(
                mode=mode, count=count, method=method, delay_ms=delay_ms, suffix=suffix
            )

    return inject


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    """Apache Kafka (KRaft, one node, jars from `make setup`) on free loopback ports,
    shared by the run: its start-up (about 5 s here) is paid once."""
    try:
        running = KafkaBroker(tmp_path_factory.mktemp("kafka")).start()
    except BrokerError as exc:
        pytest.fail(str(exc))
    yield running
    running.stop()


@pytest.fixture(scope="session")
def secured_broker(tmp_path_factory) -> SecuredBroker:
    """Apache Kafka with SASL_SSL (SCRAM-SHA-512 and PLAIN users) and SSL (client
    certificates required) listeners beside PLAINTEXT, which the tests read through."""
    directory = tmp_path_factory.mktemp("secured-kafka")
    certificates = make_certificates(directory)
    broker = KafkaBroker(
        directory / "broker",
        tls=BrokerTls(certificates.server_cert, certificates.server_key, certificates.ca),
        sasl_users=SaslUsers(scram_sha_512=SCRAM_USERS, plain=PLAIN_USERS),
    )
    try:
        broker.start()
    except BrokerError as exc:
        pytest.fail(str(exc))
    yield SecuredBroker(broker, certificates)
    broker.stop()


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for the run, with the remotelog source registered and
    Spark's own Kafka source on its classpath. Its Python workers run this
    interpreter, the one remotelog is installed in."""
    from remotelog.dev.spark_session import kafka_source_jars, local_session

    session = local_session(
        "remotelog-tests",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.python.filterPushdown.enabled": "true",
        },
        jars=kafka_source_jars(),
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    """redis-server (Debian's package, installed by `make setup`) on a free loopback port."""
    try:
        server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield server.url
    server.stop()


_MODULE = pytest.StashKey[str]()


@pytest_asyncio.fixture(autouse=True)
async def loop_reports_nothing(request):
    """Fail a test during which the event loop reported an unhandled error.

    asyncio reports what no code handled (a task's exception never retrieved, an
    async generator that failed while the garbage collector closed it) to its
    exception handler, which only logs. In a service those are real faults
    (leaked streams, lost errors); here they fail the test that caused them.

    The collection that finds them walks only what is new since the last test's
    (gc.freeze): a full one, over the Spark, gRPC and Kafka clients' objects a worker
    holds, took 0.1-0.5 s a test. The first test of each module walks everything, so
    what the previous module's fixtures dropped at their teardown is found there.
    """
    module = request.node.nodeid.split("::", 1)[0]
    if request.config.stash.get(_MODULE, None) != module:
        request.config.stash[_MODULE] = module
        gc.unfreeze()
    loop = asyncio.get_running_loop()
    reported: list[dict] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        yield
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
        gc.freeze()
    assert not reported, "the event loop reported: " + "; ".join(
        f"{c.get('message')}: {c.get('exception')!r}" for c in reported
    )
