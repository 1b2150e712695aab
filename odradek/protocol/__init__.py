"""The wire contract shared by brokers, the client and the Spark connector: record batches, errors, media types,
the partitioner, the domain model and the member side of the group protocol (``group_member``, sans-I/O). It
imports nothing of the client, the broker or ZooKeeper."""
