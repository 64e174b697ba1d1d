"""DelTA's token credit (`token_credit="delta"`, https://arxiv.org/abs/2605.21467): each token's advantage is multiplied
by a weight from how well its gradient proxy (1 − p)·h separates the batch's positive tokens from its negative ones
(`trl_rlvr_ext.losses.delta_token_weights`); logged as `token_credit/*`.

The weights are computed once per generation batch (`scored_batch`, after dynamic sampling, curation and POISE, on the
whole batch of this process: the authors compute them once per rollout batch, with the policy that sampled it, before
the updates, verl's `compute_log_prob_h`) into the declared batch field `token_credit_weights`; the `advantages` hook
multiplies them in where PPO's clipped objective reads the advantages, so NSR and ACPO see the weighted advantages.

The hidden states and log-probs come from the old-log-prob pass TRL already makes when it makes one (rollouts reused:
``num_iterations`` > 1 or more generation steps than accumulation steps; vLLM's importance-sampling correction), with
the hook riding on it: no extra forward. That pass is the same call on the same batch as DelTA's own, so the weights are
the same to the bit, provided nothing in the model acts differently in training mode (TRL's pass runs in the trainer's
mode, DelTA's own in eval mode, as the authors'). Otherwise (no old-log-prob pass, a dropout or other train-only
module, dynamic sampling, whose merged batch is not the one any pass scored) DelTA makes its own no-grad pass, and the
log says why once.
"""

import logging
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from ...losses.delta import DELTA_PAPER_SETTINGS, delta_token_weights, delta_weight_stats
from ..hooked_forward import (
    SharedOldLogpsPass,
    capture_completion_states,
    hooked_forward,
    lm_backbone,
    train_mode_changes_forward,
    trl_scores_old_logps,
)
from ..method import GRPOMethod
from .clip_objective import CLIPPED_LOSS_TYPES


TOKEN_CREDIT_MODES = ("none", "delta")
# Why the loss types outside PPO's clipped objective cannot take DelTA's token weights: the trainer multiplies the
# advantages where the clipped objective reads them (the authors' loss is verl's vanilla PPO loss, with DAPO's clip).
TOKEN_CREDIT_REFUSED_LOSS_TYPES = {
    "cispo": "CISPO's loss is a truncated importance weight times A·log p, outside the clipped objective whose "
    "advantages DelTA reweights",
    "sapo": "SAPO replaces the clipped objective by a soft sigmoid gate, outside the path whose advantages DelTA "
    "reweights",
    "vespo": "VESPO weighs whole sequences with gamma weights computed from the advantages, outside the clipped "
    "objective whose advantages DelTA reweights",
}
WEIGHTS_KEY = "token_credit_weights"

logger = logging.getLogger(__name__)


@dataclass
class DeltaArguments:
    r"""The fields of this method in [`RLVRGRPOConfig`] (flat: the same names on the command line and in YAML).

    Parameters:
        token_credit (`str`, *optional*, defaults to `"none"`):
            Per-token credit assignment inside each sequence. `"none"`: stock TRL (every token of a sequence gets its
            advantage). `"delta"`: DelTA ("Discriminative Token Credit Assignment for RLVR",
            https://arxiv.org/abs/2605.21467, code https://github.com/RUCBM/DelTA): each token's gradient proxy
            v = (1 − p)·h (p the sampled token's probability, h the hidden state entering the LM head) is compared
            with the advantage-weighted centroids of the positive- and negative-advantage tokens; a sigmoid of the
            margin maps it to a weight in [`token_credit_w_lo`, `token_credit_w_hi`], the weights are renormalised to
            mean 1 and multiply the advantage (`trl_rlvr_ext.losses.delta_token_weights`). As in the authors' code,
            the weights are computed once per generation batch on each process, without gradient, by the policy that
            sampled the batch: in TRL's old-log-prob pass when rollouts are reused (no extra forward), else in one
            extra forward pass. Only for loss types with PPO's clipped objective
            (grpo, bnpo, dr_grpo, dapo, luspo). Composes with `clip_recovery` and `adaptive_clip`.
        token_credit_w_lo (`float`, *optional*, defaults to `0.8`):
            DelTA: the weight of the least discriminative tokens, before renormalisation (released script: 0.8).
        token_credit_w_hi (`float`, *optional*, defaults to `1.2`):
            DelTA: the weight of the most discriminative tokens, before renormalisation (released script: 1.2).
        token_credit_refine_steps (`int`, *optional*, defaults to `1`):
            DelTA: refinements of the centroids by the tokens' sigmoid posteriors (the authors' K; released
            script: 1; 0 keeps the advantage-weighted centroids).
    """

    token_credit: str = field(
        default="none",
        metadata={
            "help": "Per-token credit inside each sequence: 'none' (stock TRL) or 'delta' (DelTA, "
            "https://arxiv.org/abs/2605.21467: each token's advantage is multiplied by a weight in [w_lo, w_hi], "
            "renormalised to mean 1, from how well its gradient proxy (1 - p)·h separates the positive from the "
            "negative tokens of the batch). Needs a loss type with PPO's clipped objective: grpo, bnpo, dr_grpo, dapo "
            "or luspo.",
            "choices": list(TOKEN_CREDIT_MODES),
        },
    )
    token_credit_w_lo: float = field(
        default=DELTA_PAPER_SETTINGS["w_lo"],
        metadata={"help": "DelTA: the lowest token weight, before renormalisation (released script: 0.8)."},
    )
    token_credit_w_hi: float = field(
        default=DELTA_PAPER_SETTINGS["w_hi"],
        metadata={"help": "DelTA: the highest token weight, before renormalisation (released script: 1.2)."},
    )
    token_credit_refine_steps: int = field(
        default=DELTA_PAPER_SETTINGS["refine_steps"],
        metadata={"help": "DelTA: refinements of the class centroids by the sigmoid posteriors (released script: 1)."},
    )


class Delta(GRPOMethod):
    """DelTA's token weights (see the module docstring)."""

    name = "delta"
    Args = DeltaArguments
    switches: ClassVar[dict] = {"token_credit": "none"}
    paper = "[DelTA](https://arxiv.org/abs/2605.21467)"
    metric_prefix = "token_credit"

    @classmethod
    def check(cls, args) -> None:
        if args.token_credit not in TOKEN_CREDIT_MODES:
            raise ValueError(
                f"token_credit={args.token_credit!r} is not supported. Use one of {list(TOKEN_CREDIT_MODES)}."
            )
        if args.token_credit == "none":
            return
        if args.loss_type in TOKEN_CREDIT_REFUSED_LOSS_TYPES:
            raise ValueError(
                f"token_credit={args.token_credit!r} multiplies the advantages of PPO's clipped objective, but loss_type="
                f"{args.loss_type!r} has none: {TOKEN_CREDIT_REFUSED_LOSS_TYPES[args.loss_type]}. Set loss_type to "
                f"one of {list(CLIPPED_LOSS_TYPES)} (the authors use DAPO's clip with token-mean aggregation: 'dapo'), "
                "or token_credit='none'."
            )
        if args.loss_type not in CLIPPED_LOSS_TYPES:
            raise ValueError(
                f"token_credit={args.token_credit!r} does not know loss_type={args.loss_type!r}. Use one of "
                f"{list(CLIPPED_LOSS_TYPES)}."
            )
        if not 0 <= args.token_credit_w_lo <= args.token_credit_w_hi:  # also refuses NaN
            raise ValueError(
                f"DelTA needs 0 <= token_credit_w_lo <= token_credit_w_hi, got {args.token_credit_w_lo!r} and "
                f"{args.token_credit_w_hi!r} (released script: 0.8 and 1.2)."
            )
        steps = args.token_credit_refine_steps
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise ValueError(f"token_credit_refine_steps must be an integer >= 0, got {steps!r} (released script: 1).")

    def setup(self, trainer) -> None:
        super().setup(trainer)
        self.shared_pass, self._own_pass_said = None, False
        why = self._why_not_shared()
        if why is None:
            backbone = lm_backbone(trainer, f"token_credit={self.args.token_credit!r}")
            self.shared_pass = SharedOldLogpsPass(trainer, backbone)
            logger.info(
                "token_credit='delta': the hidden states come from TRL's old-log-prob pass (no extra forward)."
            )
        else:
            logger.info("token_credit='delta': one extra no-grad forward per generation batch, because %s.", why)

    def _why_not_shared(self) -> str | None:
        """Why TRL's old-log-prob pass cannot give DelTA's hidden states in training (None: it can)."""
        if not trl_scores_old_logps(self.trainer):
            return (
                "TRL makes no old-log-prob pass when each generation batch serves one optimizer step "
                "(num_iterations=1, steps_per_generation <= gradient_accumulation_steps, no vLLM importance sampling)"
            )
        if getattr(self.args, "dynamic_sampling", False):
            return "dynamic sampling merges rounds into a batch that no pass has scored as a whole"
        why = train_mode_changes_forward(self.trainer.model)
        if why is not None:
            return f"TRL's pass runs in training mode and the model's forward depends on it ({why})"
        return None

    def generate_and_score(self, call, inputs):
        # Innermost of the methods' wraps: ``call`` is TRL's own generation and scoring of this batch
        if self.shared_pass is None:
            return call(inputs)
        return self.shared_pass.wrap(call, inputs)

    def scored_batch(self, output: dict) -> None:
        output[WEIGHTS_KEY] = self.token_weights(output)

    def advantages(self, advantages, inputs):
        return advantages * inputs[WEIGHTS_KEY]

    def token_weights(self, output: dict) -> torch.Tensor:
        """DelTA's weights for the generation batch `output` of this process, from the hidden states at the positions
        that predict the completion tokens (a forward hook on the backbone) and the log-probabilities of the same pass
        (TRL's own, at its temperature): TRL's old-log-prob pass when it scored this very batch (`setup`), else one
        extra forward pass without gradient, in chunks of the per-device batch size."""
        args = self.args
        mode = "train" if self.trainer.model.training else "eval"
        mask = (
            output["completion_mask"] if "tool_mask" not in output else output["completion_mask"] * output["tool_mask"]
        )
        shared = self.shared_pass.take(output) if self.shared_pass is not None else None
        if shared is not None:
            captured, logps = shared
        else:
            if self.shared_pass is not None and not self._own_pass_said:  # expected the shared pass: say why not
                self._own_pass_said = True
                logger.warning(
                    "token_credit='delta': TRL's old-log-prob pass did not score this generation batch as it reached "
                    "DelTA (another method rebuilt the batch, or the installed TRL scores it differently), so DelTA "
                    "made its own forward pass: the same weights, one extra forward per generation batch."
                )
            captured = []
            # Without dropout (LoRA's included), as the authors' pass runs (`actor_module.eval()`): the weights are a
            # deterministic function of the batch, and this pass draws nothing from the global RNG.
            capture = capture_completion_states(output["completion_ids"].size(1), captured)
            backbone = lm_backbone(self.trainer, f"token_credit={args.token_credit!r}")
            logps, _ = hooked_forward(self.trainer, backbone, capture, output)
        hidden = torch.cat(captured, dim=0)
        if hidden.shape[:2] != logps.shape:
            raise RuntimeError(
                f"token_credit: captured hidden states of shape {tuple(hidden.shape)} for log-probs of shape "
                f"{tuple(logps.shape)}: the backbone ran a different number of times or positions than the LM head."
            )
        result = delta_token_weights(
            hidden,
            logps,
            output["advantages"],
            mask,
            w_lo=args.token_credit_w_lo,
            w_hi=args.token_credit_w_hi,
            refine_steps=args.token_credit_refine_steps,
        )
        self._log(mode, delta_weight_stats(result, mask, output["advantages"]))
        return result.weights

    def _log(self, mode: str, stats: torch.Tensor) -> None:
        # Per process, then over processes: the mean of the means, std and fractions; the min of the minima, the max
        # of the maxima. NaN (a process without tokens or without signed tokens) is left out.
        stats = self.trainer.accelerator.gather(stats[None]).float()
        names = ["weight_mean", "weight_min", "weight_max", "weight_std", "frac_at_low", "frac_at_high"]
        for k, name in enumerate(names):
            column = stats[:, k][~torch.isnan(stats[:, k])]
            if column.numel() == 0:
                continue
            value = column.min() if name == "weight_min" else column.max() if name == "weight_max" else column.mean()
            self.log_metric(name, value.item(), mode)
