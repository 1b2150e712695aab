"""Partitions as leader or follower: the partition state machine, the replica manager, the follower fetcher and
the ISR manager."""
