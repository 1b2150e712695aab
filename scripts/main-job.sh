#!/usr/bin/env bash
# The main job on a fresh machine: set up, start a local cluster (3 ZooKeeper nodes, 3 brokers), produce and
# read with the Python client, with curl (REST) and with kcat (Kafka's protocol), run the Spark pipeline through
# the connector, then stop it all.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
DATA_DIR="${ODRADEK_DATA_DIR:-.odradek/main-job}"
ODR=.venv/bin/odradek
trap '$ODR cluster down --data-dir "$DATA_DIR" >/dev/null 2>&1 || true' EXIT
$ODR cluster down --data-dir "$DATA_DIR" >/dev/null 2>&1 || true
rm -rf "$DATA_DIR"   # every run starts from an empty cluster
$ODR cluster up --data-dir "$DATA_DIR" "$@"
URL="$(.venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["brokers"][0]["url"])' \
        < <($ODR cluster status --data-dir "$DATA_DIR" --json))"
CURL_TLS=()
TLS_JSON="$($ODR cluster status --data-dir "$DATA_DIR" --json | .venv/bin/python -c 'import json,sys; t=json.load(sys.stdin)["tls"]; print(" ".join([t["ssl_cafile"], t["ssl_certfile"], t["ssl_keyfile"]]) if t else "")')"
if [ -n "$TLS_JSON" ]; then   # `main-job.sh --tls`: everything below goes over TLS as the admin (docs/security.md)
  read -r ODRADEK_SSL_CAFILE ODRADEK_SSL_CERTFILE ODRADEK_SSL_KEYFILE <<< "$TLS_JSON"
  export ODRADEK_SSL_CAFILE ODRADEK_SSL_CERTFILE ODRADEK_SSL_KEYFILE
  CURL_TLS=(--cacert "$ODRADEK_SSL_CAFILE" --cert "$ODRADEK_SSL_CERTFILE" --key "$ODRADEK_SSL_KEYFILE")
fi
echo; echo "== the Python client"
.venv/bin/python examples/client_demo.py --bootstrap "$URL" --topic demo
echo; echo "== curl: produce two JSON records, then read partition 0 from the start"
curl -s "${CURL_TLS[@]}" -X POST "$URL/topics/demo?acks=all" -H 'Content-Type: application/vnd.kafka.json.v2+json' \
     -d '{"records": [{"key": "curl", "value": {"hello": "odradek"}}, {"value": [1, 2, 3]}]}'; echo
curl -s "${CURL_TLS[@]}" "$URL/topics/demo/partitions/0/records?offset=0" -H 'Accept: application/vnd.kafka.json.v2+json' \
  | .venv/bin/python -c 'import json,sys; b=json.load(sys.stdin); r=b.pop("records"); print(json.dumps(b)); [print(" ", json.dumps(x)) for x in r[:3]]; print("  ... %d records" % len(r))' 
# Kafka's protocol: a plaintext cluster's listeners (a --tls cluster's are SASL_SSL: see docs/security.md).
KAFKA="$(.venv/bin/python -c 'import json,sys; s=json.load(sys.stdin); print(s["kafka_bootstrap"] or "" if s.get("kafka_security_protocol", "PLAINTEXT") == "PLAINTEXT" else "")' \
          < <($ODR cluster status --data-dir "$DATA_DIR" --json))"
if [ -n "$KAFKA" ] && command -v kcat >/dev/null; then
  echo; echo "== kcat: the same topic over Kafka's protocol (bootstrap.servers=$KAFKA)"
  kcat -b "$KAFKA" -L -t demo
  printf 'kcat:hello from kcat\n' | kcat -b "$KAFKA" -P -t demo -p 0 -K:
  kcat -b "$KAFKA" -C -t demo -p 0 -o -3 -e -q -f '  offset %o key %k: %s\n'
fi
if [ -f examples/pipeline.py ]; then
  echo; echo "== Spark: batch and streaming through the connector"
  PYSPARK_PYTHON="$PWD/.venv/bin/python" SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python examples/pipeline.py --bootstrap "$URL"
fi
echo; $ODR cluster status --data-dir "$DATA_DIR"
