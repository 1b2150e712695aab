"""Consumer groups coordinated through ZooKeeper (arrives with the consumer-group issue)."""
