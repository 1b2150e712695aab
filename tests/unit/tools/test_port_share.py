"""Parallel test workers pick ports from slices of their own (odradek_local.cluster.PORT_SHARE_ENV)."""

from __future__ import annotations

import itertools

import pytest

from odradek_local.cluster import PORT_SHARE_ENV, listen_port_range


def test_the_shares_split_the_range_into_disjoint_slices_that_cover_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORT_SHARE_ENV, raising=False)
    low, high = listen_port_range()
    slices = []
    for i in range(3):
        monkeypatch.setenv(PORT_SHARE_ENV, f"{i}/3")
        slices.append(listen_port_range())
    assert slices[0][0] == low and slices[-1][1] > high - 3  # the whole range but a remainder under 3 ports
    for (_, end), (start, _) in itertools.pairwise(slices):
        assert end == start  # adjacent, so disjoint ([start, end) each)
    assert all(end - start >= (high - low) // 3 for start, end in slices)


def test_without_a_share_the_range_is_the_whole_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_SHARE_ENV, "0/1")
    whole = listen_port_range()
    monkeypatch.delenv(PORT_SHARE_ENV)
    assert listen_port_range() == whole
