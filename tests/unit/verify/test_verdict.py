"""The verdict's rule for duplicates: a failure when the producers were idempotent (the client's Producer, the
default --via client), reported but not failing through REST v2 produce, which has no idempotence."""

from __future__ import annotations

from typing import Any

from odradek_verify import checker, report
from odradek_verify.workload import History, WriteOp


def _history_and_reads(duplicate: bool) -> tuple[History, dict[int, list[tuple[int, str]]]]:
    h = History()
    h.writes = [WriteOp("p0", i, f"p0-{i}", 0, float(i), float(i) + 0.01, True, i - 1) for i in (1, 2, 3)]
    reads = {0: [(0, "p0-1"), (1, "p0-2"), (2, "p0-3")] + ([(3, "p0-3")] if duplicate else [])}
    return h, reads


def _report(via: str, duplicate: bool, **extra: Any) -> dict[str, Any]:
    h, reads = _history_and_reads(duplicate)
    return {
        "duration_s": 60.0, "seed": 1, "via": via, "netns": True, "faults": [], "faults_by_kind": {},
        "queue": checker.check_queue(h, reads), "replicas": {"divergent": 0, "offsets_compared": 3},
        "group": None, "group_skipped": "--group-members 0", "recovery": {}, "skipped_faults": {},
        "availability": {"share_of_time_writable": 1.0, "share_of_writes_acknowledged": 1.0, "seconds": 60},
        **extra,
    }


def test_a_duplicate_fails_a_run_with_the_idempotent_producer() -> None:
    r = _report("client", duplicate=True, idempotent_producer=True)
    assert r["queue"]["duplicated"] == 1
    assert report.verdict(r) == ["duplicated"]
    assert report.summary_lines(r)[-1] == "VERDICT: FAIL: duplicated"


def test_a_clean_idempotent_run_passes_and_says_0_duplicated() -> None:
    r = _report("client", duplicate=False, idempotent_producer=True)
    assert report.verdict(r) == []
    assert "0 duplicated" in report.summary_lines(r)[-1] and report.summary_lines(r)[-1].startswith("VERDICT: PASS")


def test_rest_duplicates_are_reported_not_failed_with_the_reason() -> None:
    r = _report("rest", duplicate=True, idempotent_producer=False)
    assert report.verdict(r) == []
    lines = report.summary_lines(r)
    assert lines[-1].startswith("VERDICT: PASS") and "duplicated" not in lines[-1]
    why = [line for line in lines if line.startswith("duplicated 1: not failing")]
    assert len(why) == 1 and "REST v2 produce has no idempotence" in why[0]


def test_other_failures_still_fail_with_rest() -> None:
    r = _report("rest", duplicate=True, idempotent_producer=False)
    r["queue"]["lost"] = 2
    assert report.verdict(r) == ["lost"]


def test_a_report_without_the_flag_follows_its_path() -> None:
    assert report.verdict(_report("client", duplicate=True)) == ["duplicated"]
    assert report.verdict(_report("rest", duplicate=True)) == []


def test_the_verify_workload_builds_an_idempotent_producer() -> None:
    import threading

    from odradek_verify.workload import ClientProducerWorker, RestProducerWorker

    w = ClientProducerWorker("p0", "127.0.0.1:1", "t", 3, 10.0, History(), threading.Event(), 0)
    try:
        assert w.idempotent is True and w.producer.idempotent is True and w.producer.acks == "all"
    finally:
        w.producer.close(timeout=1)
    assert RestProducerWorker.idempotent is False


def _segment(tmp_path: Any, topic: str, partition: int, batches: list[tuple[int, int, int, str]]) -> None:
    """A replica's segment file: ``(offset, producer id, producer epoch, value)`` one batch each."""
    from odradek.protocol.records.batch import NewRecord, encode_batch

    d = tmp_path / "broker-1" / f"{topic}-{partition}"
    d.mkdir(parents=True)
    data = b"".join(bytes(encode_batch([NewRecord(None, v.encode(), 0, ())], base_offset=o, producer_id=pid,
                                       producer_epoch=epoch, base_sequence=0, now_ms=0))
                    for o, pid, epoch, v in batches)
    (d / "00000000000000000000.log").write_bytes(data)


def test_a_copy_under_a_newer_producer_epoch_is_reported_and_one_within_an_epoch_fails(tmp_path: Any) -> None:
    """checker.split_duplicates: the client re-sending a write after bumping its producer epoch (librdkafka#4953)
    is reported, not failed (no broker can refuse it: sequences restart with the epoch); a copy within one epoch
    (the broker's deduplication failing) still fails the run."""
    h = History()
    h.writes = [WriteOp("p0", i, f"p0-{i}", 0, float(i), float(i) + 0.01, True, i - 1) for i in (1, 2)]
    reads = {0: [(0, "p0-1"), (1, "p0-2"), (2, "p0-1"), (3, "p0-2")]}
    # p0-1: epoch 0 at offset 0, epoch 1 at offset 2 (a re-send after a bump); p0-2: epoch 0 twice.
    _segment(tmp_path, "t", 0, [(0, 7, 0, "p0-1"), (1, 7, 0, "p0-2"), (2, 7, 1, "p0-1"), (3, 7, 0, "p0-2")])
    q = checker.check_queue(h, reads)
    assert q["duplicated"] == 2
    checker.split_duplicates(q, {1: tmp_path / "broker-1"}, "t")
    assert q["duplicated"] == 1 and list(q["duplicated_examples"]) == ["p0-2"]
    assert q["duplicated_across_epochs"] == 1
    assert q["duplicated_across_epochs_examples"] == {"p0-1": [[0, 0, 7, 0], [0, 2, 7, 1]]}
    q.pop("duplicated_all")
    r = {**_report("kafka", duplicate=False, idempotent_producer=True), "queue": q}
    assert report.verdict(r) == ["duplicated"]
    assert any(line.startswith("duplicated across producer epochs 1") for line in report.summary_lines(r))
