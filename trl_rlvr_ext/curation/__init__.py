"""Prompt curation for RLVR: online samplers (SELF, pass-rate), per-prompt statistics, and offline scoring.

Trainer-free: `CurationController` runs online curation (ids, statistics, sampler, SELF's keep mask and skipped steps,
metrics, checkpoint state) and `trl_rlvr_ext.curation.greedy` holds SELF's two greedy strategies; `RLVRGRPOTrainer`
drives them from TRL's GRPO loop through a thin adapter (`trl_rlvr_ext.grpo.methods.curation`). `score_dataset` /
`filter_scored` (and ``trl-rlvr-ext curate``) curate a dataset offline.
"""

from .controller import CurationController
from .dynamic import GroupSelector, PromptStream, ShuffledOrder, group_reward_std, informative_groups
from .offline import filter_scored, score_dataset
from .samplers import CURATION_MODES, PASS_RATE_TARGETS, CurationSampler, pass_rate_weights
from .state import CurationState


__all__ = [
    "CURATION_MODES",
    "PASS_RATE_TARGETS",
    "CurationController",
    "CurationSampler",
    "CurationState",
    "GroupSelector",
    "PromptStream",
    "ShuffledOrder",
    "filter_scored",
    "group_reward_std",
    "informative_groups",
    "pass_rate_weights",
    "score_dataset",
]
