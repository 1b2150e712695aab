// Confluent's Node REST Proxy client (npm kafka-rest, unchanged) against an Odradek broker's REST Proxy v1 API:
// produce to a topic, read the records back with the simple consumer, consume them through a consumer
// instance (join, subscribe-and-read stream), commit, and shut the instance down. Run by
// tests/integration/test_rest_v1.py as:  node v1_roundtrip.js <broker url> <topic> <group> <count> <timeout ms>
// It prints one JSON line with what each step answered, and exits 0; any error prints {"error": ...}, exits 1.
"use strict";

var KafkaRest = require("kafka-rest");

var url = process.argv[2], topicName = process.argv[3], group = process.argv[4];
var count = parseInt(process.argv[5], 10), timeoutMs = parseInt(process.argv[6], 10);
var result = {};

function fail(step, err) {
    console.log(JSON.stringify({"error": step + ": " + String(err), "data": err && err.data, "result": result}));
    process.exit(1);
}

var watchdog = setTimeout(function() { fail("deadline", "not done within " + timeoutMs + " ms"); }, timeoutMs);

var kafka = new KafkaRest({"url": url, "timeout": timeoutMs});
var values = [];
for (var i = 0; i < count; i++) values.push("v1-message-" + i);

kafka.topic(topicName).produce(values, function(err, produced) {
    if (err) return fail("produce", err);
    result.produced = produced;
    kafka.topicPartition(topicName, 0).messages({"offset": 0, "count": count, "format": "binary"}, function(err, msgs) {
        if (err) return fail("simple consumer", err);
        result.simple = msgs.map(function(m) { return Buffer.from(m.value, "base64").toString("utf8"); });
        consume();
    });
});

function consume() {
    var config = {"format": "binary", "auto.offset.reset": "smallest", "auto.commit.enable": "false"};
    kafka.consumer(group).join(config, function(err, instance) {
        if (err) return fail("join", err);
        result.instance = instance.id;
        var consumed = [];
        var done = false;
        var stream = instance.subscribe(topicName);
        stream.on("error", function(err) { fail("read", err); });
        stream.on("data", function(msgs) {
            for (var i = 0; i < msgs.length; i++) consumed.push(msgs[i].value.toString("utf8"));
            if (done || consumed.length < count) return;
            done = true;
            result.consumed = consumed.slice(0, count);
            instance.commit(function(err, committed) {
                if (err) return fail("commit", err);
                result.committed = committed;
                instance.shutdown(function(err) {
                    if (err) return fail("shutdown", err);
                    result.shutdown = true;
                    clearTimeout(watchdog);
                    console.log(JSON.stringify(result));
                    process.exit(0);
                });
            });
        });
    });
}
