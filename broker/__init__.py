"""The Odradek broker: its process, controller, HTTP API and (in broker.log) the commit log."""
