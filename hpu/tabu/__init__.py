"""Tabu search with the neighbourhood evaluated on the CPU thread pool and an OpenCL device at once.

Each iteration evaluates a whole neighbourhood (for 2-element moves
``n (n - 1) / 2`` of them) and reduces it to the best admissible move.  The reduction is a
divide-and-conquer with ``a = b = 2`` and a constant combine, split between
the units by the HPU model (:mod:`hpu.tabu.split`): the CPU takes a share
``alpha`` of the moves (vectorised numpy), the device the rest in one fused
evaluate-and-reduce kernel, and ``2**transfer_level`` partial minima come back.

Problems: :class:`QAP` (2-swap, QAPLIB files),
:class:`HWSWPartitioning` (problem P of Hou et al. 2019, 2-flip) and
:class:`PFSP` (permutation flow shop, swap or insertion moves, Taillard's
instances, prefix-sharing evaluation of Wu et al.) and :class:`PPP`
(permuted perceptron problem, Hamming-1, -2 and -3 neighbourhoods).
:func:`tabu_search_many` runs many independent searches at once, a batch
on the device (one work-group per search) and searches on the CPU's
threads, divided by the model.  The hybrid evolutionary
algorithm of Luong et al. 2010 (:func:`hybrid_ea`) uses the engine as its
mutation.

>>> import hpu, hpu.tabu
>>> qap = hpu.tabu.QAP.from_qaplib("experiments/data/qaplib/tai30a.dat")  # doctest: +SKIP
>>> res = hpu.tabu.tabu_search(qap, iterations=1000, tenure=15, seed=1)   # doctest: +SKIP
>>> res.best_value, res.split.alpha, res.split.transfer_level            # doctest: +SKIP
"""

from .calibrate import calibrate, costs_path
from .engine import evaluate_neighbourhood, tie_hash
from .evolution import EvolutionResult, crossover, hybrid_ea
from .hwsw import HWSWPartitioning
from .many import MANY_BLOCK_ITERATIONS, ManyCosts, ManySplit, calibrate_many, plan_many, tabu_search_many
from .pfsp import PFSP
from .ppp import PPP
from .pairs import num_pairs, pair_block, pair_from_index, pair_index
from .problem import NeighbourhoodState, TabuProblem
from .qap import QAP, QAPSolution
from .search import DEFAULT_BLOCK_ITERATIONS, TabuResult, choose_split, tabu_search
from .split import TabuCosts, TabuSplit, plan_split, transfer_levels

__all__ = [
    "DEFAULT_BLOCK_ITERATIONS",
    "MANY_BLOCK_ITERATIONS",
    "EvolutionResult",
    "HWSWPartitioning",
    "ManyCosts",
    "ManySplit",
    "NeighbourhoodState",
    "PFSP",
    "PPP",
    "QAP",
    "QAPSolution",
    "TabuCosts",
    "TabuProblem",
    "TabuResult",
    "TabuSplit",
    "calibrate",
    "calibrate_many",
    "choose_split",
    "costs_path",
    "crossover",
    "evaluate_neighbourhood",
    "hybrid_ea",
    "num_pairs",
    "pair_block",
    "pair_from_index",
    "pair_index",
    "plan_many",
    "plan_split",
    "tabu_search",
    "tabu_search_many",
    "tie_hash",
    "transfer_levels",
]
