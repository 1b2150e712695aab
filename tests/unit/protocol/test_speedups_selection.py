"""Which record codec is loaded: CI sets ODRADEK_REQUIRE_EXTENSIONS=1 on its main run, so a build that silently
lost the compiled codec (no Cython, a compile error swallowed by setup.py) fails there instead of passing slowly;
ODRADEK_NO_EXTENSIONS=1 must always give the reference."""

from __future__ import annotations

import os

from odradek.protocol import speedups
from odradek.protocol.partitioner import murmur2


def test_the_expected_codec_is_loaded() -> None:
    if os.environ.get("ODRADEK_NO_EXTENSIONS") == "1":
        assert not speedups.COMPILED
        assert speedups.murmur2 is murmur2
    elif os.environ.get("ODRADEK_REQUIRE_EXTENSIONS") == "1":
        assert speedups.COMPILED, "the compiled codec did not build or load (see scripts/setup.sh's pip output)"


def test_record_texts_without_the_compiled_codec_defers_to_raw_json() -> None:
    if not speedups.COMPILED:
        assert speedups.record_texts(b'{"records": [{"value": 1}]}') is None
