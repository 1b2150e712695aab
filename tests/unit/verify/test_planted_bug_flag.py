"""`odradek verify --unsafe-ack-before-isr` plants its bug by giving the run's brokers the broker flag
``--unsafe-ack-before-isr`` (not through the environment), and only when asked; a cluster the run does not start
cannot be given it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from odradek_verify import cli


class FakeCluster:
    """Records how the run would start its cluster; starts nothing."""

    def __init__(self, data_dir: Path, **kw: Any) -> None:
        self.broker_args: list[str] = kw["broker_args"]
        self.slots: dict[int, Any] = {}
        self.started = False

    def up(self, timeout: float) -> None:
        self.started = True


def _started_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *flags: str) -> FakeCluster:
    monkeypatch.setattr(cli, "VerifyCluster", FakeCluster)
    monkeypatch.delenv("ODRADEK_UNSAFE_ACK_BEFORE_ISR", raising=False)
    args = cli.build_parser().parse_args(["--out", str(tmp_path), "--netns", "off", *flags])
    run = cli.Run(args)
    run._start_cluster(["kill-broker"])
    assert run.cluster.started
    assert "ODRADEK_UNSAFE_ACK_BEFORE_ISR" not in os.environ  # nothing leaks into the environment
    return run.cluster


def test_the_planted_bug_is_a_broker_flag_of_the_runs_brokers(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    assert "--unsafe-ack-before-isr" in _started_with(tmp_path, monkeypatch, "--unsafe-ack-before-isr").broker_args
    assert "--unsafe-ack-before-isr" not in _started_with(tmp_path, monkeypatch).broker_args
    assert "--unsafe-ack-before-isr" not in cli.build_parser().format_help()  # hidden from users


def test_the_planted_bug_is_refused_for_an_attached_cluster(tmp_path: Path) -> None:
    args = cli.build_parser().parse_args(["--out", str(tmp_path), "--bootstrap-server", "127.0.0.1:1",
                                          "--unsafe-ack-before-isr"])
    with pytest.raises(cli.RunError, match="--bootstrap-server"):
        cli.Run(args)._attach(["kill-broker"])


def test_the_replica_fetch_transport_is_given_to_every_broker_only_when_chosen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = _started_with(tmp_path, monkeypatch, "--replica-fetch-transport", "kafka").broker_args
    assert args[args.index("--replica-fetch-transport") + 1] == "kafka"
    assert "--replica-fetch-transport" not in _started_with(tmp_path, monkeypatch).broker_args  # the brokers' default
