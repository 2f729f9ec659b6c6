"""hpu's compiled parts, each an optional plain C library loaded through ctypes: a streaming-store copy and a
stager of piecewise copies by threads of its own (``hpu/core/_streamcopy.c``), and the CPU's partition by splitters
(``hpu/sorting/_partition.c``).  Built where a C compiler is found and skipped where not (hpu then runs numpy and
Python threads instead).  Everything else is in ``pyproject.toml``."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("hpu.core._streamcopy", ["hpu/core/_streamcopy.c"], extra_compile_args=["-pthread"],
                             extra_link_args=["-pthread"], optional=True),
                   Extension("hpu.sorting._partition", ["hpu/sorting/_partition.c"], extra_compile_args=["-O3"],
                             optional=True)])
