"""The one compiled part of hpu: a streaming-store copy (``hpu/core/_streamcopy.c``), built where a C compiler is
found and skipped where not (hpu then copies with numpy).  Everything else is in ``pyproject.toml``."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("hpu.core._streamcopy", ["hpu/core/_streamcopy.c"], optional=True)])
