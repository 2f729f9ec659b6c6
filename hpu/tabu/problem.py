"""What a problem supplies to the tabu-search engine.

A problem (:class:`TabuProblem`) has a solution encoding of ``n`` elements
and a neighbourhood of :attr:`~TabuProblem.num_moves` moves numbered
``0 .. N-1``.  By default the neighbourhood is 2-element: one move per pair
``0 <= i < j < n``, numbered as in :mod:`hpu.tabu.pairs` (the index-to-move
mapping, usable in numpy and in OpenCL through ``kernels_cl/tabu_pairs.cl``);
other neighbourhoods (insertions, Hamming balls) override
:attr:`~TabuProblem.num_moves` and :meth:`~TabuProblem.move`, and their
OpenCL file defines ``MOVE_BY_INDEX`` and ``move_eval`` (see
``kernels_cl/tabu_reduce.cl``).  For a search it creates a
:class:`NeighbourhoodState`: the current solution with whatever derived data
makes the incremental (delta) evaluation fast, kept on the host (numpy) and,
when a device takes part, on the device (OpenCL buffers updated in place by
the problem's ``apply_move``, which the ``tabu_apply`` kernel of
``kernels_cl/tabu_reduce.cl`` calls).

Tabu status is kept per *tabu attribute* (Glover, "Tabu search - part I",
ORSA J. Computing 1(3), 1989): by default the move index itself
(a move taken at iteration ``t`` is tabu while the iteration is below
``t + tenure``: for the ``tenure - 1`` iterations after it); a problem may
offer the attributes of its literature instead (e.g. the (job, position)
pairs of Taillard's flow-shop search or the (facility, location) pairs of his
robust QAP search), named by :attr:`TabuProblem.tabu_attribute`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from .pairs import num_pairs, pair_from_index

__all__ = ["TabuProblem", "NeighbourhoodState", "seeded_rng"]


class TabuProblem(abc.ABC):
    """A minimisation problem whose neighbourhood has :attr:`num_moves` moves (default: the ``n (n - 1) / 2`` pairs).

    Subclasses set :attr:`kind` and :attr:`n` and implement the abstract
    methods.  All methods leave their arguments untouched.
    """

    #: Short name of the problem kind (names calibration caches).
    kind: ClassVar[str] = ""
    #: The tabu attributes the problem offers; the first is the default.
    TABU_ATTRIBUTES: ClassVar[tuple[str, ...]] = ("move",)
    #: Number of elements of a solution.
    n: int

    @property
    def tabu_attribute(self) -> str:
        """What a tabu status is kept for (one of :attr:`TABU_ATTRIBUTES`; ``"move"``: the move index)."""
        return getattr(self, "_tabu_attribute", self.TABU_ATTRIBUTES[0])

    def _set_tabu_attribute(self, value: Any) -> None:
        """Check and set :attr:`tabu_attribute` (``None``: the default); ``ValueError`` names the choices."""
        if value is None:
            value = self.TABU_ATTRIBUTES[0]
        if value not in self.TABU_ATTRIBUTES:
            raise ValueError(f"{type(self).__name__}: tabu_attribute must be one of {self.TABU_ATTRIBUTES}, "
                             f"got {value!r}")
        self._tabu_attribute = value

    @property
    def num_moves(self) -> int:
        """Size of the neighbourhood (default ``n (n - 1) / 2``, the pairs); at most ``2**40``."""
        return num_pairs(self.n)

    def move(self, index: int) -> tuple[int, ...]:
        """The elements that move ``index`` changes (default: the pair ``(i, j)``, ``i < j``; exact, see
        :mod:`hpu.tabu.pairs`)."""
        return pair_from_index(self.n, index)

    @property
    def cache_key(self) -> str:
        """What, besides :attr:`kind`, the cost of evaluating a move depends on (names calibration caches)."""
        return f"n{self.n}"

    @abc.abstractmethod
    def check_solution(self, solution: Any) -> np.ndarray:
        """Validate a solution and return a new array holding it.

        Raises
        ------
        ValueError
            If ``solution`` is not a valid solution of this problem.
        """

    @abc.abstractmethod
    def objective(self, solution: Any) -> int:
        """Full objective of ``solution`` (computed from scratch; exact integer)."""

    def feasible(self, solution: Any) -> bool:
        """Whether ``solution`` satisfies the constraints (default: always)."""
        self.check_solution(solution)
        return True

    @abc.abstractmethod
    def random_solution(self, rng: np.random.Generator) -> np.ndarray:
        """A random solution drawn with ``rng`` (the start of a search)."""

    @abc.abstractmethod
    def apply_move(self, solution: Any, index: int) -> np.ndarray:
        """The neighbour reached by move ``index`` (a new array)."""

    def restart(self, rng: np.random.Generator) -> np.ndarray:
        """A new current solution for when no neighbour is feasible.

        Only constrained problems need it; the default raises.
        """
        raise RuntimeError(f"{type(self).__name__} has no feasible neighbour and no restart strategy")

    @abc.abstractmethod
    def state(self, solution: Any) -> NeighbourhoodState:
        """The engine's state for a search currently at ``solution``."""


class NeighbourhoodState(abc.ABC):
    """The current solution of one search and what its delta evaluation needs.

    Host side: :meth:`deltas` evaluates a contiguous range of moves with
    vectorised numpy; :meth:`apply` moves to a neighbour.  Device side: the
    OpenCL file ``kernels_cl/<kernel>.cl`` defines ``move_delta`` and
    ``apply_move`` (see ``kernels_cl/tabu_reduce.cl``) and :meth:`device_arrays`
    gives the contents of the buffers its ``PROBLEM_PARAMS`` list.  Everything that changes
    between iterations lives in those buffers and is updated by
    ``apply_move`` on the device, so that iterations can run back to back
    there (:func:`hpu.tabu.tabu_search`'s ``block_iterations``).

    Tabu attributes: ``"move"`` (one tabu entry per move) is handled here.  A
    problem whose ``TABU_ATTRIBUTES`` name another defines
    ``_attribute_count``, ``_attribute_tabu`` and ``_mark_attributes`` for it,
    and in its OpenCL file ``move_tabu`` and the marking in ``apply_move``
    under ``TABU_BY_ATTRIBUTE``.
    """

    #: Name of the problem's OpenCL file in ``kernels_cl``.
    kernel: ClassVar[str] = ""
    #: The problem this state belongs to.
    problem: TabuProblem
    #: Objective of the current solution.
    value: int
    #: Most moves :meth:`deltas` is asked for at once (its temporaries should stay in cache).
    block_moves: int = 1 << 16

    @property
    @abc.abstractmethod
    def solution(self) -> np.ndarray:
        """A copy of the current solution."""

    @abc.abstractmethod
    def deltas(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Objective changes of moves ``[lo, hi)``, ``hi - lo <= block_moves``.

        Returns
        -------
        delta : numpy.ndarray of int, shape ``(hi - lo,)``
            ``objective(neighbour) - objective(current)``, exact.
        feasible : numpy.ndarray of bool, shape ``(hi - lo,)``, or None
            Which neighbours satisfy the constraints (None: all do).
        """

    @abc.abstractmethod
    def apply(self, index: int, delta: int) -> None:
        """Move to neighbour ``index`` whose objective change is ``delta`` (host side only)."""

    @property
    def num_attributes(self) -> int:
        """Entries of the tabu status array ``tabu_until``: one per move (attribute ``"move"``), else
        :meth:`_attribute_count`."""
        return self.problem.num_moves if self.problem.tabu_attribute == "move" else self._attribute_count()

    def tabu(self, lo: int, hi: int, tabu_until: np.ndarray, iteration: int) -> np.ndarray:
        """Which moves of ``[lo, hi)`` are tabu at ``iteration`` in the current solution.

        Attribute ``"move"``: ``tabu_until[lo:hi] > iteration``; any other
        attribute: :meth:`_attribute_tabu`, which must agree with the OpenCL
        ``move_tabu`` of the problem's file.

        Parameters
        ----------
        lo, hi : int
            A range of moves, ``hi - lo <= block_moves``.
        tabu_until : numpy.ndarray of int32, shape (num_attributes,)
        iteration : int

        Returns
        -------
        numpy.ndarray of bool, shape (hi - lo,)
        """
        if self.problem.tabu_attribute == "move":
            return tabu_until[lo:hi] > iteration
        return self._attribute_tabu(lo, hi, tabu_until, iteration)

    def mark_tabu(self, index: int, tabu_until: np.ndarray, until: int) -> None:
        """Make the attributes of move ``index`` tabu until iteration ``until``, in place, before the move is applied.

        Attribute ``"move"``: ``tabu_until[index] = until``; any other:
        :meth:`_mark_attributes`, which must agree with what the problem's
        ``apply_move`` marks on the device (under ``TABU_BY_ATTRIBUTE``).
        """
        if self.problem.tabu_attribute == "move":
            tabu_until[index] = until
        else:
            self._mark_attributes(index, tabu_until, until)

    # A problem whose TABU_ATTRIBUTES name more than "move" defines these three for the others.
    def _attribute_count(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} has no tabu attribute {self.problem.tabu_attribute!r}")

    def _attribute_tabu(self, lo: int, hi: int, tabu_until: np.ndarray, iteration: int) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} has no tabu attribute {self.problem.tabu_attribute!r}")

    def _mark_attributes(self, index: int, tabu_until: np.ndarray, until: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no tabu attribute {self.problem.tabu_attribute!r}")

    @abc.abstractmethod
    def reset(self, solution: np.ndarray) -> None:
        """Jump to ``solution`` (host side only; used by restarts)."""

    def defines(self) -> dict[str, Any]:
        """``#define`` values the OpenCL file needs besides ``WG``."""
        return {}

    def group_defines(self, work_group_size: int, local_bytes: int, groups: int = 1) -> dict[str, Any]:
        """More ``#define`` values for the group build (``tabu_run_group`` and ``tabu_run_batch``, each search in
        work-groups of ``work_group_size`` work-items), whose problem state may take ``local_bytes`` of local
        memory (what ``tabu_reduce.cl`` leaves); none by default.  With ``groups`` above 1, for a grid of that many
        work-groups (``kernels_cl/tabu_grid.cl``): ``GRID_GROUPS`` and ``GRID_SCRATCH_BYTES`` (global memory of
        each work-group's own) where the problem's file runs in one, else no ``GRID_GROUPS``."""
        return {}

    @abc.abstractmethod
    def device_arrays(self) -> list[tuple[np.ndarray, bool]]:
        """The host values of the OpenCL file's ``PROBLEM_PARAMS``, in order, each with whether the search owns it.

        Returns
        -------
        list of (numpy.ndarray, bool)
            Each buffer's contents (the dtype the kernel reads) and ``True``
            for the search's own state (read-write, changed by ``apply_move``;
            stacked search after search by ``PROBLEM_BATCH_PARAMS`` when many
            searches run at once) or ``False`` for the problem's data (read
            only, shared by every search).
        """

    def batch_arrays(self, batch: Sequence[NeighbourhoodState]) -> list[list[tuple[np.ndarray, bool]]]:
        """:meth:`device_arrays` of this state and of each of ``batch``'s (states of the same problem), in order; a
        problem may make them at once.

        Returns
        -------
        list of list of (numpy.ndarray, bool)
            ``1 + len(batch)`` lists, each as :meth:`device_arrays` returns.
        """
        return [st.device_arrays() for st in (self, *batch)]

    def device_args(self, context: Any, batch: Sequence[NeighbourhoodState] = ()) -> list:
        """Create the device copies of the state (:meth:`device_arrays`); the values of ``PROBLEM_PARAMS`` in order.

        Parameters
        ----------
        context : pyopencl.Context
        batch : sequence of NeighbourhoodState
            Further states of the same problem: each own array is then this
            state's followed by each of theirs, flattened (the values of
            ``PROBLEM_BATCH_PARAMS``, for ``tabu_run_batch``); the shared
            data are copied once.

        An empty array becomes a buffer of one zero element (OpenCL buffers cannot be empty).
        """
        import pyopencl as cl

        mf = cl.mem_flags
        arrays = self.batch_arrays(batch)
        out = []
        for k, (a, own) in enumerate(arrays[0]):
            host = np.concatenate([np.ravel(per_state[k][0]) for per_state in arrays]) if own and batch else a
            out.append(cl.Buffer(context, (mf.READ_WRITE if own else mf.READ_ONLY) | mf.COPY_HOST_PTR,
                                 hostbuf=_nonempty(host)))
        return out

    def upload(self, queue: Any, args: list) -> None:
        """Copy the search's own state (:meth:`device_arrays`) into the buffers of :meth:`device_args`.

        After :meth:`reset`; the problem's data are left as they are.
        """
        import pyopencl as cl

        for buf, (a, own) in zip(args, self.device_arrays()):
            if own:
                cl.enqueue_copy(queue, buf, _nonempty(a))

    def apply_range(self, work_group_size: int) -> tuple[tuple[int], tuple[int]]:
        """Global and local size of the ``tabu_apply`` kernel: one work-group (``apply_move`` synchronises in it)."""
        return (work_group_size,), (work_group_size,)


def _nonempty(a: np.ndarray) -> np.ndarray:
    """``a`` as a C-contiguous array, or one zero of its dtype when it is empty."""
    a = np.ascontiguousarray(a)
    return a if a.size else np.zeros(1, dtype=a.dtype)


def seeded_rng(seed: Any, name: str = "seed") -> np.random.Generator:
    """:func:`numpy.random.default_rng` of ``seed`` (a Generator is returned as is), errors naming ``name``.

    Raises
    ------
    TypeError
        ``seed`` not None, an int, a sequence of ints, a numpy SeedSequence, BitGenerator or Generator (e.g. a float
        or a string).
    ValueError
        ``seed`` a negative int, or a sequence holding one.
    """
    try:
        return np.random.default_rng(seed)
    except (TypeError, ValueError) as e:
        raise (ValueError if isinstance(e, ValueError) else TypeError)(
            f"{name} must be None, an int >= 0, a sequence of them, a numpy SeedSequence, BitGenerator or Generator, "
            f"got {seed!r}") from None
