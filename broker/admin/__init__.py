"""Topic administration as Kafka's AdminZkClient does it: validate, assign replicas, write ZooKeeper."""
