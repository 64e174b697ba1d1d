"""RSI-S token selection (`rsi_selection="interval"` / `"quantile"`, https://arxiv.org/abs/2606.31575): tokens whose
relative surprisal index −log p / H lies outside an interval get no policy gradient; logged as `rsi/*`.

The `token_mask` hook runs where the copy of TRL's `_compute_loss` (trl_rlvr_ext/_trl/) has built TRL's entropy mask,
and its result takes that mask's place. TRL's own lines then do the rest, exactly as for `top_entropy_quantile`:
`per_token_loss * entropy_mask` (the dropped tokens get no policy gradient and stay in the loss normaliser) and the
entropy bonus over `mask * entropy_mask`. The maths is in `trl_rlvr_ext.losses.rsi`.
"""

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from ...losses.off_policy import ratio_percentiles
from ...losses.rsi import (
    RSI_COUNT_NAMES,
    RSI_PERCENTILES,
    relative_surprisal_index,
    rsi_interval_mask,
    rsi_quantile_bounds,
    rsi_selection_counts,
)
from ..method import GRPOMethod


RSI_SELECTION_MODES = ("none", "interval", "quantile")


@dataclass
class RSIArguments:
    r"""The fields of this method in [`RLVRGRPOConfig`] (flat: the same names on the command line and in YAML).

    Parameters:
        rsi_selection (`str`, *optional*, defaults to `"none"`):
            RSI-S token selection ("Relative Surprisal Index", https://arxiv.org/abs/2606.31575; no code released,
            only the abstract read). `"none"`: stock TRL. Otherwise each completion token's RSI = −log p / H (the
            sampled token's surprisal over the entropy of its distribution, `trl_rlvr_ext.losses.rsi`) is computed
            where TRL applies `top_entropy_quantile`, and the tokens outside an interval get no policy gradient:
            `"interval"` keeps `rsi_low` <= RSI <= `rsi_high` (absolute bounds), `"quantile"` keeps the tokens between
            the `rsi_quantile_low` and `rsi_quantile_high` quantiles of the RSI of every process's completion tokens
            at that loss computation (the same thresholds everywhere, as TRL's entropy mask). The paper gives no
            interval values: there are no defaults, and at least one bound must be set. Our choices where the paper
            is silent: p and H are the current policy's at the loss forward (detached, at TRL's temperature: what
            TRL's entropy mask reads); dropped tokens stay in the loss normaliser and TRL's entropy bonus acts on the
            kept tokens only (both as TRL's `top_entropy_quantile`); positive- and negative-advantage tokens share
            the interval. Not combined with `top_entropy_quantile` < 1 (refused). Composes with `clip_recovery`,
            `adaptive_clip`, `token_credit` (they change the surrogate or the advantages; RSI-S masks tokens after).
            Logged as `rsi/*`.
        rsi_low (`float`, *optional*):
            `"interval"`: the lower RSI bound (inclusive; None: open). RSI >= 0, so `rsi_low=0` alone keeps every token
            (the `rsi/*` metrics with the loss unchanged). Paper's value unknown.
        rsi_high (`float`, *optional*):
            `"interval"`: the upper RSI bound (inclusive; None: open). Paper's value unknown.
        rsi_quantile_low (`float`, *optional*):
            `"quantile"`: the quantile (in [0, 1]) of the RSI pool below which tokens are dropped (None: open). Ours.
        rsi_quantile_high (`float`, *optional*):
            `"quantile"`: the quantile (in [0, 1]) above which tokens are dropped (None: open). Ours.
        rsi_eps (`float`, *optional*, defaults to `1e-8`):
            Where the entropy is at most this (a numerically deterministic position) RSI is set to 0: such a token
            counts as redundant low-surprisal (its policy gradient is ≈ 0 anyway). Ours; the paper's rule is unknown.
    """

    rsi_selection: str = field(
        default="none",
        metadata={
            "help": "RSI-S token selection (https://arxiv.org/abs/2606.31575): 'none' (stock TRL), 'interval' (keep "
            "tokens with rsi_low <= RSI <= rsi_high, RSI = -log p / H) or 'quantile' (keep tokens between the "
            "rsi_quantile_low / rsi_quantile_high quantiles of every process's RSI). Tokens outside get no policy "
            "gradient, where TRL applies top_entropy_quantile. The paper's interval is unknown: no defaults. Our "
            "choices: the current policy's p and H, dropped tokens stay in the normaliser (as TRL's entropy mask).",
            "choices": list(RSI_SELECTION_MODES),
        },
    )
    rsi_low: float | None = field(
        default=None,
        metadata={"help": "RSI-S 'interval': lower RSI bound, inclusive (None: open; paper's value unknown)."},
    )
    rsi_high: float | None = field(
        default=None,
        metadata={"help": "RSI-S 'interval': upper RSI bound, inclusive (None: open; paper's value unknown)."},
    )
    rsi_quantile_low: float | None = field(
        default=None,
        metadata={"help": "RSI-S 'quantile': drop tokens below this quantile of the RSI pool (None: open; ours)."},
    )
    rsi_quantile_high: float | None = field(
        default=None,
        metadata={"help": "RSI-S 'quantile': drop tokens above this quantile of the RSI pool (None: open; ours)."},
    )
    rsi_eps: float = field(
        default=1e-8,
        metadata={"help": "RSI-S: RSI is 0 where the entropy is <= rsi_eps (a deterministic position; ours)."},
    )


class RSISelection(GRPOMethod):
    """RSI-S's keep mask in place of TRL's entropy mask (see the module docstring)."""

    name = "rsi"
    Args = RSIArguments
    switches: ClassVar[dict] = {"rsi_selection": "none"}
    paper = "[RSI-S](https://arxiv.org/abs/2606.31575)"

    @classmethod
    def check(cls, args) -> None:
        if args.rsi_selection not in RSI_SELECTION_MODES:
            raise ValueError(
                f"rsi_selection={args.rsi_selection!r} is not supported. Use one of {list(RSI_SELECTION_MODES)}."
            )
        absolute = {"rsi_low": args.rsi_low, "rsi_high": args.rsi_high}
        quantiles = {"rsi_quantile_low": args.rsi_quantile_low, "rsi_quantile_high": args.rsi_quantile_high}
        own, other = {"interval": (absolute, quantiles), "quantile": (quantiles, absolute)}.get(
            args.rsi_selection, ({}, {**absolute, **quantiles})
        )
        stray = [name for name, value in other.items() if value is not None]
        if stray:  # never ignored silently
            needs = "rsi_selection='interval'" if "rsi_low" in stray or "rsi_high" in stray else "'quantile'"
            raise ValueError(
                f"{', '.join(stray)} set with rsi_selection={args.rsi_selection!r}, which does not read it: use "
                f"{needs} (rsi_low / rsi_high are RSI values for 'interval', rsi_quantile_* are quantiles for "
                "'quantile'), or leave it unset."
            )
        if args.rsi_selection == "none":
            return
        if all(value is None for value in own.values()):
            example = (
                "rsi_low=0.25, rsi_high=3.0."
                if args.rsi_selection == "interval"
                else "rsi_quantile_low=0.1, rsi_quantile_high=0.9."
            )
            raise ValueError(
                f"rsi_selection={args.rsi_selection!r} needs at least one of {list(own)}: the paper "
                "(https://arxiv.org/abs/2606.31575) gives no interval values, so there is no default. For example "
                + example
            )
        for name, value in own.items():
            if value is None:
                continue
            if args.rsi_selection == "interval" and not value >= 0:  # also refuses NaN
                raise ValueError(f"{name} must be a number >= 0 (RSI = -log p / H is never negative), got {value!r}.")
            if args.rsi_selection == "quantile" and not 0 <= value <= 1:
                raise ValueError(f"{name} must be a quantile in [0, 1], got {value!r}.")
        low, high = own.values()
        if low is not None and high is not None and low > high:
            names = list(own)
            raise ValueError(f"{names[0]} ({low}) must be <= {names[1]} ({high}): the interval would keep no token.")
        if not args.rsi_eps >= 0:
            raise ValueError(f"rsi_eps must be >= 0, got {args.rsi_eps!r}.")
        if args.top_entropy_quantile < 1.0:
            raise ValueError(
                f"rsi_selection={args.rsi_selection!r} replaces TRL's entropy mask at the same place, and the two "
                f"selections are not combined (top_entropy_quantile={args.top_entropy_quantile}): RSI-S already drops "
                "the high-surprisal tail and the redundant low-surprisal tokens, and the paper defines no product of "
                "the two. Set top_entropy_quantile=1.0, or rsi_selection='none'."
            )

    def token_mask(self, per_token_logps, entropies, mask, entropy_mask, inputs):
        """RSI-S's keep mask (`top_entropy_quantile` < 1 is refused with it, so TRL's is None here).

        RSI is read from the current policy at this forward (detached), as TRL's entropy mask reads its entropies.
        With `"quantile"` the thresholds are quantiles of the RSI of every process's completion tokens at this loss
        computation (gathered as TRL's `get_high_entropy_mask` gathers its entropies), so all processes select alike.
        """
        args, accelerator = self.args, self.trainer.accelerator
        if entropies is None:  # TRL's `_compute_loss` asks for them (compute_entropy=True): a changed TRL would not
            raise RuntimeError(
                "rsi_selection needs the per-token entropies of the loss forward, but TRL's `_compute_loss` returned "
                "none: the installed TRL no longer computes them there. Re-read its `_compute_loss`."
            )
        rsi = relative_surprisal_index(per_token_logps, entropies, mask, eps=args.rsi_eps)
        # every process's RSI values (NaN-padded to one length), for the quantile bounds and the percentiles
        local = rsi[mask.bool()]
        pool = accelerator.gather(accelerator.pad_across_processes(local, pad_index=float("nan")))
        pool = pool[~pool.isnan()]
        if args.rsi_selection == "quantile":
            low, high = rsi_quantile_bounds(pool, args.rsi_quantile_low, args.rsi_quantile_high)
        else:
            low, high = args.rsi_low, args.rsi_high
        keep = rsi_interval_mask(rsi, mask, low, high)
        self._log(rsi, keep, mask, inputs["advantages"], low, high, pool)
        return keep

    def _log(self, rsi, keep, mask, advantages, low, high, pool) -> None:
        # Shares over all processes' completion tokens of this loss computation (sums reduced, then divided), as
        # TRL's `clip_ratio/*`; an empty denominator (e.g. no negative-advantage token) is not logged.
        counts = rsi_selection_counts(rsi, keep, mask, advantages, low, high)
        reduced = self.trainer.accelerator.reduce(counts, reduction="sum").tolist()
        c = dict(zip(RSI_COUNT_NAMES, reduced, strict=True))
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
                self.log_metric(name, c[numerator] / c[denominator])
        if pool.numel() > 0:
            for q, value in zip(RSI_PERCENTILES, ratio_percentiles(pool, RSI_PERCENTILES).tolist(), strict=True):
                self.log_metric(f"p{q}", value)
            if self.args.rsi_selection == "quantile":  # the thresholds the quantiles gave
                for side, bound in (("low", low), ("high", high)):
                    if bound is not None:
                        self.log_metric(f"bound_{side}", torch.as_tensor(bound).item())
