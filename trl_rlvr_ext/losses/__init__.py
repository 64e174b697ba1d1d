"""Pure tensor functions: no trainer, no model, no accelerate."""

from .clip_recovery import clip_recovery_objective, nsr_expected_weight, nsr_rescue_probability


__all__ = [
    "clip_recovery_objective",
    "nsr_expected_weight",
    "nsr_rescue_probability",
]
