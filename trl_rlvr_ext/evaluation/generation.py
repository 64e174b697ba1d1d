"""Reward functions by name for evaluation; the old home of the sampling layer.

The backends, grading and the generate-and-grade loop moved to `trl_rlvr_ext.sampling` (below the toy, evaluation and
curation, which all use them). Their names still resolve here, so that imports from
``trl_rlvr_ext.evaluation.generation`` keep working.
"""

from collections.abc import Callable, Sequence

import trl_rlvr_ext.sampling as _sampling


def __getattr__(name):
    if name in _sampling.__all__:
        return getattr(_sampling, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def resolve_reward_funcs(names: Sequence[str]) -> list[Callable]:
    """Reward functions from names (see `trl_rlvr_ext.rewards.REWARD_NAMES`) or import paths ``pkg.module.func``."""
    from ..rewards import get_reward_func

    return [get_reward_func(name) for name in names]
