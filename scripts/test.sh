#!/usr/bin/env bash
# Set up, then run the whole test suite (real ZooKeeper and broker processes on 127.0.0.1), then a short second
# run of the codec unit tests and the REST integration tests on the pure Python codec (ODRADEK_NO_EXTENSIONS=1),
# so both builds of the record codec stay green. The first run requires the compiled codec to be in use.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
rc=0
ODRADEK_REQUIRE_EXTENSIONS=1 .venv/bin/python -m pytest -q "$@" || rc=$?
if ((rc == 0)) && [[ "$*" != *docker* || "$*" == *"not docker"* ]]; then
    ODRADEK_NO_EXTENSIONS=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/unit/protocol tests/unit/api \
        tests/unit/log/test_log_records.py tests/integration/test_http_api.py tests/integration/test_rest_compat.py \
        || rc=$?
fi
exit "$rc"
