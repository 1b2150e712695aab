"""HTTP media types and header names of the wire contract (docs/http-api.md), shared by brokers and clients.

Confluent's REST Proxy names the embedded format in the media type (``application/vnd.kafka.<format>.v2+json``);
its API reference says that when the embedded format is omitted (``application/vnd.kafka.v2+json``,
``application/vnd.kafka+json``, plain ``application/json``, ``application/octet-stream``) binary is assumed, so
keys and values are base64. ``SCHEMA_V2`` lists the formats that need a Schema Registry.

REST Proxy v1 (Confluent 5.x, kafka-rest ``Versions.java``) names its types the same way with ``v1``; a request
whose Content-Type or Accept names one of ``V1_TYPES`` gets v1's answers (broker/api/v1.py).
"""

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
AVRO_V2 = "application/vnd.kafka.avro.v2+json"
JSONSCHEMA_V2 = "application/vnd.kafka.jsonschema.v2+json"
PROTOBUF_V2 = "application/vnd.kafka.protobuf.v2+json"
SCHEMA_V2 = {AVRO_V2: "avro", JSONSCHEMA_V2: "jsonschema", PROTOBUF_V2: "protobuf"}
KAFKA_V2 = "application/vnd.kafka.v2+json"
KAFKA_DEFAULT = "application/vnd.kafka+json"
PLAIN_JSON = "application/json"
OCTET_STREAM = "application/octet-stream"
# Produce bodies without an embedded format: binary (base64), as Confluent's API reference says.
FORMATLESS = (KAFKA_V2, KAFKA_DEFAULT, PLAIN_JSON, OCTET_STREAM)
# REST Proxy v1 (kafka-rest Versions.java): the embedded formats, and the type without one.
KAFKA_V1 = "application/vnd.kafka.v1+json"
BINARY_V1 = "application/vnd.kafka.binary.v1+json"
JSON_V1 = "application/vnd.kafka.json.v1+json"
AVRO_V1 = "application/vnd.kafka.avro.v1+json"
V1_TYPES = (KAFKA_V1, BINARY_V1, JSON_V1, AVRO_V1)
# What metadata and error bodies may be negotiated as (v2 answers KAFKA_V2; v3 answers plain JSON; v1's topic,
# partition and broker bodies are v2's, so a v1 Accept gets them as KAFKA_V1).
METADATA_TYPES = (KAFKA_V2, KAFKA_DEFAULT, PLAIN_JSON, KAFKA_V1)
BATCHES = "application/vnd.odradek.batches.v2"

HIGH_WATERMARK = "Odradek-High-Watermark"
LOG_START_OFFSET = "Odradek-Log-Start-Offset"
LOG_END_OFFSET = "Odradek-Log-End-Offset"
LEADER_EPOCH = "Odradek-Leader-Epoch"
LEADER = "Odradek-Leader"
IDEMPOTENCY_KEY = "Idempotency-Key"  # REST produce: a retry with the same key is not written twice
# The batch path: the transactional id (percent-encoded) whose transaction the request's transactional batches
# belong to, as Kafka's Produce request carries it; the leader verifies them with it (KIP-890).
TRANSACTIONAL_ID = "Odradek-Transactional-Id"
