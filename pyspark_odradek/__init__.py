"""Lets Spark find the ``odradek`` data source by itself.

PySpark 4 looks, when a session first resolves a Python data source, for top-level modules named ``pyspark_*``
that define ``DefaultSource`` (a ``DataSource`` subclass), and registers each under its ``name()`` (SPARK-45917).
This package is that module; the connector itself lives in :mod:`odradek_spark`, so nothing here needs a
``register`` call and ``odradek_spark.register(spark)`` keeps working for explicit use.
"""

from odradek_spark.source import OdradekDataSource as DefaultSource

__all__ = ["DefaultSource"]
