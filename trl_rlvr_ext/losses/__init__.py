"""Pure tensor functions: no trainer, no model, no accelerate."""

from .acpo import ACPO_PAPER_SETTINGS, AcpoBins, acpo_bins, acpo_clip_bounds
from .clip_recovery import clip_recovery_objective, nsr_expected_weight, nsr_rescue_probability
from .delta import DELTA_PAPER_SETTINGS, DeltaWeights, delta_token_weights, delta_weight_stats
from .is_daa import is_daa_clip, is_daa_log_weights, is_daa_weight_stats, is_daa_weights
from .off_policy import (
    CLIPPED_HIGH_EDGES,
    CLIPPED_LOW_EDGES,
    RATIO_PERCENTILES,
    clipped_counts,
    clipped_ratio_histogram,
    ratio_percentiles,
)
from .poise import (
    POISE_PAPER_SETTINGS,
    POISE_SCALAR_FEATURES,
    POISE_TARGET_MODES,
    PoiseAdvantages,
    PoiseValueBaseline,
    RidgeProbe,
    poise_advantages,
    poise_diagnostics,
    poise_targets,
    pool_last_n,
    rloo_advantages,
)
from .ppo import ppo_clipped_objective
from .rsi import (
    RSI_COUNT_NAMES,
    RSI_PERCENTILES,
    relative_surprisal_index,
    rsi_interval_mask,
    rsi_quantile_bounds,
    rsi_selection_counts,
)


__all__ = [
    "ACPO_PAPER_SETTINGS",
    "CLIPPED_HIGH_EDGES",
    "CLIPPED_LOW_EDGES",
    "DELTA_PAPER_SETTINGS",
    "POISE_PAPER_SETTINGS",
    "POISE_SCALAR_FEATURES",
    "POISE_TARGET_MODES",
    "RATIO_PERCENTILES",
    "RSI_COUNT_NAMES",
    "RSI_PERCENTILES",
    "AcpoBins",
    "DeltaWeights",
    "PoiseAdvantages",
    "PoiseValueBaseline",
    "RidgeProbe",
    "acpo_bins",
    "acpo_clip_bounds",
    "clip_recovery_objective",
    "clipped_counts",
    "clipped_ratio_histogram",
    "delta_token_weights",
    "delta_weight_stats",
    "is_daa_clip",
    "is_daa_log_weights",
    "is_daa_weight_stats",
    "is_daa_weights",
    "nsr_expected_weight",
    "nsr_rescue_probability",
    "poise_advantages",
    "poise_diagnostics",
    "poise_targets",
    "pool_last_n",
    "ppo_clipped_objective",
    "ratio_percentiles",
    "relative_surprisal_index",
    "rloo_advantages",
    "rsi_interval_mask",
    "rsi_quantile_bounds",
    "rsi_selection_counts",
]
