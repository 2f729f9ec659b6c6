"""Kernel sources in one place and one style: ``kernels_cl/<name>.cl`` behind ``#define`` headers.

Every OpenCL source hpu compiles is a file of ``kernels_cl`` (shipped in the
package as ``hpu.kernels_cl``) with its parameters given as ``#define`` lines
(:func:`define_header`), or, for the user's own divide-and-conquer snippets,
a source the transformer assembles (:mod:`hpu.dc.spec`), as pyopencl's
``ElementwiseKernel`` does.  The one numpy-to-OpenCL type table is
:data:`CL_TYPES`.  Compiled programs are cached per context by
:meth:`hpu.Runtime.build`.

No OpenCL import: usable to inspect sources without a driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

import numpy as np

__all__ = ["CL_TYPES", "cl_type", "define_header", "kernel_source"]

#: numpy dtype -> (OpenCL C type, a value no key of the type sorts after: NaN for floats, the maximum for integers).
CL_TYPES: dict[np.dtype, tuple[str, str]] = {
    np.dtype(np.int32): ("int", "INT_MAX"),
    np.dtype(np.uint32): ("uint", "UINT_MAX"),
    np.dtype(np.int64): ("long", "LONG_MAX"),
    np.dtype(np.uint64): ("ulong", "ULONG_MAX"),
    np.dtype(np.float32): ("float", "NAN"),
    np.dtype(np.float64): ("double", "((double)NAN)"),
}


def cl_type(dtype: Any) -> str:
    """OpenCL C type name of a numpy dtype (native byte order).

    Raises
    ------
    TypeError
        For dtypes without an OpenCL counterpart here (bool, complex, object,
        structured, 8/16-bit).
    """
    dt = np.dtype(dtype)
    try:
        return CL_TYPES[dt][0]
    except KeyError:
        supported = ", ".join(str(d) for d in CL_TYPES)
        raise TypeError(f"unsupported dtype {dt}; supported: {supported}") from None


def define_header(defines: Mapping[str, Any] | None) -> str:
    """``#define NAME value`` lines, sorted by name (so that equal defines give equal sources and cache hits)."""
    return "".join(f"#define {k} {v}\n" for k, v in sorted((defines or {}).items()))


def kernel_source(name: str, defines: Mapping[str, Any] | None = None) -> str:
    """Text of ``kernels_cl/<name>.cl`` with :func:`define_header` ``(defines)`` before it.

    Raises
    ------
    FileNotFoundError
        No source of that name is shipped.
    """
    res = resources.files("hpu.kernels_cl").joinpath(f"{name}.cl")
    if not res.is_file():
        raise FileNotFoundError(f"no OpenCL source named {name!r} in hpu/kernels_cl")
    return define_header(defines) + res.read_text()
