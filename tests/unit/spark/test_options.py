"""Option parsing and validation: defaults, Spark's names and rules, and error messages that name the option."""

from __future__ import annotations

import pytest

from odradek_spark.options import OptionError, parse_sink_options, parse_source_options

BOOT = {"bootstrap.servers": "127.0.0.1:9092, http://127.0.0.1:9093/"}


def test_defaults_differ_between_batch_and_streaming() -> None:
    batch = parse_source_options({**BOOT, "subscribe": "a,b"}, streaming=False)
    assert batch.bootstrap == ("http://127.0.0.1:9092", "http://127.0.0.1:9093")
    assert batch.subscribe == ("a", "b") and batch.starting == "earliest" and batch.ending == "latest"
    assert batch.fail_on_data_loss and not batch.include_headers
    stream = parse_source_options({**BOOT, "subscribe": "a"}, streaming=True)
    assert stream.starting == "latest" and stream.max_offsets_per_trigger is None


def test_names_are_case_insensitive_and_kafka_prefix_is_accepted() -> None:
    opts = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SubscribePattern": "ev.*",
                                 "STARTINGOFFSETS": '{"ev1": {"0": -2}}', "maxOffsetsPerTrigger": "10",
                                 "includeHeaders": "TRUE", "failOnDataLoss": "false"}, streaming=True)
    assert opts.bootstrap == ("http://h:1",) and opts.subscribe_pattern == "ev.*"
    assert opts.matches("ev1") and not opts.matches("xev1")  # a full match, as Java's Pattern.matches
    assert opts.starting == {("ev1", 0): -2} and opts.max_offsets_per_trigger == 10
    assert opts.include_headers and not opts.fail_on_data_loss


def test_assign_and_json_offsets() -> None:
    opts = parse_source_options({**BOOT, "assign": '{"t": [1, 0], "u": [3]}',
                                 "endingOffsets": '{"t": {"0": 5, "1": -1}, "u": {"3": 9}}'}, streaming=False)
    assert opts.assign == (("t", 0), ("t", 1), ("u", 3))
    assert opts.ending == {("t", 0): 5, ("t", 1): -1, ("u", 3): 9}


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "t"}, False, "'bootstrap.servers' .* is required"),
        ({**BOOT}, False, "exactly one of 'assign', 'subscribe' and 'subscribePattern'"),
        ({**BOOT, "subscribe": "t", "assign": '{"t": [0]}'}, False, "given: assign, subscribe"),
        ({**BOOT, "subscribe": "bad topic"}, False, "not a valid topic name"),
        ({**BOOT, "subscribePattern": "("}, False, "not a valid regular expression"),
        ({**BOOT, "assign": '{"t": 0}'}, False, "non-empty list of partitions"),
        ({**BOOT, "assign": "[1"}, False, "'assign' is not valid JSON"),
        ({**BOOT, "subscribe": "t", "startingOffsets": "latest"}, False, "cannot be 'latest' for a batch query"),
        ({**BOOT, "subscribe": "t", "startingOffsets": '{"t": {"0": -1}}'}, False, "-1 \\(latest\\) is not allowed"),
        ({**BOOT, "subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'}, False, "-2 \\(earliest\\) is not allowed"),
        ({**BOOT, "subscribe": "t", "endingOffsets": "earliest"}, False, "cannot be 'earliest'"),
        ({**BOOT, "subscribe": "t", "endingOffsets": "latest"}, True, "'endingOffsets' is for batch queries"),
        ({**BOOT, "subscribe": "t", "startingOffsets": '{"t": {"x": 1}}'}, True, "partition 'x' of topic 't'"),
        ({**BOOT, "subscribe": "t", "startingOffsets": '{"t": {"0": -7}}'}, True, "offset -7 of t-0 is negative"),
        ({**BOOT, "subscribe": "t", "startingOffsets": "first"}, True, "'startingOffsets' must be"),
        ({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, True, "'maxOffsetsPerTrigger' must be >= 1"),
        ({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "5"}, False, "for streaming queries only"),
        ({**BOOT, "subscribe": "t", "minPartitions": "two"}, False, "'minPartitions' must be an integer"),
        ({**BOOT, "subscribe": "t", "failOnDataLoss": "yes"}, False, "'failOnDataLoss' must be true or false"),
        ({**BOOT, "subscribe": "t", "kafka.auto.offset.reset": "earliest"}, False, "use the startingOffsets option"),
        ({**BOOT, "subscribe": "t", "startingTimestamp": "soon"}, False, "timestamp in ms"),
        ({"bootstrap.servers": "ftp://x", "subscribe": "t"}, False, "not a broker address"),
    ],
)
def test_bad_source_options_fail_clearly(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_source_options(options, streaming=streaming)


def test_sink_options() -> None:
    opts = parse_sink_options({**BOOT, "topic": "out", "kafka.acks": "1", "kafka.compression.type": "zstd"})
    assert (opts.topic, opts.acks, opts.compression) == ("out", "1", "zstd")
    assert parse_sink_options(BOOT).topic is None
    with pytest.raises(OptionError, match=r"kafka\.acks"):
        parse_sink_options({**BOOT, "kafka.acks": "2"})
    with pytest.raises(OptionError, match="snappy"):
        parse_sink_options({**BOOT, "kafka.compression.type": "snappy"})
