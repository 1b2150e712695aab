# Sourced by the scripts here: pick the project's virtualenv Python when there is one.
ODRADEK_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -x "$ODRADEK_ROOT/.venv/bin/python" ]; then PY="$ODRADEK_ROOT/.venv/bin/python"; else PY="${PYTHON:-python3}"; fi
export PYTHONPATH="$ODRADEK_ROOT${PYTHONPATH:+:$PYTHONPATH}"
