"""Prompt curation for RLVR: online samplers (SELF, pass-rate), per-prompt statistics, and offline scoring.

Trainer-free: `RLVRGRPOTrainer` wires the samplers and the state into TRL's GRPO loop
(`trl_rlvr_ext.grpo.curation_mixin`); `score_dataset` / `filter_scored` (and ``trl-rlvr-ext curate``) curate a dataset
offline.
"""

from .offline import filter_scored, score_dataset
from .samplers import CURATION_MODES, PASS_RATE_TARGETS, CurationSampler, pass_rate_weights
from .state import CurationState


__all__ = [
    "CURATION_MODES",
    "PASS_RATE_TARGETS",
    "CurationSampler",
    "CurationState",
    "filter_scored",
    "pass_rate_weights",
    "score_dataset",
]
