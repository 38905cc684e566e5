"""The `remotelog` PySpark data source: `spark.dataSource.register(RemotelogDataSource)`,
then `spark.read.format("remotelog")` with the options of Spark's Kafka source."""

from remotelog.spark.source import RemotelogDataSource


def register(spark: object) -> None:
    """Register the source with a SparkSession under the name `remotelog`."""
    spark.dataSource.register(RemotelogDataSource)  # type: ignore[attr-defined]


__all__ = ["RemotelogDataSource", "register"]
