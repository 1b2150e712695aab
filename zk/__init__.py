"""Everything that talks to ZooKeeper: znode paths and codecs, the kazoo facade, the ensemble launcher."""
