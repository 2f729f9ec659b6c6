"""Divide-and-conquer specs and the breadth-first transformer (paper, section 4).

A user describes a regular array divide-and-conquer algorithm once, as a
:class:`DCSpec`: the branching ``b`` (``a = b`` subproblems of size ``n/b``),
the combine step (and optionally a base case) as a short OpenCL C snippet and
as a vectorised numpy counterpart.  :meth:`DCSpec.plan` turns it into a
:class:`Plan`: the per-level structure of algorithm 2 (paper 4.1) and level
kernels in which a work-item finds its subproblem from its global id
(algorithm 3, paper 4.2), one kernel launch per recursion level.  The
executor (:mod:`hpu.dc.executor`) runs a plan under a :class:`~hpu.core.model.Split`.
The transformer knows no algorithm: the paper's mergesort and array sum are
specs of their workloads (:func:`hpu.sorting.paper.mergesort_spec`,
:func:`hpu.arraysum.array_sum_spec`).

Data layout.  The problem is a 1-D array of ``n`` elements, padded to
``leaf_size * b**depth`` with the spec's pad value.  Subproblem ``k`` of level
``i`` (``M = b**i`` subproblems of ``S`` elements) is the segment
``[k*S, (k+1)*S)``; its children are the ``b`` consecutive segments of size
``CS = S/b``.  On the device, combine kernels may use the *interleaved*
layout of paper section 6.3, where element ``j`` of segment ``k`` lives at
``j*M + k``, so that neighbouring work-items touch neighbouring addresses
(coalesced access).  Snippets never see the layout: they use the macros

``IN(c, j)``
    element ``j`` of child ``c`` (read), ``0 <= c < B``, ``0 <= j < CS``;
``OUT(j)``
    element ``j`` of the combined segment (write), ``0 <= j < S``: write
    every one, since on the device ``OUT`` is another buffer than ``IN``'s
    and an element not written is undefined there (the numpy counterpart
    works in place, where such an element keeps its child's value);
``X(j)``
    element ``j`` of a leaf (read/write, base-case snippet only);

and the names ``T`` (element type), ``B``, ``S``, ``K`` (subproblem
index), ``LEAF``, and ``IS_FLOAT`` (1 for floating-point ``T``, else 0),
and in combine snippets also ``CS`` and ``M`` (subproblems at the level).

The numpy counterparts work in place on a 2-D view ``seg`` of shape
``(rows, S)`` (one row per subproblem; the children are the ``b`` column
blocks).  They must release the GIL in their heavy numpy calls so that the
thread pool runs them in parallel.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.kernels import cl_type, define_header, kernel_source
from ..core.model import Recurrence
from ..core.util import check_int, check_nonneg

__all__ = ["DCSpec", "Level", "Plan"]

@dataclasses.dataclass(frozen=True)
class Level:
    """One level of the breadth-first recursion (paper, algorithm 2).

    ``index`` 0 is the root; level ``index`` has ``count = b**index``
    subproblems of ``size`` elements each.
    """

    index: int
    count: int
    size: int


@dataclasses.dataclass(frozen=True)
class DCSpec:
    """A regular array divide-and-conquer algorithm (paper, algorithm 1).

    Parameters
    ----------
    name : str
        Identifier (used in kernel names and traces).
    combine_cl : str
        OpenCL C statements combining the ``B`` children of subproblem ``K``
        (read with ``IN(c, j)``) into ``OUT(j)``.  Runs once per subproblem,
        one work-item each (algorithm 3).
    combine_np : callable
        ``combine_np(seg)``: numpy counterpart, in place on ``seg`` of shape
        ``(rows, S)`` whose column blocks ``[c*CS, (c+1)*CS)`` hold the
        children's results.
    branching : int
        ``b`` (= ``a``): children per subproblem, >= 2.
    combine_exponent : float
        ``k`` in the combine cost ``f(n) = n**k`` (1 for a linear merge, 0
        for a constant-time combine); used to build the :class:`Recurrence`.
    base_cl, base_np : str, callable, optional
        Base case on a leaf of ``leaf_size`` elements (``X(j)`` in OpenCL;
        ``base_np(leaves)`` in place on shape ``(rows, leaf_size)``).
    leaf_size : int
        Elements per leaf (default 1).
    pad : callable
        ``pad(dtype) -> scalar`` used to fill the array up to
        ``leaf_size * b**depth`` (paper section 6's footnote: non-powers of
        ``b``); the padding must not change the result of the first ``n``
        elements.
    preamble : str
        OpenCL C helper functions placed before the kernels.
    coalesced : bool
        Use the interleaved layout of paper section 6.3 on the device.

    Raises
    ------
    TypeError
        ``name``, ``combine_cl``, ``base_cl`` or ``preamble`` not a string,
        ``combine_np``, ``base_np`` or ``pad`` not callable,
        ``combine_exponent`` not a real number, or ``coalesced`` not a bool.
    ValueError
        ``branching < 2``, ``leaf_size < 1`` (either not an integer),
        ``combine_exponent`` negative or not finite, a name that is not a
        free C identifier, or a base case given in only one of its two forms.
    """

    name: str
    combine_cl: str
    combine_np: Callable[[np.ndarray], None]
    branching: int = 2
    combine_exponent: float = 1.0
    base_cl: str | None = None
    base_np: Callable[[np.ndarray], None] | None = None
    leaf_size: int = 1
    pad: Callable[[np.dtype], Any] = lambda dt: 0
    preamble: str = ""
    coalesced: bool = True

    def __post_init__(self) -> None:
        for field in ("name", "combine_cl", "preamble") + (("base_cl",) if self.base_cl is not None else ()):
            if not isinstance(getattr(self, field), str):
                raise TypeError(f"{field} must be a string, got {type(getattr(self, field)).__name__}")
        for field in ("combine_np", "pad") + (("base_np",) if self.base_np is not None else ()):
            if not callable(getattr(self, field)):
                raise TypeError(f"{field} must be callable, got {type(getattr(self, field)).__name__}")
        object.__setattr__(self, "combine_exponent", check_nonneg("combine_exponent", self.combine_exponent))
        if not isinstance(self.coalesced, (bool, np.bool_)):
            raise TypeError(f"coalesced must be a bool, got {self.coalesced!r}")
        object.__setattr__(self, "coalesced", bool(self.coalesced))
        if not isinstance(self.branching, (int, np.integer)) or self.branching < 2:
            raise ValueError(f"branching must be an integer >= 2, got {self.branching!r}")
        if isinstance(self.leaf_size, bool) or not isinstance(self.leaf_size, (int, np.integer)) or self.leaf_size < 1:
            raise ValueError(f"leaf_size must be an integer >= 1, got {self.leaf_size!r}")
        for field in ("branching", "leaf_size"):  # Python ints: b**depth of a numpy int32 wraps to 0
            object.__setattr__(self, field, int(getattr(self, field)))
        if (self.base_cl is None) != (self.base_np is None):
            raise ValueError("give the base case both as base_cl and base_np, or neither")
        if not self.name.isascii() or not self.name.isidentifier():
            raise ValueError(f"name must be a C identifier, got {self.name!r}")
        if self.name in _RESERVED_NAMES or self.name.startswith("__"):
            raise ValueError(f"name {self.name!r} is taken by the generated OpenCL source or by OpenCL C; "
                             "choose another")

    @property
    def recurrence(self) -> Recurrence:
        """``T(n) = b T(n/b) + n**combine_exponent`` (paper, section 4): leaves of one element, ``log_b n`` levels.

        With ``leaf_size > 1`` the plan's tree is ``log_b leaf_size`` levels
        shallower (:attr:`Plan.depth`) and its base case is not modelled: a
        split of this recurrence may name a transfer level beyond the plan's
        depth, which :func:`hpu.dc.execute` refuses.
        """
        return Recurrence(self.branching, self.branching, self.combine_exponent)

    def plan(self, n: int, dtype: Any) -> Plan:
        """The breadth-first plan for ``n`` elements of ``dtype`` (paper, algorithm 2).

        Raises
        ------
        ValueError
            ``n`` not an integer >= 1.
        TypeError
            ``dtype`` None (which numpy would take as float64) or unsupported.
        """
        n = check_int("n", n, 1)
        if dtype is None:
            raise TypeError("dtype must be given (e.g. the data's dtype), got None")
        dt = np.dtype(dtype)
        cl_type(dt)
        leaves = max(1, -(-n // self.leaf_size))
        depth = 0 if leaves == 1 else math.ceil(math.log(leaves, self.branching) - 1e-12)
        while self.branching**depth < leaves:  # guard against floating-point log
            depth += 1
        return Plan(self, n, dt, depth)


@dataclasses.dataclass(frozen=True)
class Plan:
    """A spec applied to a size and dtype: levels, padding and device sources.

    Attributes
    ----------
    spec : DCSpec
    n : int
        Caller's element count.
    dtype : numpy.dtype
    depth : int
        Number of combine levels (``log_b`` of the leaf count, rounded up).

    Raises
    ------
    TypeError
        ``spec`` not a :class:`DCSpec`, or ``dtype`` None or unsupported.
    ValueError
        ``n`` not an integer >= 1, ``depth`` not one >= 0, or too shallow a ``depth`` for ``n``
        (``leaf_size * b**depth < n``).  A plan built directly is checked so; :meth:`DCSpec.plan` builds valid ones.
    """

    spec: DCSpec
    n: int
    dtype: np.dtype
    depth: int

    def __post_init__(self) -> None:
        """The class's checks (see Raises there); ``n`` and ``depth`` as Python ints, ``dtype`` as a numpy dtype."""
        if not isinstance(self.spec, DCSpec):
            raise TypeError(f"spec must be an hpu.DCSpec, got {type(self.spec).__name__}")
        object.__setattr__(self, "n", check_int("n", self.n, 1))
        if self.dtype is None:
            raise TypeError("dtype must be given (e.g. the data's dtype), got None")
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        cl_type(self.dtype)
        object.__setattr__(self, "depth", check_int("depth", self.depth, 0))
        if self.padded_n < self.n:
            raise ValueError(f"depth {self.depth} holds {self.padded_n} elements (leaf_size * branching**depth), "
                             f"fewer than n = {self.n}")

    @property
    def padded_n(self) -> int:
        """``leaf_size * b**depth``: the length the executor works on."""
        return self.spec.leaf_size * self.spec.branching**self.depth

    def level(self, i: int) -> Level:
        """Level ``i`` (0 = root, ``depth`` = the leaves).

        Raises
        ------
        ValueError
            ``i`` not an integer in ``[0, depth]`` (a float or bool included).
        """
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i <= self.depth:
            raise ValueError(f"level must lie in [0, {self.depth}] (an integer), got {i!r}")
        count = self.spec.branching**i
        return Level(i, count, self.padded_n // count)

    @property
    def levels(self) -> list[Level]:
        """Combine levels, bottom-up (the order the executor runs them)."""
        return [self.level(i) for i in range(self.depth - 1, -1, -1)]

    def padded(self, a: np.ndarray) -> np.ndarray:
        """A new C-contiguous array of ``padded_n`` elements: ``a`` (array_like, shape ``(n,)``) then pad values.

        Raises
        ------
        ValueError
            ``a`` not of shape ``(n,)`` (numpy would broadcast a scalar or one element silently).
        TypeError
            ``a`` of another kind than the plan's dtype (numpy's ``same_kind`` casting refused: floats into an
            integer plan, say).  Within a kind numpy's cast applies (a narrower integer wraps); :func:`hpu.execute`
            refuses every dtype whose values the plan's could change.
        """
        if np.shape(a) != (self.n,):
            raise ValueError(f"a must have the plan's shape ({self.n},), got {np.shape(a)}")
        a = np.asarray(a)
        if not np.can_cast(a.dtype, self.dtype, "same_kind"):
            raise TypeError(f"a of dtype {a.dtype} would change in the plan's dtype {self.dtype}: another kind")
        out = np.empty(self.padded_n, dtype=self.dtype)
        out[: self.n] = a
        out[self.n :] = self.spec.pad(self.dtype)
        return out

    # -- OpenCL source ---------------------------------------------------------
    def device_source(self) -> str:
        """Complete OpenCL C source of the level kernels for this dtype.

        ``kernels_cl/dc_levels.cl`` (the kernels and layout changes) behind a
        ``#define`` header and the spec's snippets wrapped as functions, as
        pyopencl's ``ElementwiseKernel`` wraps a map expression.  Kernels (all
        take ``ulong M, ulong S``; one work-item per subproblem):
        ``<name>_combine(src, dst, M, S)`` and ``<name>_combine_interleaved``
        (reads children in layout ``M*B``, writes in layout ``M``),
        ``<name>_base(x, M, S)`` (contiguous leaves) if the spec has a base
        case, and the layout changes ``interleave(src, dst, M, S)`` /
        ``deinterleave(src, dst, M, S)``.  Where the OpenCL compiler defines
        the spec's name as a macro (PoCL's builtins such as ``max``, or
        ``INT_MAX``), it is undefined after the snippets, before the kernels.
        """
        spec = self.spec
        defines = {"B": f"{spec.branching}UL", "LEAF": f"{spec.leaf_size}UL", "IS_FLOAT": int(self.dtype.kind == "f"),
                   "DC_NAME": spec.name, "HAS_BASE": int(spec.base_cl is not None)}
        parts = ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable" if self.dtype == np.float64 else "",
                 f"typedef {cl_type(self.dtype)} T;", define_header(defines), spec.preamble]
        for variant, (inp, out) in _LAYOUTS.items():
            parts.append(_snippet_function(variant, "__global const T *restrict src, __global T *restrict dst, "
                                           "const ulong K, const ulong M, const ulong S, const ulong CS",
                                           {"IN(c, j)": inp, "OUT(j)": out}, spec.combine_cl))
        if spec.base_cl is not None:
            parts.append(_snippet_function("dc_base", "__global T *x_, const ulong K, const ulong S",
                                           {"X(j)": "x_[K * S + (j)]"}, spec.base_cl))
        # A name the compiler defines as a macro (PoCL: "#define max _cl_max") would rename or break the kernels.
        parts.append(f"#ifdef {spec.name}\n#undef {spec.name}\n#endif")
        return "\n".join(parts) + "\n" + kernel_source("dc_levels")


#: Names the generated source (``device_source``) or OpenCL C already uses: a spec named so would not build.
_RESERVED_NAMES = frozenset({
    "dc", "B", "LEAF", "IS_FLOAT", "DC_NAME", "HAS_BASE", "T", "DC_CAT", "DC_CAT2", "DC_KERNEL", "IN", "OUT", "X",
    "interleave", "deinterleave", "kernel", "global", "local", "constant", "private", "void", "char", "uchar",
    "short", "ushort", "int", "uint", "long", "ulong", "float", "double", "half", "bool", "size_t", "if", "else",
    "for", "while", "do", "return", "static", "const", "restrict", "struct", "union", "typedef", "switch", "case",
    "break", "continue", "default", "goto", "sizeof", "inline", "extern", "volatile", "signed", "unsigned",
})

#: Where child element ``j`` of child ``c`` and combined element ``j`` live, per combine variant (paper 6.3).
_LAYOUTS = {
    "dc_combine": ("src[(K * B + (c)) * CS + (j)]", "dst[K * S + (j)]"),
    "dc_combine_interleaved": ("src[(j) * (M * B) + K * B + (c)]", "dst[(j) * M + K]"),
}


def _snippet_function(name: str, params: str, macros: dict[str, str], body: str) -> str:
    """A user snippet as ``void name(params)``, with its access macros defined around it."""
    defs = "".join(f"#define {k} {v}\n" for k, v in macros.items())
    undefs = "".join(f"#undef {k.split('(')[0]}\n" for k in macros)
    return f"static void {name}({params})\n{{\n{defs}    {{\n{body}\n    }}\n{undefs}}}\n"
