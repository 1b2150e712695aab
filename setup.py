"""Builds the optional compiled record codec (odradek/protocol/_speedups.pyx); everything else is pyproject.toml.

Why optional: the pure Python codec is the reference and works everywhere, so a machine without a C compiler
(or with ODRADEK_NO_EXTENSIONS=1 set at install time) still installs Odradek, only slower on the REST path.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """A failed compile is a warning, not a failed install: odradek/protocol/speedups.py falls back."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:
            print(f"odradek: not building the compiled codec ({e}); the pure Python one is used", file=sys.stderr)

    def build_extension(self, ext) -> None:  # type: ignore[no-untyped-def]
        try:
            super().build_extension(ext)
        except Exception as e:
            print(f"odradek: not building {ext.name} ({e}); the pure Python codec is used", file=sys.stderr)


def extensions() -> list:
    if os.environ.get("ODRADEK_NO_EXTENSIONS") == "1":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("odradek: Cython is not installed; the pure Python codec is used", file=sys.stderr)
        return []
    return cythonize(["odradek/protocol/_speedups.pyx"], compiler_directives={"language_level": "3"}, quiet=True)


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
