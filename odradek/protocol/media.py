"""HTTP media types and header names of the wire contract (docs/http-api.md), shared by brokers and clients."""

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
KAFKA_V2 = "application/vnd.kafka.v2+json"
PLAIN_JSON = "application/json"
BATCHES = "application/vnd.odradek.batches.v2"

HIGH_WATERMARK = "Odradek-High-Watermark"
LOG_START_OFFSET = "Odradek-Log-Start-Offset"
LOG_END_OFFSET = "Odradek-Log-End-Offset"
LEADER_EPOCH = "Odradek-Leader-Epoch"
LEADER = "Odradek-Leader"
