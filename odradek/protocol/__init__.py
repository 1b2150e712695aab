"""The wire contract shared by brokers, the client and the Spark connector: record batches, errors, media types,
the partitioner and the domain model. It imports nothing of the client, the broker or ZooKeeper."""
