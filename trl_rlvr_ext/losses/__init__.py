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
from .popo import (
    POPO_PAPER_SETTINGS,
    POPO_REPORTED_7B,
    PopoLoss,
    PopoPredictor,
    entropy_from_logits,
    masked_mean_pool,
    mean_token_logps,
    popo_kl_k3,
    popo_loss,
    popo_weights,
    popo_weights_from_means,
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
    "POPO_PAPER_SETTINGS",
    "POPO_REPORTED_7B",
    "RATIO_PERCENTILES",
    "RSI_COUNT_NAMES",
    "RSI_PERCENTILES",
    "AcpoBins",
    "DeltaWeights",
    "PopoLoss",
    "PopoPredictor",
    "acpo_bins",
    "acpo_clip_bounds",
    "clip_recovery_objective",
    "clipped_counts",
    "clipped_ratio_histogram",
    "delta_token_weights",
    "delta_weight_stats",
    "entropy_from_logits",
    "is_daa_clip",
    "is_daa_log_weights",
    "is_daa_weight_stats",
    "is_daa_weights",
    "masked_mean_pool",
    "mean_token_logps",
    "nsr_expected_weight",
    "nsr_rescue_probability",
    "popo_kl_k3",
    "popo_loss",
    "popo_weights",
    "popo_weights_from_means",
    "ppo_clipped_objective",
    "ratio_percentiles",
    "relative_surprisal_index",
    "rsi_interval_mask",
    "rsi_quantile_bounds",
    "rsi_selection_counts",
]
