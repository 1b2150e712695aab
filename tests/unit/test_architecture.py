"""The architecture rules, as tests: the import-linter contracts of pyproject.toml hold, and no module is long.

The layer rules (the log is a leaf, only zk/ imports kazoo, the HTTP API does not reach into the log or
ZooKeeper, the protocol package stands alone, partition state and leadership rules know nothing of zk/) are
written once, in ``[tool.importlinter]``; this test runs ``lint-imports`` on them so that a plain pytest run
catches a broken rule, not only CI. The 600-line limit keeps each module readable in one sitting: past it, a
module is doing more than one thing and should be split by concept.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "zk", "odradek", "odradek_spark", "consumer_coordinator")
MAX_MODULE_LINES = 600


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


def test_no_module_exceeds_the_line_limit() -> None:
    too_long = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            with path.open(encoding="utf-8") as f:
                lines = sum(1 for _ in f)
            if lines > MAX_MODULE_LINES:
                too_long[str(path.relative_to(ROOT))] = lines
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines (split them by concept): {too_long}"


def test_the_line_limit_check_sees_the_packages() -> None:
    """Guard against a vacuous pass: the walk above must actually find the code it polices."""
    for package in PACKAGES:
        assert any((ROOT / package).rglob("*.py")), f"no Python modules found under {package}/"
