"""Kafka's AclAuthorizer rules: Deny wins, implied Describe, wildcards, prefixes, super users, no-ACL default."""

from __future__ import annotations

import pytest

from broker.security.authorizer import Acl, Authorizer, normalize_operation


def _authz(acls: dict[tuple[str, str], dict[str, list[Acl]]], allow_if_none: bool = False) -> Authorizer:
    a = Authorizer({"User:admin"}, allow_if_none)
    a.replace(acls)
    return a


def test_deny_wins_over_allow_and_all() -> None:
    a = _authz({("Topic", "LITERAL"): {"t": [Acl("User:alice", "Allow", "All"), Acl("User:alice", "Deny", "Write")]}})
    assert a.authorize("User:alice", "1.2.3.4", "Read", "Topic", "t")
    assert not a.authorize("User:alice", "1.2.3.4", "Write", "Topic", "t")
    assert not a.authorize("User:bob", "1.2.3.4", "Read", "Topic", "t")
    assert a.authorize("User:admin", "1.2.3.4", "Write", "Topic", "t")  # super user


def test_implied_operations() -> None:
    a = _authz({("Topic", "LITERAL"): {"t": [Acl("User:alice", "Allow", "Write"),
                                             Acl("User:alice", "Allow", "AlterConfigs")]}})
    assert a.authorize("User:alice", "h", "Describe", "Topic", "t")
    assert a.authorize("User:alice", "h", "DescribeConfigs", "Topic", "t")
    assert not a.authorize("User:alice", "h", "Read", "Topic", "t")
    assert not a.authorize("User:alice", "h", "Delete", "Topic", "t")


def test_wildcards_prefixes_and_hosts() -> None:
    a = _authz({
        ("Topic", "LITERAL"): {"*": [Acl("User:*", "Allow", "Describe")]},
        ("Topic", "PREFIXED"): {"orders-": [Acl("User:bob", "Allow", "Read", "10.0.0.1")]},
        ("Group", "PREFIXED"): {"g": [Acl("User:bob", "Deny", "Read")]},
    })
    assert a.authorize("User:carol", "h", "Describe", "Topic", "anything")
    assert a.authorize("User:bob", "10.0.0.1", "Read", "Topic", "orders-eu")
    assert not a.authorize("User:bob", "10.0.0.2", "Read", "Topic", "orders-eu")
    assert not a.authorize("User:bob", "10.0.0.1", "Read", "Topic", "order")
    assert not a.authorize("User:bob", "h", "Read", "Group", "g1")


def test_no_acl_found_default() -> None:
    assert not _authz({}).authorize("User:alice", "h", "Read", "Topic", "t")
    assert _authz({}, allow_if_none=True).authorize("User:alice", "h", "Read", "Topic", "t")


@pytest.mark.parametrize("raw,want", [("READ", "Read"), ("describe_configs", "DescribeConfigs"),
                                      ("ClusterAction", "ClusterAction"), ("all", "All")])
def test_operation_names(raw: str, want: str) -> None:
    assert normalize_operation(raw) == want
