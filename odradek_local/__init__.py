"""The local launcher: ZooKeeper JVMs and broker processes on this machine, owned by pid (odradek cluster)."""
