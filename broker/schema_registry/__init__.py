"""Confluent Schema Registry served by every broker (issue 26, docs/schema-registry.md).

``formats`` parses schemas and holds each format's compatibility rules (pure functions, table-tested),
``store`` is the registry's state as the ``_schemas`` topic's records build it, and ``service`` keeps that
state current on every broker and routes writes to the one primary elected through ZooKeeper.
"""
