"""Transactions (KIP-98's second half): the coordinator, its state machine, markers and read_committed reads."""
