"""Clip objective: NSR's clip recovery, ACPO's adaptive clip and the off-policy diagnostics, where PPO's clipped
objective is computed inside the guarded copy of TRL's `_compute_loss` (trl_rlvr_ext/_trl/).

- NSR (`clip_recovery="nsr"` / `"nsr_expected"`, https://huggingface.co/papers/2605.22703): tokens cut off by PPO's
  clip are rescued at random (or given their expected weight), `trl_rlvr_ext.losses.clip_recovery_objective`; logged as
  `clip_recovery/{low,high}_frac`. Its generator (seeded `clip_recovery_seed` + rank) is checkpointed per process.
- ACPO (`adaptive_clip="acpo"`, https://arxiv.org/abs/2606.22570): per-token widths from the std of the ratios in
  probability bins, `trl_rlvr_ext.losses.acpo_bins`; logged as `adaptive_clip/*`. NSR then rescues past ACPO's bound.
- Off-policy diagnostics (`off_policy_diagnostics=True`): ratio percentiles and clipped shares, the loss unchanged;
  logged as `off_policy/*`.

One module, because the three read and write the same clip: ACPO sets the bounds NSR rescues past and the diagnostics
measure against.
"""

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from ...losses.acpo import ACPO_PAPER_SETTINGS, acpo_bin_index, acpo_bins, acpo_clamp_log_ratio
from ...losses.clip_recovery import CLIP_RECOVERY_FUNCTION_MODES, clip_recovery_objective
from ...losses.off_policy import (
    CLIPPED_HIGH_EDGES,
    CLIPPED_LOW_EDGES,
    RATIO_PERCENTILES,
    clipped_counts,
    clipped_ratio_histogram,
    ratio_percentiles,
)
from ...losses.ppo import ppo_clipped_objective
from ..checkpoint_state import CheckpointState
from ..method import GRPOMethod


# Loss types whose surrogate is PPO's hard clip min(r·A, clip(r)·A): the only ones with a clip to recover from.
CLIPPED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
# The config's choices are "none" (stock TRL) plus the modes the lower layers implement: one definition each.
CLIP_RECOVERY_MODES = ("none", *CLIP_RECOVERY_FUNCTION_MODES)
ADAPTIVE_CLIP_MODES = ("none", "acpo")
ADAPTIVE_CLIP_SCOPES = ("global", "micro_batch")
# Why the loss types without PPO's hard clip cannot take an adaptive clip width.
ADAPTIVE_CLIP_REFUSED_LOSS_TYPES = {
    "cispo": "CISPO has no trust region to adapt: it truncates a detached importance weight from above at "
    "epsilon_high (a one-sided weight cap, not PPO's two-sided clip)",
    "sapo": "SAPO replaces the clip by a soft sigmoid gate (sapo_temperature_*): there is no clip width",
    "vespo": "VESPO weighs sequences with gamma weights: there is no per-token clip width",
}


def off_policy_diagnostics_apply(args) -> bool:
    """Whether `off_policy_diagnostics` can measure this config's clip: PPO's hard clip, at token level."""
    return args.loss_type in CLIPPED_LOSS_TYPES and args.importance_sampling_level == "token"


@dataclass
class ClipObjectiveArguments:
    r"""The fields of this method in [`RLVRGRPOConfig`] (flat: the same names on the command line and in YAML).

    Parameters:
        clip_recovery (`str`, *optional*, defaults to `"none"`):
            What happens to tokens that PPO's clip cuts off. `"none"`: stock TRL (no gradient). `"nsr"`: Near-boundary
            Stochastic Rescue: each clipped token draws u ~ U(0, 1); on the upper side (A > 0, r > 1 + ε_high) it is
            rescued iff u·r ≤ 1 + ε_high, on the lower side (A < 0, r < 1 − ε_low) iff u ≤ r / (1 − ε_low); a rescued
            token's surrogate is u·r·A. `"nsr_expected"`: the deterministic ablation that gives every clipped token
            the expected NSR gradient weight ((1+ε_high)²/(2r²) upper, r²/(2(1−ε_low)²) lower). Only for loss types
            with a hard clip (grpo, bnpo, dr_grpo, dapo, luspo). The paper uses DAPO's clip (0.2, 0.28).
        clip_recovery_seed (`int`, *optional*):
            Seed of the dedicated generator for NSR's draws (the global RNG, which drives generation sampling, is not
            consumed). Defaults to `seed`. Each process offsets it by its rank, so ranks draw independent noise.
        adaptive_clip (`str`, *optional*, defaults to `"none"`):
            Per-token clip widths instead of `epsilon` / `epsilon_high`. `"none"`: stock TRL. `"acpo"`: ACPO's
            variance-adaptive clip ("What are Key Factors for Updates in RL for LLM Reasoning?",
            https://arxiv.org/abs/2606.22570, code https://github.com/Control-derek/ACPO): the tokens of the batch
            are binned by their current probability into `adaptive_clip_num_bins` equal-width bins over [0, 1]; in bin
            k the clip is [1 − ε_k, 1 + ε_k] with ε_k = clamp(base + α·σ_k, min, max) and σ_k the std of the
            ratios of the bin's completion tokens. Only for loss types with a hard clip (grpo, bnpo, dr_grpo, dapo,
            luspo) at `importance_sampling_level="token"`. Composes with `clip_recovery` (NSR rescues tokens past the
            adaptive bound) and `delta`. Needs reused rollouts (`num_iterations` > 1, `steps_per_generation` >
            `gradient_accumulation_steps`, or vLLM): otherwise the ratio is identically 1 and nothing is clipped.
        adaptive_clip_alpha (`float`, *optional*, defaults to `3.0`):
            α, the weight of the ratios' std in the width (paper: 3.0; the authors' code default is 1.0).
        adaptive_clip_base (`float`, *optional*, defaults to `0.2`):
            The base width, before the std term (paper: 0.2).
        adaptive_clip_min (`float`, *optional*, defaults to `0.0`):
            Lower clamp of the width (paper: 0.0; the authors' code default is 0.05).
        adaptive_clip_max (`float`, *optional*, defaults to `3.0`):
            Upper clamp of the width (paper: 3.0; the authors' code default is 0.5). A width >= 1 switches the lower
            clip off for the bin (1 − ε <= 0).
        adaptive_clip_num_bins (`int`, *optional*, defaults to `5`):
            Number of equal-width probability bins over [0, 1], the last one closed (paper: 5).
        adaptive_clip_scope (`str`, *optional*, defaults to `"global"`):
            Which tokens each bin's std is taken over. `"global"`: the micro-batch of every process at this loss
            computation (per-bin count, sum and sum of squares all-reduced), so every process uses the same bounds.
            `"micro_batch"`: each process's own micro-batch only, as the authors' verl code computes it (there, 8
            responses per GPU micro-batch). The two are the same on one process.
        off_policy_diagnostics (`bool`, *optional*, defaults to `False`):
            Log how off-policy each update is, without changing the loss: over the completion tokens with a non-zero
            advantage, the percentiles 1, 10, 50, 90, 99 of the importance ratio (`off_policy/ratio_p{p}`) and the
            shares clipped below and above (`off_policy/clipped_{low,high}_frac`, against the clip in use: TRL's
            epsilons or ACPO's bounds), overall and per probability bin (`_bin{k}`, the `adaptive_clip_num_bins`
            equal-width bins of π_θ), over all processes; how far past its bound each clipped token is, as counts per
            bin of r / (1 − ε_low) (`off_policy/clipped_low_hist{k}`, edges `CLIPPED_LOW_EDGES` 0, .25, .5, .75, .9, 1)
            and of r / (1 + ε_high) (`off_policy/clipped_high_hist{k}`, edges 1, 1.1, 1.25, 1.5, 2, ∞); and
            `off_policy/update_index`, the micro-step's position in its rollout (0 .. steps_per_generation·
            num_iterations − 1). For loss types with a hard clip at token level.
            Off by default here (options off: stock TRL's metrics); the command line `trl-rlvr-ext grpo` turns it on
            for a run that reuses its rollouts, unless the recipe or a flag sets it (`--off_policy_diagnostics false`).
    """

    clip_recovery: str = field(
        default="none",
        metadata={
            "help": "Clip recovery for PPO's clipped surrogate: 'none' (stock TRL), 'nsr' (Near-boundary Stochastic "
            "Rescue, https://huggingface.co/papers/2605.22703) or 'nsr_expected' (deterministic ablation with the "
            "expected NSR weights). Needs a loss type with a hard clip: grpo, bnpo, dr_grpo, dapo or luspo.",
            "choices": list(CLIP_RECOVERY_MODES),
        },
    )
    clip_recovery_seed: int | None = field(
        default=None,
        metadata={"help": "Seed for NSR's random draws (dedicated generator, offset by rank). Defaults to `seed`."},
    )
    adaptive_clip: str = field(
        default="none",
        metadata={
            "help": "Per-token clip widths: 'none' (stock TRL: epsilon / epsilon_high) or 'acpo' (ACPO's "
            "variance-adaptive clip, https://arxiv.org/abs/2606.22570: bin tokens by their probability, clip bin k "
            "at 1 ± clamp(base + alpha·std_k(ratio), min, max)). Needs a loss type with a hard clip (grpo, bnpo, "
            "dr_grpo, dapo, luspo), token-level ratios, and reused rollouts (num_iterations > 1 or "
            "steps_per_generation > gradient_accumulation_steps).",
            "choices": list(ADAPTIVE_CLIP_MODES),
        },
    )
    adaptive_clip_alpha: float = field(
        default=ACPO_PAPER_SETTINGS["alpha"],
        metadata={"help": "ACPO: alpha, the weight of the ratios' std in the clip width (paper: 3.0)."},
    )
    adaptive_clip_base: float = field(
        default=ACPO_PAPER_SETTINGS["base"],
        metadata={"help": "ACPO: the base clip width, before the std term (paper: 0.2)."},
    )
    adaptive_clip_min: float = field(
        default=ACPO_PAPER_SETTINGS["min_clip"],
        metadata={"help": "ACPO: lower clamp of the clip width (paper: 0.0)."},
    )
    adaptive_clip_max: float = field(
        default=ACPO_PAPER_SETTINGS["max_clip"],
        metadata={"help": "ACPO: upper clamp of the clip width (paper: 3.0; >= 1 switches the lower clip off)."},
    )
    adaptive_clip_num_bins: int = field(
        default=ACPO_PAPER_SETTINGS["num_bins"],
        metadata={"help": "ACPO: number of equal-width bins of the token probability over [0, 1] (paper: 5)."},
    )
    adaptive_clip_scope: str = field(
        default="global",
        metadata={
            "help": "ACPO: the tokens each bin's std is taken over: 'global' (every process's micro-batch at this "
            "loss computation, all-reduced: the same bounds on every process) or 'micro_batch' (each process's own "
            "micro-batch, as the authors' verl code does).",
            "choices": list(ADAPTIVE_CLIP_SCOPES),
        },
    )
    off_policy_diagnostics: bool = field(
        default=False,
        metadata={
            "help": "Log off_policy/*: ratio percentiles (1, 10, 50, 90, 99) and clipped shares per side over the "
            "tokens with a non-zero advantage, overall and per probability bin, and the micro-step's position in its "
            "rollout (off_policy/update_index). The loss is unchanged. Hard-clip loss types, token level. Default False; "
            "`trl-rlvr-ext grpo` turns it on for runs that reuse their rollouts unless the recipe or a flag sets it."
        },
    )


class ClipObjective(GRPOMethod):
    """NSR, ACPO and the off-policy diagnostics at PPO's clipped objective (see the module docstring)."""

    name = "clip_objective"
    Args = ClipObjectiveArguments
    switches: ClassVar[dict] = {"clip_recovery": "none", "adaptive_clip": "none", "off_policy_diagnostics": False}
    needs_reused_rollouts = ("clip_recovery", "adaptive_clip")
    paper = "[NSR](https://huggingface.co/papers/2605.22703), [ACPO](https://arxiv.org/abs/2606.22570)"

    @classmethod
    def check(cls, args) -> None:
        if args.clip_recovery not in CLIP_RECOVERY_MODES:
            raise ValueError(
                f"clip_recovery={args.clip_recovery!r} is not supported. Use one of {list(CLIP_RECOVERY_MODES)}."
            )
        if args.clip_recovery != "none" and args.loss_type not in CLIPPED_LOSS_TYPES:
            raise ValueError(
                f"clip_recovery={args.clip_recovery!r} needs a loss with PPO's hard clip, but loss_type="
                f"{args.loss_type!r} has none to recover from. Set loss_type to one of {list(CLIPPED_LOSS_TYPES)} "
                "(the paper uses 'dapo' with epsilon=0.2, epsilon_high=0.28), or set clip_recovery='none'."
            )
        if args.clip_recovery != "none" and args.clip_recovery_seed is None:
            args.clip_recovery_seed = args.seed
        cls._check_adaptive_clip(args)

    @staticmethod
    def _check_adaptive_clip(args) -> None:
        if args.adaptive_clip not in ADAPTIVE_CLIP_MODES:
            raise ValueError(
                f"adaptive_clip={args.adaptive_clip!r} is not supported. Use one of {list(ADAPTIVE_CLIP_MODES)}."
            )
        if args.adaptive_clip_scope not in ADAPTIVE_CLIP_SCOPES:
            raise ValueError(
                f"adaptive_clip_scope={args.adaptive_clip_scope!r} is not supported. Use one of "
                f"{list(ADAPTIVE_CLIP_SCOPES)}: 'global' (statistics over every process) or 'micro_batch' (each "
                "process's own, as the authors' code)."
            )
        if args.off_policy_diagnostics and not off_policy_diagnostics_apply(args):
            raise ValueError(
                f"off_policy_diagnostics measures the ratios and clipped shares of PPO's token-level clip, but "
                f"loss_type={args.loss_type!r} with importance_sampling_level={args.importance_sampling_level!r} has "
                f"none. Use loss_type in {list(CLIPPED_LOSS_TYPES)} with importance_sampling_level='token', or set "
                "off_policy_diagnostics=False."
            )
        if args.off_policy_diagnostics and (
            not isinstance(args.adaptive_clip_num_bins, int) or args.adaptive_clip_num_bins < 1
        ):
            raise ValueError(
                f"off_policy_diagnostics bins tokens by adaptive_clip_num_bins, which must be a positive integer, got "
                f"{args.adaptive_clip_num_bins!r} (paper: 5)."
            )
        if args.adaptive_clip == "none":
            return
        if args.loss_type in ADAPTIVE_CLIP_REFUSED_LOSS_TYPES:
            raise ValueError(
                f"adaptive_clip={args.adaptive_clip!r} adapts the width of PPO's hard clip, but loss_type="
                f"{args.loss_type!r} has none: {ADAPTIVE_CLIP_REFUSED_LOSS_TYPES[args.loss_type]}. Set loss_type to "
                f"one of {list(CLIPPED_LOSS_TYPES)} (the authors' runs aggregate like 'grpo'), or adaptive_clip='none'."
            )
        if args.loss_type not in CLIPPED_LOSS_TYPES:
            raise ValueError(
                f"adaptive_clip={args.adaptive_clip!r} does not know loss_type={args.loss_type!r}. Use one of "
                f"{list(CLIPPED_LOSS_TYPES)}."
            )
        if args.importance_sampling_level != "token":
            raise ValueError(
                f"adaptive_clip={args.adaptive_clip!r} bins each token by its own probability and clips its own ratio; "
                f"with importance_sampling_level={args.importance_sampling_level!r} the ratio is one per sequence, "
                "which has no token probability to bin. Set importance_sampling_level='token' (the paper's setting)."
            )
        if not isinstance(args.adaptive_clip_num_bins, int) or args.adaptive_clip_num_bins < 1:
            raise ValueError(
                f"adaptive_clip_num_bins must be a positive integer, got {args.adaptive_clip_num_bins!r} (paper: 5)."
            )
        for name in ("alpha", "base", "min", "max"):
            value = getattr(args, f"adaptive_clip_{name}")
            if not value >= 0:  # also refuses NaN
                paper = ACPO_PAPER_SETTINGS[name if name in ("alpha", "base") else f"{name}_clip"]
                raise ValueError(f"adaptive_clip_{name} must be a number >= 0, got {value!r} (paper: {paper}).")
        if args.adaptive_clip_max < args.adaptive_clip_min:
            raise ValueError(
                f"adaptive_clip_max ({args.adaptive_clip_max}) must be >= adaptive_clip_min ({args.adaptive_clip_min}): "
                "the width is clamped to [min, max] (paper: 0.0 and 3.0)."
            )

    # ------------------------------------------------------------------ NSR's generator, checkpointed per process
    def setup(self, trainer) -> None:
        super().setup(trainer)
        self.recovery_generator = None
        self._pending_recovery_state = None
        self._acpo_overflow = None

    def checkpoint_states(self) -> list[CheckpointState]:
        if self.args.clip_recovery == "none":
            return []
        # Each process saves its own generator, so a resumed run draws the same rescue noise as an uninterrupted one;
        # saved beside transformers' per-process RNG states.
        return [
            CheckpointState(
                "clip_recovery_rng_state_{rank}.pth",
                lambda: None if self.recovery_generator is None else self.recovery_generator.get_state(),
                self._load_recovery_state,
                per_rank=True,
            )
        ]

    def generator(self, device: torch.device) -> torch.Generator:
        """The dedicated generator for NSR's draws: seeded from `clip_recovery_seed` + rank, created lazily on the
        device of the ratios, so generation sampling (global RNG) is never disturbed by the rescue draws."""
        if self.recovery_generator is None or self.recovery_generator.device != torch.device(device):
            state = None if self.recovery_generator is None else self.recovery_generator.get_state()
            self.recovery_generator = torch.Generator(device=device)
            if state is not None and torch.device(device).type == "cpu":
                self.recovery_generator.set_state(state)
            else:
                self.recovery_generator.manual_seed(
                    self.args.clip_recovery_seed + self.trainer.accelerator.process_index
                )
            if self._pending_recovery_state is not None:
                self.recovery_generator.set_state(self._pending_recovery_state)
                self._pending_recovery_state = None
        return self.recovery_generator

    def _load_recovery_state(self, state: torch.Tensor, path: str) -> None:
        # Applied when the generator is (re)created on the ratios' device at the first loss computation.
        self._pending_recovery_state = state
        self.recovery_generator = None

    # ------------------------------------------------------------------ hooks inside TRL's `_compute_loss`
    def log_ratio(self, log_ratio: torch.Tensor) -> torch.Tensor:
        """With ACPO, the log-ratio clamped to [−20, 20] before TRL exponentiates it, where the authors'
        `compute_policy_loss` clamps it: the one ratio the bins, the clipped surrogate and TRL's metrics read. One
        overflowing ratio (inf) would otherwise make every bin's width NaN, on every process under the global scope.
        The tokens it clamped are kept for `adaptive_clip/overflow_frac`. Without ACPO, TRL's log-ratio untouched
        (TRL does not clamp)."""
        if self.args.adaptive_clip != "acpo":
            return log_ratio
        log_ratio, self._acpo_overflow = acpo_clamp_log_ratio(log_ratio)
        return log_ratio

    def clip_objective(self, ratio, advantages, per_token_logps, mask, inputs):
        """The per-token loss of PPO's clipped objective with our options, and what its metrics need. The clip widths
        are TRL's `epsilon_low` / `epsilon_high`, or ACPO's per-token widths; the clipped tokens stay clipped (PPO) or
        are rescued (`clip_recovery`)."""
        args, trainer = self.args, self.trainer
        epsilon_low, epsilon_high, acpo = trainer.epsilon_low, trainer.epsilon_high, None
        if args.adaptive_clip == "acpo":
            acpo = self.acpo_bins(per_token_logps, ratio, mask)
            epsilon_low = epsilon_high = acpo.bound
            # the tokens `log_ratio` clamped in this loss computation (it runs just before, in the copy)
            acpo, self._acpo_overflow = {"bins": acpo, "overflow": self._acpo_overflow}, None
        if args.clip_recovery == "none":
            surrogate, clipped_low, clipped_high = ppo_clipped_objective(
                ratio, advantages, epsilon_low, epsilon_high, delta=args.delta
            )
            masks = {"clipped_low": clipped_low, "clipped_high": clipped_high}
        else:
            surrogate, masks = clip_recovery_objective(
                ratio,
                advantages,
                epsilon_low,
                epsilon_high,
                mode=args.clip_recovery,
                generator=self.generator(ratio.device),
                delta=args.delta,
            )
        diagnostics = None
        if args.off_policy_diagnostics:
            diagnostics = {
                "ratio": ratio.detach(),
                "advantages": advantages,
                "probs": torch.exp(per_token_logps.detach()),
                "mask": mask,
                "bounds": {"low": 1 - epsilon_low, "high": 1 + epsilon_high},  # ACPO's: per token
            }
        return -surrogate, {"masks": masks, "acpo": acpo, "diagnostics": diagnostics}

    def acpo_bins(self, per_token_logps: torch.Tensor, ratio: torch.Tensor, mask: torch.Tensor):
        """ACPO's bins over the current probabilities π_θ = exp(per-token log-probs, at TRL's temperature), the
        authors' `current_probs`. With `adaptive_clip_scope="global"` the per-bin moments are summed over processes,
        so every process clips with the same bounds (one all-reduce of 3 × num_bins float64 per loss computation)."""
        args, accelerator = self.args, self.trainer.accelerator
        reduce = None
        if args.adaptive_clip_scope == "global":
            reduce = lambda moments: accelerator.reduce(moments, reduction="sum")  # noqa: E731
        return acpo_bins(
            torch.exp(per_token_logps.detach()),
            ratio,
            mask,
            alpha=args.adaptive_clip_alpha,
            base=args.adaptive_clip_base,
            min_clip=args.adaptive_clip_min,
            max_clip=args.adaptive_clip_max,
            num_bins=args.adaptive_clip_num_bins,
            reduce_moments=reduce,
        )

    # ------------------------------------------------------------------ metrics
    def log_loss(self, mode: str, clip_state: dict, mask: torch.Tensor, global_masked_mean) -> None:
        # Token fractions over all completion tokens, reduced over ranks by TRL's own `global_masked_mean`, as its
        # `clip_ratio/*` metrics are (a rescued or clipped sequence counts all of its tokens).
        masks, acpo = clip_state["masks"], clip_state["acpo"]
        metrics = self.metric_store(mode)
        if self.args.clip_recovery != "none":
            for side in ("low", "high"):
                rescued = masks[f"rescued_{side}"].float().expand_as(mask)
                metrics[f"clip_recovery/{side}_frac"].append(global_masked_mean(rescued))
        if acpo is not None:
            self._log_acpo(mode, acpo["bins"], masks, global_masked_mean)
            # share of the completion tokens whose |log-ratio| passed 20 and was clamped, over every process
            metrics["adaptive_clip/overflow_frac"].append(global_masked_mean(acpo["overflow"].float()))
        if clip_state["diagnostics"] is not None:
            self.log_off_policy(mode, clip_state["diagnostics"], masks)

    def _log_acpo(self, mode: str, acpo, masks: dict, global_masked_mean) -> None:
        # TRL's `clip_ratio/*` keep measuring against the fixed epsilon / epsilon_high; these use ACPO's bounds.
        metrics = self.metric_store(mode)
        for side in ("low", "high"):
            clipped = masks[f"clipped_{side}"].float()
            metrics[f"adaptive_clip/clip_ratio_{side}"].append(global_masked_mean(clipped))
        count = acpo.count
        present = (count > 0).to(torch.float64)
        # per bin: [number of processes where it is non-empty, Σ bound, Σ std, tokens]
        per_bin = torch.stack(
            [present, acpo.bin_bound.nan_to_num() * present, acpo.ratio_std.nan_to_num() * present, count]
        )
        if self.args.adaptive_clip_scope == "micro_batch":  # each process has its own bounds: log their mean
            per_bin = self.trainer.accelerator.reduce(per_bin, reduction="sum")
        processes, bound_sum, std_sum, tokens = per_bin.tolist()
        total = max(sum(tokens), 1.0)
        for k in range(len(tokens)):
            metrics[f"adaptive_clip/token_frac_bin{k}"].append(tokens[k] / total)
            if processes[k] > 0:  # an empty bin has no bound: not logged rather than logged as NaN
                metrics[f"adaptive_clip/bound_bin{k}"].append(bound_sum[k] / processes[k])
                metrics[f"adaptive_clip/ratio_std_bin{k}"].append(std_sum[k] / processes[k])

    def log_off_policy(self, mode: str, diagnostics: dict, masks: dict) -> None:
        """`off_policy/*`: the ratios' percentiles and the clipped shares over the tokens with a non-zero advantage,
        overall and per probability bin, over every process; and the micro-step's position in its rollout."""
        args, num_bins, accelerator = self.args, self.args.adaptive_clip_num_bins, self.trainer.accelerator
        metrics = self.metric_store(mode)
        ratio, mask = diagnostics["ratio"], diagnostics["mask"]
        select = mask.bool() & (diagnostics["advantages"] != 0)
        bin_index = acpo_bin_index(diagnostics["probs"], select, num_bins)
        counts = accelerator.reduce(
            clipped_counts(masks["clipped_low"], masks["clipped_high"], bin_index, num_bins), reduction="sum"
        )
        # every process's selected ratios with their bins, NaN-padded to one length, so the percentiles are global
        local = torch.stack([ratio[select].float(), bin_index[select].float()], dim=1)
        pooled = accelerator.gather(accelerator.pad_across_processes(local, pad_index=float("nan")))
        values, bins = pooled[:, 0], pooled[:, 1]
        percentiles = torch.stack(
            [ratio_percentiles(values), *(ratio_percentiles(values[bins == k]) for k in range(num_bins))]
        )
        tokens, low, high = counts.tolist()
        for row, suffix in zip(percentiles.tolist(), ["", *(f"_bin{k}" for k in range(num_bins))], strict=True):
            for p, value in zip(RATIO_PERCENTILES, row, strict=True):
                if not math.isnan(value):  # NaN: the (bin's) selection is empty
                    metrics[f"off_policy/ratio_p{p}{suffix}"].append(value)
        for k, suffix in [(num_bins, ""), *((k, f"_bin{k}") for k in range(num_bins))]:
            if tokens[k] > 0:
                metrics[f"off_policy/clipped_low_frac{suffix}"].append(low[k] / tokens[k])
                metrics[f"off_policy/clipped_high_frac{suffix}"].append(high[k] / tokens[k])
        # how far past its bound each clipped token is: counts per bin of r / bound, summed over processes (a
        # micro-step's counts; their mean over a logging window, times its steps, is the window's count)
        for side, edges in (("low", CLIPPED_LOW_EDGES), ("high", CLIPPED_HIGH_EDGES)):
            clipped = masks[f"clipped_{side}"] & select
            histogram = clipped_ratio_histogram(ratio, clipped, diagnostics["bounds"][side], edges)
            for k, count in enumerate(accelerator.reduce(histogram, reduction="sum").tolist()):
                metrics[f"off_policy/clipped_{side}_hist{k}"].append(count)
        if mode == "train":  # TRL's `_step` (micro-steps so far) is incremented after the loss of this one
            cycle = args.steps_per_generation * self.trainer.num_iterations
            metrics["off_policy/update_index"].append(float(self.trainer._step % cycle))
