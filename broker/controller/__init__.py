"""The controller: one broker at a time, elected through ZooKeeper, owns partition leadership decisions."""
