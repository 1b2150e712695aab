"""The replication throttle (Kafka's KIP-73 replication quotas), enforced on both ends of replication traffic.

Settings, as in Kafka:

* broker dynamic configs ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate``
  (bytes/s) under ``/config/brokers/<id>``, else ``/config/brokers/<default>``;
* topic configs ``leader.replication.throttled.replicas`` and ``follower.replication.throttled.replicas``:
  ``partition:broker`` pairs separated by commas, or ``*`` for every replica.

The leader limits what it sends to a follower of a partition listed for it (``p:<leader id>`` in the leader
list) and the follower limits what it fetches for a partition listed for it (``p:<own id>`` in the follower
list); each side has one budget for all such partitions. Followers already in the ISR are not throttled (Kafka
exempts them, so a throttle never slows down the acknowledgement of acks=all writes). The reassignment tool sets
all four (``--execute --throttle``) and removes them (``--verify`` once done).

Both sides read their settings from the metadata cache on every fetch, so a change (a ``/config/changes``
notification, broker/metadata/watcher.py) applies to the next fetch, without a restart.

Concurrency: owned by the broker's event loop.
"""

from __future__ import annotations

from broker.metadata.cache import MetadataCache
from broker.quotas import DEFAULT, TokenBucket

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"


def listed(value: str, partition: int, broker_id: int) -> bool:
    """Whether ``p:broker`` (or ``*``) is in a throttled-replicas list."""
    items = {item.strip() for item in value.split(",")}
    return "*" in items or f"{partition}:{broker_id}" in items


class ReplicationThrottle:
    def __init__(self, broker_id: int, cache: MetadataCache) -> None:
        self.broker_id = broker_id
        self._cache = cache
        self._buckets: dict[str, TokenBucket] = {}

    def rate(self, key: str) -> int | None:
        for name in (str(self.broker_id), DEFAULT):
            value = self._cache.dynamic.get(("brokers", name), {}).get(key)
            if value is not None:
                try:
                    rate = int(value)
                except ValueError:
                    return None
                return rate if rate > 0 else None
        return None

    def _limit(self, rate_key: str, replicas_key: str, topic: str, partition: int,
               replica_in_isr: bool) -> TokenBucket | None:
        if replica_in_isr:
            return None
        rate = self.rate(rate_key)
        if rate is None:
            self._buckets.pop(rate_key, None)
            return None
        if not listed(self._cache.configs.get(topic, {}).get(replicas_key, ""), partition, self.broker_id):
            return None
        bucket = self._buckets.get(rate_key)
        if bucket is None:
            bucket = self._buckets[rate_key] = TokenBucket(rate)
        elif bucket.rate != rate:
            bucket.set_rate(rate)
        return bucket

    def leader_limit(self, topic: str, partition: int, follower_in_isr: bool) -> TokenBucket | None:
        """The budget a leader spends on a follower's fetch of this partition, or None when not throttled."""
        return self._limit(LEADER_RATE, LEADER_REPLICAS, topic, partition, follower_in_isr)

    def follower_limit(self, topic: str, partition: int, in_isr: bool) -> TokenBucket | None:
        """The budget this broker spends fetching this partition as a follower, or None when not throttled."""
        return self._limit(FOLLOWER_RATE, FOLLOWER_REPLICAS, topic, partition, in_isr)
