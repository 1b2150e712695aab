"""Kafka's wire protocol: the broker's second front door, beside HTTP, over the same services.

Layers, as Kafka's own broker has them:

* :mod:`~broker.kafka.listeners`: ``--kafka-listeners`` / ``--kafka-advertised-listeners`` in Kafka's syntax;
* :mod:`~broker.kafka.network`: the socket server (size-prefixed frames, one request at a time per connection,
  responses in request order, limits and idle timeout);
* :mod:`~broker.kafka.codec`: request and response headers, message bodies (kio's generated schemas), and the
  table of API versions served;
* :mod:`~broker.kafka.apis`: ``KafkaApis``, one handler per API (decode, authorize, call a service, answer);
* :mod:`~broker.kafka.partitions` and :mod:`~broker.kafka.fetch`: the leader-only produce, read and offset calls
  a Kafka client expects (a client goes to the leader itself: nothing is forwarded) over the produce and fetch
  services, and Kafka's fetch rules (``min_bytes``, ``max_wait``, response and partition byte limits).

Invariant: nothing here imports ZooKeeper, the log or a partition's internals (an import-linter contract in
pyproject.toml); storage and coordination stay behind the services the HTTP API calls too.

This package's ``__init__`` imports nothing, so ``broker.config`` can import the listener parser cheaply.
"""
