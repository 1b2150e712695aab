"""Tests of the commit log (broker/log) and the record batch codec (odradek/records.py)."""
