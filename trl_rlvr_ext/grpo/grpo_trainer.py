"""`RLVRGRPOTrainer`: TRL's `GRPOTrainer` plus stochastic clip recovery (NSR).

With every option of `RLVRGRPOConfig` at its default, each overridden method delegates to TRL unchanged, so the
trainer is stock `GRPOTrainer` to the bit (tests/test_grpo_trainer.py proves it).
"""

import os
from typing import ClassVar

import torch
from trl import GRPOTrainer
from trl.trainer.utils import nanmax, nanmin

from ..losses.clip_recovery import clip_recovery_objective
from .curation_mixin import CurationMixin
from .dynamic_sampling import DynamicSamplingMixin
from .grpo_config import CLIPPED_LOSS_TYPES, RLVRGRPOConfig


class RLVRGRPOTrainer(DynamicSamplingMixin, CurationMixin, GRPOTrainer):
    """[`~trl.GRPOTrainer`] with this package's methods, configured by [`RLVRGRPOConfig`].

    - Stochastic clip recovery (`clip_recovery="nsr"` / `"nsr_expected"`, https://huggingface.co/papers/2605.22703):
      tokens cut off by PPO's clip are rescued at random (or given their expected weight), see
      `trl_rlvr_ext.losses.clip_recovery_objective`. Logged as `clip_recovery/low_frac` and
      `clip_recovery/high_frac` (rescued tokens over all completion tokens), beside TRL's `clip_ratio/*`.
    - Online curation (`curation="self"`, https://huggingface.co/papers/2510.02230, or `"pass_rate"`): train only on
      prompts the policy does not yet solve greedily, or sample prompts by a running pass-rate estimate
      (`CurationMixin`); logged as `curation/*`.
    - LoRA initialisers (`lora_init`, with a `peft_config`): RLPO, RLMO, PiSSA, MiLoRA, with TRL's reference kept
      equal to the original model.

    The constructor is `GRPOTrainer`'s; `args` must be an [`RLVRGRPOConfig`].
    """

    _tag_names: ClassVar[list[str]] = ["trl", "grpo", "trl-rlvr-ext"]

    def __init__(self, model, reward_funcs=None, args: RLVRGRPOConfig | None = None, **kwargs):
        if args is not None and not isinstance(args, RLVRGRPOConfig):
            raise TypeError(
                f"RLVRGRPOTrainer needs `args` to be an RLVRGRPOConfig, got {type(args).__name__}. Build it with "
                "`trl_rlvr_ext.RLVRGRPOConfig(...)`: it takes every GRPOConfig field plus this package's options."
            )
        if args is None:
            model_name = model if isinstance(model, str) else model.config._name_or_path
            args = RLVRGRPOConfig(f"{str(model_name).split('/')[-1] or 'model'}-RLVR-GRPO")
        if args.lora_init is not None:  # build + initialise the PeftModel here, so TRL's reference is the original
            from ..lora_init.integration import apply_lora_init_to_trainer_arguments

            model, kwargs = apply_lora_init_to_trainer_arguments(model, args, kwargs)
        super().__init__(model, reward_funcs, args=args, **kwargs)
        self._recovery_generator = None

    # ---------------------------------------------------------------- Stochastic clip recovery (NSR)
    def _clip_recovery_generator(self, device: torch.device) -> torch.Generator:
        """The dedicated generator for NSR's draws: seeded from `clip_recovery_seed` + rank, created lazily on the
        device of the ratios, so generation sampling (global RNG) is never disturbed by the rescue draws."""
        if self._recovery_generator is None or self._recovery_generator.device != torch.device(device):
            state = None if self._recovery_generator is None else self._recovery_generator.get_state()
            self._recovery_generator = torch.Generator(device=device)
            if state is not None and torch.device(device).type == "cpu":
                self._recovery_generator.set_state(state)
            else:
                self._recovery_generator.manual_seed(self.args.clip_recovery_seed + self.accelerator.process_index)
            if getattr(self, "_pending_recovery_state", None) is not None:
                self._recovery_generator.set_state(self._pending_recovery_state)
                self._pending_recovery_state = None
        return self._recovery_generator

    def _recovery_state_file(self, directory: str) -> str:
        return os.path.join(directory, f"clip_recovery_rng_state_{self.accelerator.process_index}.pth")

    def _save_rng_state(self, output_dir: str) -> None:
        # Transformers saves each rank's global RNG states here; NSR's own generator travels with them, so a resumed
        # run draws the same rescue noise as an uninterrupted one.
        super()._save_rng_state(output_dir)
        if self._recovery_generator is not None:
            torch.save(self._recovery_generator.get_state(), self._recovery_state_file(output_dir))

    def _load_rng_state(self, checkpoint: str | None) -> None:
        super()._load_rng_state(checkpoint)
        if checkpoint is None or self.args.clip_recovery == "none":
            return
        path = self._recovery_state_file(checkpoint)
        if os.path.isfile(path):
            # Applied when the generator is (re)created on the ratios' device at the first loss computation.
            self._pending_recovery_state = torch.load(path, weights_only=True)
            self._recovery_generator = None

    def _compute_loss(self, model, inputs):
        if self.args.clip_recovery == "none":
            return super()._compute_loss(model, inputs)
        # Mirrors trl==1.16.0 GRPOTrainer._compute_loss line for line, except the block marked below.
        # Compute the per-token log probabilities for the model
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logits_to_keep = completion_ids.size(1)  # we only need to compute the logits for the completion tokens
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]

        # Compute the per_token_logps and the entropy at each position in the completion
        per_token_logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            pixel_values=inputs.get("pixel_values"),
            image_grid_thw=inputs.get("image_grid_thw"),
            num_images=inputs.get("num_images"),
            pixel_attention_mask=inputs.get("pixel_attention_mask"),
            spatial_shapes=inputs.get("spatial_shapes"),
            num_tiles=inputs.get("num_tiles"),
            image_sizes=inputs.get("image_sizes"),
            token_type_ids=inputs.get("token_type_ids"),
            mm_token_type_ids=inputs.get("mm_token_type_ids"),
            image_position_ids=inputs.get("image_position_ids"),
        )

        if self.top_entropy_quantile < 1.0:
            entropy_mask = self.get_high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile)
        else:
            entropy_mask = None

        # Compute the loss
        advantages = inputs["advantages"]
        # In the base GRPO implementation, advantages are expected to have shape (B,). To support subclasses that
        # provide advantages with shape (B, T), we *conditionally* unsqueeze the tensor.
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        # When num_iterations == 1 and steps_per_generation <= gradient_accumulation_steps,
        # old_per_token_logps == per_token_logps. In this case we can skip its computation
        # (see _generate_and_score_completions) and instead use per_token_logps.detach().
        # The exception is when using vLLM, where we always compute old_per_token_logps
        # for importance sampling
        old_per_token_logps = inputs.get("old_per_token_logps")
        old_per_token_logps = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps

        if self.off_policy_mask_threshold is not None:
            # OPSM should use inference-time logprobs to detect both sources of off-policyness:
            # 1. Drift from gradient updates (always present)
            # 2. Drift from training-inference mismatch (when using vLLM)
            # When using vLLM, prioritize sampling_per_token_logps, otherwise use old_per_token_logps
            sampling_per_token_logps = inputs.get("sampling_per_token_logps", old_per_token_logps)

            off_policy_mask = self.get_off_policy_mask(
                advantages=advantages,
                per_token_logps=per_token_logps,
                sampling_per_token_logps=sampling_per_token_logps,
                mask=mask,
                off_policy_threshold=self.off_policy_mask_threshold,
            )

        log_ratio = per_token_logps - old_per_token_logps
        if self.importance_sampling_level == "token":
            log_importance_weights = log_ratio
        elif self.importance_sampling_level == "sequence":
            log_importance_weights = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
            log_importance_weights = log_importance_weights.unsqueeze(-1)
        else:
            raise ValueError(
                f"Unknown importance sampling level: {self.importance_sampling_level}. Possible values are 'token' "
                "and 'sequence'."
            )

        coef_1 = torch.exp(log_importance_weights)

        # Compute the KL divergence between the model and the reference model
        if self.beta != 0.0:
            ref_per_token_logps = inputs["ref_per_token_logps"]
            per_token_kl = (
                torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1
            )
            # Importance sampling correction for the KL divergence
            if self.args.use_bias_correction_kl:
                per_token_kl = per_token_kl * coef_1

        # From here, log_importance_weights (and all subsequent tensors, coef_1, coef_2, etc.) shape depends on
        # importance_sampling_level: "token" level: (B, T); "sequence" level: (B, 1)
        # NSR is only allowed for the hard-clip loss types (RLVRGRPOConfig checks it), so TRL's cispo / sapo / vespo
        # branches are left out here; those loss types always take `super()._compute_loss` above.
        if self.loss_type in CLIPPED_LOSS_TYPES:
            # ---- the one change w.r.t. TRL: PPO's min(r·A, clip(r)·A) with clip recovery (NSR) -----------------
            surrogate, recovery_masks = clip_recovery_objective(
                coef_1,
                advantages,
                self.epsilon_low,
                self.epsilon_high,
                mode=self.args.clip_recovery,
                generator=self._clip_recovery_generator(coef_1.device),
                delta=self.args.delta,
            )
            per_token_loss = -surrogate
            if self.args.delta is not None:  # as TRL does, so that the clip_ratio/* metrics below match it exactly
                coef_1 = torch.clamp(coef_1, max=self.args.delta)
            # --------------------------------------------------------------------------------------------------
        else:
            raise ValueError(f"Unknown loss type: {self.loss_type}")

        if self.off_policy_mask_threshold is not None:
            per_token_loss = per_token_loss * off_policy_mask

        if entropy_mask is not None:
            per_token_loss = per_token_loss * entropy_mask

        if self.use_vllm and self.vllm_importance_sampling_correction and self.loss_type != "vespo":
            per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]

        if self.beta != 0.0:
            per_token_loss = per_token_loss + self.beta * per_token_kl

        mode = "train" if self.model.training else "eval"
        if self.loss_type in ["grpo", "sapo"]:
            loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0  # no accum in eval
            policy_loss = loss.detach()
            loss = loss / normalizer
        elif self.loss_type == "bnpo":
            loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0  # no accum in eval
            policy_loss = loss.detach()
            loss = loss / normalizer
        elif self.loss_type == "dr_grpo":
            loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length)
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0  # no accum in eval
            policy_loss = loss.detach()
            loss = loss / normalizer
        elif self.loss_type in ["cispo", "dapo", "vespo"]:
            # `num_items_in_batch` spans the generation batch, so rescale it to one accumulation window
            normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if mode == "train":  # in eval, the batch is neither split across steps nor accumulated
                normalizer = normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation
            loss = (per_token_loss * mask).sum() / normalizer
            policy_loss = loss.detach()
        elif self.loss_type == "luspo":
            # `per_token_loss` is (B, 1) only in the recommended sequence-level setup; importance_sampling_level=
            # "token" (the config default), the KL term, token-level vLLM IS ratios, and the entropy mask all
            # broadcast it to (B, T), so mask before aggregating.
            loss = (per_token_loss * mask).sum(-1).mean()
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            policy_loss = loss.detach()
            loss = loss / normalizer
        else:
            raise ValueError(f"Unknown loss type: {self.loss_type}")

        # Entropy bonus: add entropy regularization to encourage exploration. _entropy_bonus_enabled is set
        # whenever a non-zero static coef is set OR adaptive mode is enabled (adaptive stays enabled even when
        # entropy_coef has been decremented to entropy_coef_min so it can recover once entropy drops again).
        if self._entropy_bonus_enabled:
            # When top_entropy_quantile < 1.0, entropy_mask restricts policy gradients to high-entropy
            # tokens. Use the same effective mask for the entropy bonus so it acts on the same tokens.
            effective_mask = mask if entropy_mask is None else mask * entropy_mask
            # Entropy bonus = mean per-token entropy H (the documented objective L = L_policy - coef * H), so
            # H does not depend on how each loss type normalizes its policy term. The bonus is a mean over the
            # tokens it acts on (effective_mask), scaled only for gradient accumulation, never by a loss-type-
            # specific policy normalizer. (The adaptive controller below tracks a window-global token-weighted mean,
            # which can differ from this per-micro-batch mean when token counts vary across micro-batches.)
            accumulation_factor = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            entropy_loss = (
                (entropies * effective_mask).sum() / effective_mask.sum().clamp(min=1.0) / accumulation_factor
            )

            # Apply the coefficient and gating from the end of the previous optimizer step, so that every
            # micro-batch in the current accumulation window applies the same entropy bonus. The adaptive
            # update below only takes effect on the next step.
            if self.use_adaptive_entropy:
                apply_coef = self.entropy_coef if self._last_world_entropy <= self.args.entropy_target else 0.0
            else:
                apply_coef = self.entropy_coef

            loss = loss - apply_coef * entropy_loss

            self._metrics[mode]["policy_loss"].append(self.accelerator.gather(policy_loss).nanmean().item())

            # Adaptive update. Gated on train mode so evaluation cannot mutate the entropy controller state.
            if self.use_adaptive_entropy and mode == "train":
                # Accumulate the entropy sum and active-token count of every micro-batch into a running window
                # buffer, so the controller measures the exact window-global entropy rather than just the last
                # micro-batch (which would be a 1 / gradient_accumulation_steps subsample).
                stats = torch.stack([(entropies * effective_mask).sum(), effective_mask.sum()]).detach()
                if self._entropy_window_stats is None:
                    self._entropy_window_stats = stats
                else:
                    self._entropy_window_stats = self._entropy_window_stats + stats
                # At the optimizer-step boundary, reduce the window totals across ranks (sum and token count
                # jointly, for a true global mean unbiased when ranks have different completion lengths),
                # update the coefficient for the next step, then reset the window buffer.
                if self.accelerator.sync_gradients:
                    window_stats = self.accelerator.reduce(self._entropy_window_stats, reduction="sum")
                    world_entropy = (window_stats[0] / window_stats[1].clamp(min=1.0)).item()
                    if world_entropy <= self.args.entropy_target:
                        self.entropy_coef = min(
                            self.entropy_coef + self.args.entropy_coef_delta, self.args.entropy_coef_max
                        )
                    else:
                        self.entropy_coef = max(
                            self.entropy_coef - self.args.entropy_coef_delta, self.args.entropy_coef_min
                        )
                    self._last_world_entropy = world_entropy
                    self._entropy_window_stats = None

            # Log entropy_coef on train optimizer-step boundaries (constant for static control; updated just
            # above for adaptive control). sync_gradients is always True in eval (no accumulation context).
            if mode == "train" and self.accelerator.sync_gradients:
                self._metrics[mode]["entropy_coef"].append(self.entropy_coef)

        # The policy loss above is scaled for gradient accumulation (HF auto-scaling is off here), so scale aux too
        if self.aux_loss_enabled:
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss + self.router_aux_loss_coef * aux_loss / normalizer
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather_for_metrics(aux_loss).mean().item())

        # Log the metrics
        def masked_seq_mean(x):
            if x.shape[1] == 1:  # when importance_sampling_level == "sequence": already one value per sequence
                return x.squeeze(1)
            return (x * mask).sum(-1) / mask.sum(-1)

        def global_masked_mean(x):
            if x.shape[1] == 1:  # when importance_sampling_level == "sequence": one value per sequence
                local_sum, local_count = x.sum(), torch.tensor(float(x.shape[0]), device=x.device)
            else:
                local_sum, local_count = (x * mask).sum(), mask.sum().float()
            totals = self.accelerator.reduce(torch.stack([local_sum, local_count]), reduction="sum")
            return (totals[0] / totals[1].clamp(min=1.0)).item()

        if self.beta != 0.0:
            self._metrics[mode]["kl"].append(global_masked_mean(per_token_kl))

        self._metrics[mode]["entropy"].append(global_masked_mean(entropies))

        if self.loss_type in CLIPPED_LOSS_TYPES:
            # Compute the clipped probability ratios
            is_low_clipped = (coef_1 < 1 - self.epsilon_low) & (advantages < 0)
            is_high_clipped = (coef_1 > 1 + self.epsilon_high) & (advantages > 0)
            is_region_clipped = is_low_clipped | is_high_clipped
            self._metrics[mode]["clip_ratio/low_mean"].append(global_masked_mean(is_low_clipped.float()))
            self._metrics[mode]["clip_ratio/high_mean"].append(global_masked_mean(is_high_clipped.float()))
            self._metrics[mode]["clip_ratio/region_mean"].append(global_masked_mean(is_region_clipped.float()))
            gathered_low_clip = self.accelerator.gather(masked_seq_mean(is_low_clipped.float()))
            self._metrics[mode]["clip_ratio/low_min"].append(nanmin(gathered_low_clip).item())
            gathered_high_clip = self.accelerator.gather(masked_seq_mean(is_high_clipped.float()))
            self._metrics[mode]["clip_ratio/high_max"].append(nanmax(gathered_high_clip).item())
            # Rescued tokens over all completion tokens (a rescued sequence rescues all of its tokens).
            for side in ("low", "high"):
                rescued = recovery_masks[f"rescued_{side}"].float().expand_as(mask)
                self._metrics[mode][f"clip_recovery/{side}_frac"].append(global_masked_mean(rescued))

        return loss
