"""RSI-S in `RLVRGRPOTrainer`: the token mask of `rsi_selection`, built where TRL builds its entropy mask.

The marked block `rsi-selection` of the copy of TRL's `_compute_loss` (trl_rlvr_ext/_trl/) calls
`_rsi_selection_mask` right after TRL's `entropy_mask` is built, and puts the result in its place. TRL's own lines then
do the rest, exactly as for `top_entropy_quantile`: `per_token_loss * entropy_mask` (the dropped tokens get no policy
gradient and stay in the loss normaliser) and the entropy bonus over `mask * entropy_mask`. The maths is in
`trl_rlvr_ext.losses.rsi`.
"""

import torch

from ..losses.off_policy import ratio_percentiles
from ..losses.rsi import (
    RSI_COUNT_NAMES,
    RSI_PERCENTILES,
    relative_surprisal_index,
    rsi_interval_mask,
    rsi_quantile_bounds,
    rsi_selection_counts,
)


class RSISelectionMixin:
    """`_rsi_selection_mask` for the copy of TRL's `_compute_loss`, and the `rsi/*` metrics."""

    def _rsi_selection_mask(self, per_token_logps, entropies, mask, entropy_mask, inputs):
        """The mask TRL multiplies `per_token_loss` by: TRL's own `entropy_mask` with `rsi_selection="none"`,
        otherwise RSI-S's keep mask (`top_entropy_quantile` < 1 is refused with it, so TRL's is None here).

        RSI is read from the current policy at this forward (detached), as TRL's entropy mask reads its entropies.
        With `"quantile"` the thresholds are quantiles of the RSI of every process's completion tokens at this loss
        computation (gathered as TRL's `get_high_entropy_mask` gathers its entropies), so all processes select alike.
        """
        args = self.args
        if args.rsi_selection == "none":
            return entropy_mask
        if entropies is None:  # TRL's `_compute_loss` asks for them (compute_entropy=True): a changed TRL would not
            raise RuntimeError(
                "rsi_selection needs the per-token entropies of the loss forward, but TRL's `_compute_loss` returned "
                "none: the installed TRL no longer computes them there. Re-read its `_compute_loss`."
            )
        rsi = relative_surprisal_index(per_token_logps, entropies, mask, eps=args.rsi_eps)
        # every process's RSI values (NaN-padded to one length), for the quantile bounds and the percentiles
        local = rsi[mask.bool()]
        pool = self.accelerator.gather(self.accelerator.pad_across_processes(local, pad_index=float("nan")))
        pool = pool[~pool.isnan()]
        if args.rsi_selection == "quantile":
            low, high = rsi_quantile_bounds(pool, args.rsi_quantile_low, args.rsi_quantile_high)
        else:
            low, high = args.rsi_low, args.rsi_high
        keep = rsi_interval_mask(rsi, mask, low, high)
        self._log_rsi_selection(rsi, keep, mask, inputs["advantages"], low, high, pool)
        return keep

    def _log_rsi_selection(self, rsi, keep, mask, advantages, low, high, pool) -> None:
        # Shares over all processes' completion tokens of this loss computation (sums reduced, then divided), as
        # TRL's `clip_ratio/*`; an empty denominator (e.g. no negative-advantage token) is not logged.
        mode = "train" if self.model.training else "eval"
        counts = rsi_selection_counts(rsi, keep, mask, advantages, low, high)
        c = dict(zip(RSI_COUNT_NAMES, self.accelerator.reduce(counts, reduction="sum").tolist(), strict=True))
        metrics = self._metrics[mode]
        shares = {
            "kept_frac": ("kept", "tokens"),
            "dropped_low_frac": ("dropped_low", "tokens"),
            "dropped_high_frac": ("dropped_high", "tokens"),
            "kept_frac_pos_adv": ("pos_kept", "pos_tokens"),
            "kept_frac_neg_adv": ("neg_kept", "neg_tokens"),
            "mean": ("rsi_sum", "tokens"),
            "sequences_kept_frac": ("kept_sequences", "sequences"),
        }
        for name, (numerator, denominator) in shares.items():
            if c[denominator] > 0:
                metrics[f"rsi/{name}"].append(c[numerator] / c[denominator])
        if pool.numel() > 0:
            for q, value in zip(RSI_PERCENTILES, ratio_percentiles(pool, RSI_PERCENTILES).tolist(), strict=True):
                metrics[f"rsi/p{q}"].append(value)
            if self.args.rsi_selection == "quantile":  # the thresholds the quantiles gave
                for side, bound in (("low", low), ("high", high)):
                    if bound is not None:
                        metrics[f"rsi/bound_{side}"].append(torch.as_tensor(bound).item())
