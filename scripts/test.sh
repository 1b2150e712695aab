#!/usr/bin/env bash
# Set up, then run the whole test suite (real ZooKeeper and broker processes on 127.0.0.1), then a short second
# run of the codec unit tests and the REST integration tests on the pure Python codec (ODRADEK_NO_EXTENSIONS=1),
# so both builds of the record codec stay green. The first run requires the compiled codec to be in use.
# Both passes run and report whatever the first one's outcome; the exit code is non-zero if either failed.
# The second pass is skipped only when the arguments select the `docker` tests alone (it has none of them).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
# Two workers (pytest-xdist), each a test file at a time: most of a cluster test's time is waiting (elections,
# sessions, long polls), so two at once on two cores take about half as long; each worker's processes pick ports
# from a slice of their own (tests/conftest.py). ODRADEK_TEST_WORKERS=0 runs them in this process, one by one.
ODRADEK_REQUIRE_EXTENSIONS=1 .venv/bin/python -m pytest -q -n "${ODRADEK_TEST_WORKERS:-2}" --dist loadfile "$@"
first=$?
second=0
if [[ "$*" != *docker* || "$*" == *"not docker"* ]]; then
    ODRADEK_NO_EXTENSIONS=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/unit/protocol tests/unit/api \
        tests/unit/log/test_log_records.py tests/integration/test_http_api.py tests/integration/test_rest_compat.py
    second=$?
    echo "test.sh: compiled codec pass exit $first, pure Python codec pass exit $second"
fi
((first != 0)) && exit "$first"
exit "$second"
