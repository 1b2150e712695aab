"""The transactional checks (odradek_verify/txn_checker.py) on hand-made histories: a clean history passes with
every check reported as run, and each anomaly, planted alone, is found by its check and by no other failing one."""

from __future__ import annotations

from typing import Any

from odradek_verify import report, txn_checker
from odradek_verify.txn_checker import strongly_connected
from odradek_verify.workload import History, TxnOp, TxnPollOp

A, B = "t-txn-a", "t-txn-b"


def _txn(txn: str, outcome: str | None, writes: list[tuple[str, int]], reads: list[tuple[str, int, int, str]] = (),
         intent: str = "commit") -> TxnOp:
    return TxnOp(txn, txn.split(".")[0], intent, bool(reads),
                 [(t, p, f"{txn}:{i}") for i, (t, p) in enumerate(writes)], list(reads), 0.0, 1.0, outcome)


def _clean() -> tuple[History, dict[tuple[str, int], list[tuple[int, str]]]]:
    """w.1 committed on A/0 and B/0; w.2 aborted on A/0 and B/1; w.3 committed on A/0 and B/1; a processor p.1
    read w.1's A/0 record and wrote B/0. Final read: what read_committed shows (markers and aborted records take
    offsets the read skips)."""
    h = History()
    h.txns = [_txn("w.1", "committed", [(A, 0), (B, 0)]),
              _txn("w.2", "aborted", [(A, 0), (B, 1)], intent="abort"),
              _txn("w.3", "committed", [(A, 0), (B, 1)]),
              _txn("p.1", "committed", [(B, 0)], reads=[(A, 0, 0, "w.1:0")])]
    final = {(A, 0): [(0, "w.1:0"), (4, "w.3:0")], (B, 0): [(0, "w.1:1"), (2, "p.1:0")],
             (B, 1): [(3, "w.3:1")], (A, 1): []}
    h.txn_polls = [TxnPollOp("r", 1, A, 0, 0, "w.1:0", 1.0), TxnPollOp("r", 1, A, 0, 4, "w.3:0", 2.0),
                   TxnPollOp("r", 1, B, 0, 0, "w.1:1", 1.0), TxnPollOp("r", 1, B, 0, 2, "p.1:0", 2.0),
                   TxnPollOp("p", 1, A, 0, 0, "w.1:0", 1.0)]
    return h, final


def _counts(result: dict[str, Any]) -> dict[str, int]:
    return {k: c["count"] for k, c in result["checks"].items()}


def _only(result: dict[str, Any], name: str, count: int = 1) -> None:
    counts = _counts(result)
    assert counts[name] == count, counts
    assert all(n == 0 for k, n in counts.items() if k != name), counts


def test_a_clean_history_passes_and_every_check_says_it_ran() -> None:
    h, final = _clean()
    r = txn_checker.check_txn(h, final)
    assert set(r["checks"]) == {"G1a", "torn-transaction", "lost-write", "duplicate", "unexpected", "poll-skip",
                                "nonmonotonic-poll", "G0", "G1c", "G2"}
    assert all(c["ran"] for c in r["checks"].values())
    assert all(n == 0 for n in _counts(r).values()), _counts(r)
    assert (r["committed"], r["aborted"], r["unknown"], r["consume_transform_produce"]) == (3, 1, 0, 1)
    assert r["graph"]["wr_edges"] == 1 and r["graph"]["ww_edges"] >= 2
    assert txn_checker.failed_checks(r) == []


def test_aborted_read_by_a_reader_is_g1a() -> None:
    h, final = _clean()
    h.txn_polls.append(TxnPollOp("r", 1, B, 1, 1, "w.2:1", 1.5))
    r = txn_checker.check_txn(h, final)
    _only(r, "G1a")
    assert r["checks"]["G1a"]["examples"][0]["txn"] == "w.2" and r["checks"]["G1a"]["examples"][0]["reader"] == "r"
    assert txn_checker.failed_checks(r) == ["G1a"]


def test_aborted_read_by_the_final_read_and_by_a_processor_is_g1a() -> None:
    h, final = _clean()
    final[(A, 0)].insert(1, (1, "w.2:0"))  # the final read served an aborted record
    h.txns.append(_txn("p.2", "committed", [(B, 2)], reads=[(A, 0, 1, "w.2:0")]))
    final[(B, 2)] = [(0, "p.2:0")]
    r = txn_checker.check_txn(h, final)
    assert r["checks"]["G1a"]["count"] == 1 and r["checks"]["G1a"]["reads"] == 1  # final read (p.2 polled nothing)
    h.txn_polls.append(TxnPollOp("p", 1, A, 0, 1, "w.2:0", 1.5))
    r = txn_checker.check_txn(h, final)
    assert r["checks"]["G1a"]["count"] == 1 and r["checks"]["G1a"]["reads"] == 2


def test_an_unknown_transaction_seen_is_no_aborted_read() -> None:
    h, final = _clean()
    h.txns[1].outcome, h.txns[1].intent = "unknown", "commit"  # its commit's answer was lost: it may be visible
    h.txn_polls = []  # (r's polls of A/0 at 0 then 4 would now skip offset 1)
    final[(A, 0)].insert(1, (1, "w.2:0"))
    final[(B, 1)].insert(0, (1, "w.2:1"))
    r = txn_checker.check_txn(h, final)
    assert all(n == 0 for n in _counts(r).values()), _counts(r)


def test_a_committed_transaction_seen_in_part_is_torn_and_lost() -> None:
    h, final = _clean()
    final[(B, 1)] = []  # w.3's B/1 record missing (its marker never written there)
    r = txn_checker.check_txn(h, final)
    counts = _counts(r)
    assert counts["torn-transaction"] == 1 and counts["lost-write"] == 1, counts
    assert r["checks"]["torn-transaction"]["examples"][0]["missing"] == ["w.3:1"]
    assert r["checks"]["lost-write"]["records"] == 1
    assert sorted(txn_checker.failed_checks(r)) == ["lost-write", "torn-transaction"]


def test_an_unknown_transaction_seen_in_part_is_torn_not_lost() -> None:
    h, final = _clean()
    h.txns[2].outcome = "unknown"
    final[(B, 1)] = []
    r = txn_checker.check_txn(h, final)
    _only(r, "torn-transaction")
    assert r["checks"]["torn-transaction"]["examples"][0]["outcome"] == "unknown"


def test_an_unknown_transaction_seen_whole_or_not_at_all_passes() -> None:
    h, final = _clean()
    h.txns[2].outcome = "unknown"
    final[(A, 0)] = [(0, "w.1:0")]
    final[(B, 1)] = []
    r = txn_checker.check_txn(h, final)
    assert all(n == 0 for n in _counts(r).values()), _counts(r)


def test_a_committed_transaction_never_seen_is_a_lost_write_not_torn() -> None:
    h, final = _clean()
    final[(A, 0)] = [(0, "w.1:0")]
    final[(B, 1)] = []
    r = txn_checker.check_txn(h, final)
    _only(r, "lost-write")
    assert r["checks"]["lost-write"]["examples"][0]["txn"] == "w.3"


def test_a_transaction_that_never_ended_counts_as_unknown() -> None:
    h, final = _clean()
    h.txns[2].outcome = None
    final[(B, 1)] = []
    r = txn_checker.check_txn(h, final)
    assert r["unknown"] == 1
    _only(r, "torn-transaction")


def test_a_record_read_twice_is_a_duplicate() -> None:
    h, final = _clean()
    final[(B, 1)].append((5, "w.3:1"))
    r = txn_checker.check_txn(h, final)
    assert _counts(r)["duplicate"] == 1
    assert r["checks"]["duplicate"]["examples"][0] == {"value": "w.3:1", "at": [(B, 1, 3), (B, 1, 5)]}


def test_a_record_nobody_wrote_is_unexpected() -> None:
    h, final = _clean()
    final[(A, 1)] = [(0, "ghost.1:0")]
    _only(txn_checker.check_txn(h, final), "unexpected")


def test_a_poll_jumping_over_a_committed_record_is_a_poll_skip() -> None:
    h, final = _clean()
    final[(A, 0)].insert(1, (2, "w.4:0"))
    h.txns.append(_txn("w.4", "committed", [(A, 0)]))
    r = txn_checker.check_txn(h, final)  # r polled 0 then 4 on A/0: it skipped offset 2
    _only(r, "poll-skip")
    assert r["checks"]["poll-skip"]["examples"][0]["skipped"] == 1


def test_a_poll_over_markers_and_aborted_records_is_no_skip() -> None:
    h, final = _clean()  # r polls A/0 at 0 then 4: offsets 1..3 are markers and w.2's aborted record
    assert _counts(txn_checker.check_txn(h, final))["poll-skip"] == 0


def test_a_poll_going_back_within_one_assignment_is_nonmonotonic() -> None:
    h, final = _clean()
    h.txn_polls.append(TxnPollOp("r", 1, A, 0, 0, "w.1:0", 3.0))
    r = txn_checker.check_txn(h, final)
    _only(r, "nonmonotonic-poll")
    assert r["checks"]["nonmonotonic-poll"]["examples"][0]["after"] == 4


def test_a_poll_going_back_in_a_new_assignment_is_fine() -> None:
    h, final = _clean()
    h.txn_polls.append(TxnPollOp("r", 2, A, 0, 0, "w.1:0", 3.0))  # a seek after an abort: a new assignment
    assert all(n == 0 for n in _counts(txn_checker.check_txn(h, final)).values())


def test_a_write_cycle_is_g0_printed_and_reported_not_failing() -> None:
    """x and y both committed on A/0 and A/1, ordered x, y in one and y, x in the other: a ww cycle."""
    h = History()
    h.txns = [_txn("x.1", "committed", [(A, 0), (A, 1)]), _txn("y.1", "committed", [(A, 0), (A, 1)])]
    final = {(A, 0): [(0, "x.1:0"), (1, "y.1:0")], (A, 1): [(0, "y.1:1"), (1, "x.1:1")]}
    r = txn_checker.check_txn(h, final)
    g0 = r["checks"]["G0"]
    assert g0["count"] == 1 and g0["fails"] is False and "Kafka" in g0["note"]
    assert g0["examples"][0]["cycle"][0] == g0["examples"][0]["cycle"][-1]
    assert "-[ww t-txn-a/" in g0["examples"][0]["text"]
    assert r["checks"]["G1c"]["count"] == 0  # no wr edge in it
    assert txn_checker.failed_checks(r) == []
    lines = report.txn_lines(r)
    assert any(line.startswith("  G0 cycle: x.1 -[ww") or line.startswith("  G0 cycle: y.1 -[ww") for line in lines)


def test_a_cycle_through_a_read_is_g1c() -> None:
    """p read x's record (wr x -> p), p's output precedes x's in B/0 (ww p -> x): a G1c cycle."""
    h = History()
    h.txns = [_txn("x.1", "committed", [(A, 0), (B, 0)]),
              _txn("p.1", "committed", [(B, 0)], reads=[(A, 0, 0, "x.1:0")])]
    final = {(A, 0): [(0, "x.1:0")], (B, 0): [(0, "p.1:0"), (1, "x.1:1")]}
    r = txn_checker.check_txn(h, final)
    g1c = r["checks"]["G1c"]
    assert g1c["count"] == 1 and r["checks"]["G0"]["count"] == 0
    assert "wr t-txn-a/0@0" in g1c["examples"][0]["text"] and "ww t-txn-b/0@1" in g1c["examples"][0]["text"]


def test_a_cycle_through_an_anti_dependency_is_g2() -> None:
    """p read A/0 up to x's record; y's record follows it there (rw p -> y); y's B/0 record precedes p's output
    (ww y -> p): a cycle through one rw edge, neither G0 nor G1c."""
    h = History()
    h.txns = [_txn("x.1", "committed", [(A, 0)]), _txn("y.1", "committed", [(A, 0), (B, 0)]),
              _txn("p.1", "committed", [(B, 0)], reads=[(A, 0, 0, "x.1:0")])]
    final = {(A, 0): [(0, "x.1:0"), (1, "y.1:0")], (B, 0): [(0, "y.1:1"), (1, "p.1:0")]}
    r = txn_checker.check_txn(h, final)
    counts = _counts(r)
    assert (counts["G0"], counts["G1c"], counts["G2"]) == (0, 0, 1), counts
    assert r["graph"]["rw_edges"] == 1 and r["checks"]["G2"]["fails"] is False
    text = r["checks"]["G2"]["examples"][0]["text"]
    assert "-[rw t-txn-a/0@1]->" in text and "-[ww t-txn-b/0@1]->" in text
    assert txn_checker.failed_checks(r) == []


def test_aborted_transactions_are_not_in_the_graph() -> None:
    h = History()
    h.txns = [_txn("x.1", "committed", [(A, 0), (A, 1)]), _txn("y.1", "aborted", [(A, 0), (A, 1)], intent="abort")]
    final = {(A, 0): [(0, "x.1:0"), (1, "y.1:0")], (A, 1): [(0, "y.1:1"), (1, "x.1:1")]}
    r = txn_checker.check_txn(h, final)
    assert r["checks"]["G0"]["count"] == 0 and r["graph"]["nodes"] == 1
    assert r["checks"]["G1a"]["count"] == 2  # but seen: aborted reads


def test_tarjan_finds_components_without_recursion() -> None:
    n = 5000  # one long cycle: a recursive Tarjan would overflow Python's stack
    nodes = {f"n{i}" for i in range(n)}
    adj = {f"n{i}": [f"n{(i + 1) % n}"] for i in range(n)}
    comps = strongly_connected(nodes, adj)
    assert len(comps) == 1 and len(comps[0]) == n
    comps = strongly_connected({"a", "b", "c", "d"}, {"a": ["b"], "b": ["a", "c"], "c": ["d"]})
    assert sorted(sorted(c) for c in comps) == [["a", "b"], ["c"], ["d"]]


def test_the_verdict_and_summary_name_the_failed_txn_checks() -> None:
    h, final = _clean()
    h.txn_polls.append(TxnPollOp("r", 1, B, 1, 1, "w.2:1", 1.5))
    t = txn_checker.check_txn(h, final)
    from tests.unit.verify.test_verdict import _report

    r = _report("client", duplicate=False, idempotent_producer=True, txn=t)
    assert report.verdict(r) == ["G1a"]
    lines = report.summary_lines(r)
    assert lines[-1] == "VERDICT: FAIL: G1a"
    assert any(line.startswith("txn checks: G1a 1  torn-transaction 0") for line in lines)
    h, final = _clean()
    r = _report("client", duplicate=False, idempotent_producer=True, txn=txn_checker.check_txn(h, final))
    assert report.summary_lines(r)[-1].startswith("VERDICT: PASS (0 lost, 0 duplicated")
    assert "0 G1a, 0 torn-transaction, 0 lost-write" in report.summary_lines(r)[-1]


def test_a_final_read_that_could_not_finish_fails_by_that_name_not_only_as_lost_writes() -> None:
    """Records a final read never reached are unread, not shown lost: the verdict and the summary say so."""
    from tests.unit.verify.test_verdict import _report

    h, final = _clean()
    t = txn_checker.check_txn(h, final)
    t["final_read_notes"] = {"incomplete": {f"{A}/1": [3, 9]}}
    r = _report("client", duplicate=False, idempotent_producer=True, txn=t)
    assert report.verdict(r) == ["txn_final_read_incomplete"]
    assert any("did not reach the last stable offset" in line and "[3, 9]" in line for line in report.txn_lines(t))
    t["final_read_notes"] = {"incomplete": {}}
    assert report.verdict(r) == []


def test_the_txn_planted_bugs_are_hidden_broker_flags(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from broker.cli import build_parser as broker_parser
    from odradek_verify import cli
    from tests.unit.verify.test_planted_bug_flag import _started_with

    for flag in ("--unsafe-read-uncommitted-as-committed", "--unsafe-partial-commit-markers"):
        assert flag in _started_with(tmp_path, monkeypatch, flag).broker_args
        assert flag not in _started_with(tmp_path, monkeypatch).broker_args
        assert flag not in cli.build_parser().format_help() and flag not in broker_parser().format_help()
        args = broker_parser().parse_args(["--id", "1", "--zk", "z", "--data-dir", "d", flag])
        assert getattr(args, flag[2:].replace("-", "_")) is True
        attached = cli.build_parser().parse_args(["--out", str(tmp_path), "--bootstrap-server", "127.0.0.1:1", flag])
        try:
            cli.Run(attached)._attach(["kill-broker"])
        except cli.RunError as e:
            assert flag in str(e)
        else:
            raise AssertionError(f"{flag} accepted for a cluster the run does not start")


def test_the_txn_workload_is_refused_through_rest(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from odradek_verify import cli

    for argv, why in ((["--workload", "txn", "--via", "rest"], "REST v2 produce has no transactions"),
                      (["--workload", "queue,bogus"], "give queue, txn or queue,txn")):
        args = cli.build_parser().parse_args(["--out", str(tmp_path / "v"), "--netns", "off", *argv])
        try:
            cli.Run(args).execute()
        except cli.RunError as e:
            assert why in str(e)
        else:
            raise AssertionError(argv)


def test_the_partial_commit_markers_bug_leaves_only_a_commits_last_partition_without_marker() -> None:
    """The planted branch in TxnCoordinator._complete: off, every partition gets its marker; on, a commit of
    several partitions skips its last one; an abort, or a commit of one partition, is untouched."""
    import asyncio

    from transaction_coordinator import state as s
    from transaction_coordinator.coordinator import TxnCoordinator

    def run(planted: bool, state: str, partitions: tuple[tuple[str, int], ...]) -> list[tuple[str, int, bool]]:
        written: list[tuple[str, int, bool]] = []

        async def marker(t: str, p: int, pid: int, epoch: int, commit: bool, coordinator_epoch: int) -> None:
            written.append((t, p, commit))

        c = TxnCoordinator(1, object(), lambda: 5, lambda: 1, marker)  # type: ignore[arg-type]
        c.unsafe_partial_commit_markers = planted

        async def no_write(tid: str, st: s.TxnState, version: int) -> int:
            return version + 1

        c._write = no_write  # type: ignore[method-assign]
        asyncio.run(c._complete("t", s.TxnState(7, 0, state, partitions), 3))
        return written

    three = ((A, 0), (A, 1), (B, 0))
    assert run(False, s.PREPARE_COMMIT, three) == [(A, 0, True), (A, 1, True), (B, 0, True)]
    assert run(True, s.PREPARE_COMMIT, three) == [(A, 0, True), (A, 1, True)]
    assert run(True, s.PREPARE_ABORT, three) == [(A, 0, False), (A, 1, False), (B, 0, False)]
    assert run(True, s.PREPARE_COMMIT, ((A, 0),)) == [(A, 0, True)]


def test_the_read_uncommitted_bug_serves_read_committed_fetches_as_read_uncommitted() -> None:
    """The planted branch in FetchService.fetch: off, read_committed reads below the LSO with the aborted
    transactions named; on, the same request reads to the high watermark, aborted batches and all."""
    from broker.fetch.service import READ_COMMITTED, FetchRequest, FetchService
    from tests.unit.fetch.test_fetch_service import FakePartition, FakeRouter, _service
    from tests.unit.fetch.test_fetch_service import run as run_async

    for planted, reads, aborted in ((False, "read_committed", 1), (True, "read", 0)):
        part = FakePartition()
        service, _, _ = _service(FakeRouter(part))
        service.unsafe_read_uncommitted_as_committed = planted
        data = run_async(service.fetch(FetchRequest("t", 0, offset=3, max_bytes=10, isolation_level=READ_COMMITTED)))
        assert part.reads[0][0] == reads and len(data.aborted_transactions) == aborted
    assert FetchService.unsafe_read_uncommitted_as_committed is False  # off unless the broker's flag
