"""`spark.read.format("remotelog")`: a Kafka topic's records with the schema of Spark's
Kafka source, history read from the remote tier, the tail (optionally) from the broker.
The batch reader is in batch.py, the streaming one in stream.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from remotelog.spark.options import headers_included, parse_options

if TYPE_CHECKING:
    from remotelog.spark.batch import RemotelogReader
    from remotelog.spark.stream import RemotelogStreamReader


def _fields(*named: tuple[str, DataType]) -> list[StructField]:
    return [StructField(name, kind, nullable=True) for name, kind in named]


# Spark's Kafka source schema, column for column. A StructType, not DDL: Spark's JVM
# reads it as JSON, where DDL takes its SQL parser, cold in a session's first query.
KAFKA_SCHEMA = StructType(
    _fields(
        ("key", BinaryType()),
        ("value", BinaryType()),
        ("topic", StringType()),
        ("partition", IntegerType()),
        ("offset", LongType()),
        ("timestamp", TimestampType()),
        ("timestampType", IntegerType()),
    )
)
HEADERS_FIELD = StructField(
    "headers",
    ArrayType(StructType(_fields(("key", StringType()), ("value", BinaryType())))),
    nullable=True,
)


class RemotelogDataSource(DataSource):
    """Spark starts a Python process to create the source (its schema) and another to
    plan a read, and each imports this module first: the readers, and with them gRPC,
    Arrow and the record decoders, are imported only by the processes that use them
    (bench/README.md, "The first query")."""

    @classmethod
    def name(cls) -> str:
        return "remotelog"

    def schema(self) -> StructType:
        if headers_included(self.options):
            return StructType([*KAFKA_SCHEMA.fields, HEADERS_FIELD])
        return KAFKA_SCHEMA

    def reader(self, schema: Any) -> RemotelogReader:
        from remotelog.spark.batch import FilteringReader, RemotelogReader

        options = parse_options(self.options)
        return FilteringReader(options) if options.push_filters else RemotelogReader(options)

    def streamReader(self, schema: Any) -> RemotelogStreamReader:
        from remotelog.spark.stream import RemotelogStreamReader

        return RemotelogStreamReader(parse_options(self.options, streaming=True))
