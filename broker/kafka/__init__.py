"""Kafka's wire protocol: the broker's second front door, beside HTTP, over the same services.

Layers, as Kafka's own broker has them:

* :mod:`~broker.kafka.listeners`: ``--kafka-listeners`` / ``--kafka-advertised-listeners`` in Kafka's syntax;
* :mod:`~broker.kafka.network`: the socket server (size-prefixed frames, one request at a time per connection,
  responses in request order, limits and idle timeout, TLS, KIP-219 muting);
* :mod:`~broker.kafka.sasl`: SASL before any other request on SASL listeners (PLAIN, SCRAM-SHA-256/512 against
  the ``/config/users`` credentials); :mod:`~broker.kafka.authorization`: the connection's principal, asked of
  the HTTP door's authorizer; :mod:`~broker.kafka.quotas`: client quotas on Produce and Fetch;
* :mod:`~broker.kafka.codec`: request and response headers, message bodies (kio's generated schemas), and the
  table of API versions served;
* :mod:`~broker.kafka.apis`: ``KafkaApis``, one handler per API (decode, authorize, call a service, answer);
* :mod:`~broker.kafka.partitions` and :mod:`~broker.kafka.fetch`: the data path's services (produce, fetch with
  its sessions, offsets; leader-only, as a Kafka client expects: nothing is forwarded) and Kafka's fetch rules
  (``min_bytes``, ``max_wait``, response and partition byte limits); :mod:`~broker.kafka.leader_epochs`:
  OffsetForLeaderEpoch;
* :mod:`~broker.kafka.coordinators` (FindCoordinator), :mod:`~broker.kafka.groups` (Kafka's classic group
  protocol, DescribeGroups, ListGroups, DeleteGroups) and :mod:`~broker.kafka.group_offsets` (OffsetCommit,
  OffsetFetch, OffsetDelete): consumer groups, on the group's coordinator (NOT_COORDINATOR elsewhere);
* :mod:`~broker.kafka.request_metrics`: every request counted per API in /metrics.

Invariant: nothing here imports ZooKeeper, the log or a partition's internals (an import-linter contract in
pyproject.toml); storage and coordination stay behind the services the HTTP API calls too.

This package's ``__init__`` imports nothing, so ``broker.config`` can import the listener parser cheaply.
"""
