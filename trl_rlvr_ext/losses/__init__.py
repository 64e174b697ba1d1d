"""Pure tensor functions: no trainer, no model, no accelerate."""

from .clip_recovery import clip_recovery_objective, nsr_expected_weight, nsr_rescue_probability
from .is_daa import is_daa_clip, is_daa_log_weights, is_daa_weight_stats, is_daa_weights


__all__ = [
    "clip_recovery_objective",
    "is_daa_clip",
    "is_daa_log_weights",
    "is_daa_weight_stats",
    "is_daa_weights",
    "nsr_expected_weight",
    "nsr_rescue_probability",
]
