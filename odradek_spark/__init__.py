"""Spark connector for Odradek: a PySpark 4 Python Data Source named ``odradek`` that reads and writes topics the
way Spark's built-in Kafka source and sink do (same schema, same option names, same offset semantics).

Importing this package registers nothing and imports neither PySpark nor pyarrow: call :func:`register` on a
session, then use ``spark.read.format("odradek")``, ``spark.readStream``, ``df.write`` or ``df.writeStream``.
See :mod:`odradek_spark.source` for the options and the delivery guarantees.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORMAT", "register"]

FORMAT = "odradek"


def register(spark: Any) -> None:
    """Register the data source with ``spark`` (a ``SparkSession``), so ``format("odradek")`` resolves."""
    from odradek_spark.source import OdradekDataSource

    spark.dataSource.register(OdradekDataSource)
