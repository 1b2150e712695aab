"""The commit log: segments, indexes, recovery, retention and compaction of partition replicas.

Imports only the standard library and ``odradek`` (the record codec and the error table): no ZooKeeper, no
HTTP, no controller. The broker uses ``LogManager`` (one per data directory) and ``Log`` (one per partition
replica); ``LogConfig`` parses Kafka topic-config names.
"""

from .config import LogConfig
from .epoch_cache import LeaderEpochCache
from .log import AppendResult, Log, ReadResult
from .manager import LogManager

__all__ = ["AppendResult", "LeaderEpochCache", "Log", "LogConfig", "LogManager", "ReadResult"]
