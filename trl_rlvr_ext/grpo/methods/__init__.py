"""The built-in GRPO methods, one module each, registered in the declared order `BUILTIN_METHODS`.

The order is the trainer's call order, from the outside in: a wrapping hook (`generate_and_score`,
`generate_single_turn`, `micro_batch_loss`) of an earlier method wraps the later ones; the hooks on results that come
back up through those wraps (`rewards`, `scored_batch`) run from the inside out (reverse order); every other hook runs
in this order. So dynamic sampling's rounds wrap curation's bookkeeping, and curation masks the rewards before dynamic
sampling and the signal check see them; POISE replaces the advantages before DelTA weighs them.
"""

from ..method import register_method
from .clip_objective import ClipObjective
from .curation import Curation
from .delta import Delta
from .dynamic_sampling import DynamicSampling
from .poise import Poise
from .popo import Popo
from .relex import Relex
from .reward_guard import RewardGuard
from .rsi import RSISelection
from .signal_check import SignalCheck


BUILTIN_METHODS = (
    SignalCheck,
    DynamicSampling,
    Curation,
    Delta,
    Popo,
    Poise,
    ClipObjective,
    RSISelection,
    Relex,
    RewardGuard,
)

for _method in BUILTIN_METHODS:
    register_method(_method)

__all__ = [cls.__name__ for cls in BUILTIN_METHODS] + ["BUILTIN_METHODS"]
