"""What the broker knows of the cluster: the metadata cache fed by ZooKeeper watches, and the single-owner event
queue those watches signal."""
