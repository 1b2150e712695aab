"""The architecture rules, as a test: the import-linter contracts of pyproject.toml hold.

The layer rules (the log is a leaf, only zk/ imports kazoo, the HTTP API does not reach into the log, partitions or
ZooKeeper, the protocol package stands alone, zk/ imports nothing of the broker's upper floors, the tools, the
checker and the launcher stay outside the broker, no cycle between top-level packages) are written once, in
``[tool.importlinter]``; this test runs ``lint-imports`` on them so that a plain pytest run catches a broken
rule, not only CI. Module length is not a rule: a module is one concept, however long that concept is.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports() -> Path:
    """lint-imports from the interpreter's own environment (the virtualenv), not whatever is first on PATH."""
    return Path(sys.executable).with_name("lint-imports")


def test_import_linter_contracts_are_kept() -> None:
    proc = subprocess.run(
        [str(_lint_imports()), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"lint-imports failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
