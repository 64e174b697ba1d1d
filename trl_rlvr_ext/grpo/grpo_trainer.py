"""`RLVRGRPOTrainer`: TRL's `GRPOTrainer` plus clip recovery (NSR), ACPO's adaptive clip, curation, dynamic sampling.

With every option of `RLVRGRPOConfig` at its default, each overridden method delegates to TRL unchanged, so the
trainer is stock `GRPOTrainer` to the bit (tests/test_grpo_trainer.py proves it).
"""

import math
from typing import ClassVar

import torch
from trl import GRPOConfig, GRPOTrainer

from .._compat import check_fsdp_really_runs, resolve_trainer_config
from .._trl import load_copy
from ..data import resolve_model_argument
from ..losses.acpo import acpo_bin_index, acpo_bins, acpo_clamp_log_ratio
from ..losses.clip_recovery import clip_recovery_objective
from ..losses.delta import delta_token_weights, delta_weight_stats
from ..losses.off_policy import (
    CLIPPED_HIGH_EDGES,
    CLIPPED_LOW_EDGES,
    RATIO_PERCENTILES,
    clipped_counts,
    clipped_ratio_histogram,
    ratio_percentiles,
)
from ..losses.ppo import ppo_clipped_objective
from ..rewards.guard import guard_reward_funcs
from .checkpoint_state import CheckpointState, CheckpointStateMixin
from .curation_mixin import CurationMixin
from .dynamic_sampling import DynamicSamplingMixin
from .grpo_config import RLVRGRPOConfig
from .hooked_forward import hooked_forward
from .inputs import check_grpo_inputs, resolve_reward_names
from .poise_baseline import PoiseBaselineMixin
from .popo import PopoMixin
from .rsi_selection import RSISelectionMixin
from .signal_check import TrainingSignalCheckMixin
from .vllm_cpu import install_cpu_weight_sync, vllm_build_patches
from .vllm_state import install_server_guard


# The copies of TRL's methods that match the installed TRL (a clear ImportError on an unsupported version)
_TRL_COPY = load_copy("grpo")


class RLVRGRPOTrainer(
    TrainingSignalCheckMixin,
    DynamicSamplingMixin,
    CurationMixin,
    CheckpointStateMixin,
    RSISelectionMixin,
    PopoMixin,
    PoiseBaselineMixin,
    GRPOTrainer,
):
    """[`~trl.GRPOTrainer`] with this package's methods, configured by [`RLVRGRPOConfig`].

    - Stochastic clip recovery (`clip_recovery="nsr"` / `"nsr_expected"`, https://huggingface.co/papers/2605.22703):
      tokens cut off by PPO's clip are rescued at random (or given their expected weight), see
      `trl_rlvr_ext.losses.clip_recovery_objective`. Logged as `clip_recovery/low_frac` and
      `clip_recovery/high_frac` (rescued tokens over all completion tokens), beside TRL's `clip_ratio/*`.
    - ACPO's variance-adaptive clip (`adaptive_clip="acpo"`, https://arxiv.org/abs/2606.22570): per-token clip
      widths from the std of the ratios in probability bins, see `trl_rlvr_ext.losses.acpo_clip_bounds`; logged as
      `adaptive_clip/*`. Composes with clip recovery (NSR then rescues tokens past the adaptive bound).
    - Off-policy diagnostics (`off_policy_diagnostics=True`): ratio percentiles and clipped shares over the tokens
      with a non-zero advantage, overall and per probability bin, and each micro-step's position in its rollout;
      logged as `off_policy/*`, with the loss unchanged.
    - DelTA's token credit (`token_credit="delta"`, https://arxiv.org/abs/2605.21467): each token's advantage is
      multiplied by a weight from how well its gradient proxy (1 − p)·h separates the batch's positive tokens from
      its negative ones, see `trl_rlvr_ext.losses.delta_token_weights`; logged as `token_credit/*`. Composes with
      NSR and ACPO (the weighted advantages enter their clipped objective).
    - RSI-S token selection (`rsi_selection="interval"` / `"quantile"`, https://arxiv.org/abs/2606.31575): tokens whose
      relative surprisal index −log p / H lies outside an interval get no policy gradient, at the place of TRL's
      `top_entropy_quantile` (`RSISelectionMixin`, `trl_rlvr_ext.losses.rsi`); logged as `rsi/*`. Composes with NSR,
      ACPO and DelTA.
    - POPO (`objective="popo"`, https://arxiv.org/abs/2605.06650): TRL's loss replaced by a positive-only weighted NLL,
      a cosine to an EMA copy through a predictor, and an entropy bonus (`PopoMixin`, `trl_rlvr_ext.losses.popo`);
      logged as `popo/*`. Refuses the options that act on TRL's loss.
    - POISE's value baseline (`value_baseline="poise"`, https://arxiv.org/abs/2605.07579): each rollout's advantage
      is its reward minus its sibling's value, predicted by a ridge probe on the policy's hidden states at one layer,
      fitted online (RLOO while it bootstraps), see `PoiseBaselineMixin` and `trl_rlvr_ext.losses.poise`; logged as
      `poise/*`. DelTA, NSR, ACPO and RSI-S act on POISE's advantages.
    - Online curation (`curation="self"`, https://huggingface.co/papers/2510.02230, or `"pass_rate"`): train only on
      prompts the policy does not yet solve greedily, or sample prompts by a running pass-rate estimate
      (`CurationMixin`); logged as `curation/*`.
    - LoRA initialisers (`lora_init`, with a `peft_config`): RLPO, RLMO, PiSSA, MiLoRA, with TRL's reference kept
      equal to the original model.
    - A training-signal check (`signal_check`, on by default; it only observes): a warning with the likely cause when
      the first steps carry no learning signal, or an option cannot act (`TrainingSignalCheckMixin`).

    The constructor is `GRPOTrainer`'s; `args` is an [`RLVRGRPOConfig`] (a plain `trl.GRPOConfig` runs as stock TRL,
    with this package's options off).

    The method resolution order is this class, `TrainingSignalCheckMixin`, `DynamicSamplingMixin`, `CurationMixin`,
    `CheckpointStateMixin`, `RSISelectionMixin`, `PopoMixin`, `PoiseBaselineMixin`, `GRPOTrainer`. Where several
    classes override one TRL hook, each calls ``super()`` and so wraps the ones after it:
    `_generate_and_score_completions` runs this class's, then dynamic sampling's (one ``super()`` call per round), then
    curation's, then POPO's (its weights, from the finished batch), then POISE's (its advantages replace TRL's in the
    finished batch), then TRL's; `_calculate_rewards` runs the signal check's, then dynamic sampling's, then curation's,
    then POPO's and POISE's (each keeps the gathered rewards), then TRL's, so the check and curation see every generated
    group, dropped ones included. `_get_train_sampler`, `_prepare_inputs` and `compute_loss` are curation's only,
    `_save_checkpoint` / `_load_optimizer_and_scheduler` the checkpoint state's only, `create_optimizer` POPO's only
    (the predictor's parameter group), `_compute_loss` this class's only (it hands POPO's batches to POPO's loss).
    """

    _tag_names: ClassVar[list[str]] = ["trl", "grpo", "trl-rlvr-ext"]

    def __init__(self, model, reward_funcs=None, args: RLVRGRPOConfig | None = None, **kwargs):
        # A plain trl.GRPOConfig runs as stock TRL (converted, said in the log); the default output folder is
        # TRL's own ("<model>-GRPO"), so that changing only the import changes nothing else.
        args = resolve_trainer_config(
            args,
            RLVRGRPOConfig,
            GRPOConfig,
            type(self).__name__,
            model,
            "GRPO",
            "all off: the run is stock TRL; pass an RLVRGRPOConfig to turn one on",
        )
        # This package's model names ("smollm2-135m-instruct", "toy:base") are local folders, never a hub look-up
        model = resolve_model_argument(model)
        # Before any model loads: reward names resolved (never a hub look-up), the columns they read checked
        reward_funcs = resolve_reward_names(reward_funcs)
        check_grpo_inputs(
            args,
            reward_funcs,
            kwargs.get("train_dataset"),
            kwargs.get("eval_dataset"),
            environment_factory=kwargs.get("environment_factory"),
        )
        check_fsdp_really_runs(args, type(self).__name__)
        if args.lora_init is not None:  # build + initialise the PeftModel here, so TRL's reference is the original
            from ..lora_init.integration import apply_lora_init_to_trainer_arguments

            model, kwargs = apply_lora_init_to_trainer_arguments(model, args, kwargs)
        # Reward guard: bounded verifier time, and errors that name the reward, row and completion. A well-behaved
        # reward's output passes through untouched, under its own name (trl_rlvr_ext.rewards.guard).
        reward_funcs = guard_reward_funcs(
            reward_funcs, on_error=args.reward_on_error, timeout=args.reward_timeout, on_nan=args.reward_on_nan
        )
        with vllm_build_patches(args):  # vllm_engine_kwargs; server mode on CPU: no NCCL group (grpo/vllm_cpu.py)
            super().__init__(model, reward_funcs, args=args, **kwargs)
        # vLLM on CPU: weights reach the engine through vLLM's reload path; elsewhere TRL's own sync stays
        self._vllm_cpu_sync = install_cpu_weight_sync(self)
        # server mode on CPU: the server's sampling state in checkpoints; a checkpoint, then a clear error, if it dies
        self._vllm_server_guard = install_server_guard(self, self._vllm_cpu_sync)
        self._init_signal_check()  # warns about options that cannot act here; watches the first steps' rewards
        self._poise_setup()  # POISE: the layer to read, the probe's state and its checkpoint file (when on)
        if self.args.relex_record_steps > 0:  # RELEX: records θ_s − θ_0; training itself is unchanged
            from ..extrapolation.callback import RELEXTrajectoryCallback

            args = self.args
            self.add_callback(
                RELEXTrajectoryCallback(
                    args.relex_trajectory_dir, args.relex_record_steps, args.relex_record_dtype, trainer=self
                )
            )
        self._recovery_generator = None
        if self.args.clip_recovery != "none":
            # Each process saves its own generator, so a resumed run draws the same rescue noise as an uninterrupted
            # one; saved beside transformers' per-process RNG states.
            self._register_checkpoint_state(
                CheckpointState(
                    "clip_recovery_rng_state_{rank}.pth",
                    lambda: None if self._recovery_generator is None else self._recovery_generator.get_state(),
                    self._load_recovery_state,
                    per_rank=True,
                )
            )
        if self.args.objective == "popo":  # the EMA copy, the predictor and their checkpoint state (grpo/popo.py)
            self._popo_setup()

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

    def _load_recovery_state(self, state: torch.Tensor, path: str) -> None:
        # Applied when the generator is (re)created on the ratios' device at the first loss computation.
        self._pending_recovery_state = state
        self._recovery_generator = None

    # ---------------------------------------------------------------- PPO's clipped objective: NSR and ACPO
    def _acpo_clamp_log_ratio(self, log_ratio: torch.Tensor) -> torch.Tensor:
        """With ACPO, the log-ratio clamped to [−20, 20] before TRL exponentiates it, where the authors'
        `compute_policy_loss` clamps it: the one ratio the bins, the clipped surrogate and TRL's metrics read. One
        overflowing ratio (inf) would otherwise make every bin's width NaN, on every process under the global scope.
        The tokens it clamped are kept for `adaptive_clip/overflow_frac`. Without ACPO, TRL's log-ratio untouched
        (TRL does not clamp)."""
        if self.args.adaptive_clip != "acpo":
            return log_ratio
        log_ratio, self._acpo_overflow = acpo_clamp_log_ratio(log_ratio)
        return log_ratio

    def _clip_objective_loss(self, ratio, advantages, per_token_logps, mask, inputs):
        """The per-token loss of PPO's clipped objective with our options, and what its metrics need.

        The marked blocks in the copy of TRL's `_compute_loss` compute it from TRL's ratio before TRL's own
        `-min(r·A, clip(r)·A)` and put it in its place (computed there, so that autograd sums the gradients in the
        same order as TRL). The clip widths are TRL's `epsilon_low` / `epsilon_high`, or ACPO's per-token widths
        (`adaptive_clip="acpo"`); the clipped tokens stay clipped (PPO) or are rescued (`clip_recovery`).
        """
        if self.args.token_credit != "none":
            # DelTA: each token's advantage times its weight, computed once per generation batch (see
            # `_token_credit_weights`); every objective below (PPO, NSR, ACPO) sees the weighted advantages.
            advantages = advantages * inputs["token_credit_weights"]
        epsilon_low, epsilon_high, acpo = self.epsilon_low, self.epsilon_high, None
        if self.args.adaptive_clip == "acpo":
            acpo = self._acpo_bins(per_token_logps, ratio, mask)
            epsilon_low = epsilon_high = acpo.bound
            # the tokens `_acpo_clamp_log_ratio` clamped in this loss computation (it runs just before, in the copy)
            acpo = {"bins": acpo, "overflow": self.__dict__.pop("_acpo_overflow")}
        if self.args.clip_recovery == "none":
            surrogate, clipped_low, clipped_high = ppo_clipped_objective(
                ratio, advantages, epsilon_low, epsilon_high, delta=self.args.delta
            )
            masks = {"clipped_low": clipped_low, "clipped_high": clipped_high}
        else:
            surrogate, masks = clip_recovery_objective(
                ratio,
                advantages,
                epsilon_low,
                epsilon_high,
                mode=self.args.clip_recovery,
                generator=self._clip_recovery_generator(ratio.device),
                delta=self.args.delta,
            )
        diagnostics = None
        if self.args.off_policy_diagnostics:
            probs = torch.exp(per_token_logps.detach())
            diagnostics = {
                "ratio": ratio.detach(),
                "advantages": advantages,
                "probs": probs,
                "mask": mask,
                "bounds": {"low": 1 - epsilon_low, "high": 1 + epsilon_high},  # ACPO's: per token
            }
        return -surrogate, {"masks": masks, "acpo": acpo, "diagnostics": diagnostics}

    def _acpo_bins(self, per_token_logps: torch.Tensor, ratio: torch.Tensor, mask: torch.Tensor):
        """ACPO's bins over the current probabilities π_θ = exp(per-token log-probs, at TRL's temperature), the
        authors' `current_probs`. With `adaptive_clip_scope="global"` the per-bin moments are summed over processes,
        so every process clips with the same bounds (one all-reduce of 3 × num_bins float64 per loss computation)."""
        args = self.args
        reduce = None
        if args.adaptive_clip_scope == "global":
            reduce = lambda moments: self.accelerator.reduce(moments, reduction="sum")  # noqa: E731
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

    def _log_clip_objective(self, mode: str, clip_state: dict, mask: torch.Tensor, global_masked_mean) -> None:
        # Token fractions over all completion tokens, reduced over ranks by TRL's own `global_masked_mean`, as its
        # `clip_ratio/*` metrics are (a rescued or clipped sequence counts all of its tokens).
        masks, acpo = clip_state["masks"], clip_state["acpo"]
        if self.args.clip_recovery != "none":
            for side in ("low", "high"):
                rescued = masks[f"rescued_{side}"].float().expand_as(mask)
                self._metrics[mode][f"clip_recovery/{side}_frac"].append(global_masked_mean(rescued))
        if acpo is not None:
            self._log_acpo(mode, acpo["bins"], masks, global_masked_mean)
            # share of the completion tokens whose |log-ratio| passed 20 and was clamped, over every process
            overflow = acpo["overflow"].float()
            self._metrics[mode]["adaptive_clip/overflow_frac"].append(global_masked_mean(overflow))
        if clip_state["diagnostics"] is not None:
            self._log_off_policy(mode, clip_state["diagnostics"], masks)

    def _log_acpo(self, mode: str, acpo, masks: dict, global_masked_mean) -> None:
        # TRL's `clip_ratio/*` keep measuring against the fixed epsilon / epsilon_high; these use ACPO's bounds.
        for side in ("low", "high"):
            clipped = masks[f"clipped_{side}"].float()
            self._metrics[mode][f"adaptive_clip/clip_ratio_{side}"].append(global_masked_mean(clipped))
        count = acpo.count
        present = (count > 0).to(torch.float64)
        # per bin: [number of processes where it is non-empty, Σ bound, Σ std, tokens]
        per_bin = torch.stack(
            [present, acpo.bin_bound.nan_to_num() * present, acpo.ratio_std.nan_to_num() * present, count]
        )
        if self.args.adaptive_clip_scope == "micro_batch":  # each process has its own bounds: log their mean
            per_bin = self.accelerator.reduce(per_bin, reduction="sum")
        processes, bound_sum, std_sum, tokens = per_bin.tolist()
        total = max(sum(tokens), 1.0)
        for k in range(len(tokens)):
            self._metrics[mode][f"adaptive_clip/token_frac_bin{k}"].append(tokens[k] / total)
            if processes[k] > 0:  # an empty bin has no bound: not logged rather than logged as NaN
                self._metrics[mode][f"adaptive_clip/bound_bin{k}"].append(bound_sum[k] / processes[k])
                self._metrics[mode][f"adaptive_clip/ratio_std_bin{k}"].append(std_sum[k] / processes[k])

    def _log_off_policy(self, mode: str, diagnostics: dict, masks: dict) -> None:
        """`off_policy/*`: the ratios' percentiles and the clipped shares over the tokens with a non-zero advantage,
        overall and per probability bin, over every process; and the micro-step's position in its rollout."""
        args, num_bins = self.args, self.args.adaptive_clip_num_bins
        ratio, mask = diagnostics["ratio"], diagnostics["mask"]
        select = mask.bool() & (diagnostics["advantages"] != 0)
        bin_index = acpo_bin_index(diagnostics["probs"], select, num_bins)
        counts = self.accelerator.reduce(
            clipped_counts(masks["clipped_low"], masks["clipped_high"], bin_index, num_bins), reduction="sum"
        )
        # every process's selected ratios with their bins, NaN-padded to one length, so the percentiles are global
        local = torch.stack([ratio[select].float(), bin_index[select].float()], dim=1)
        pooled = self.accelerator.gather(self.accelerator.pad_across_processes(local, pad_index=float("nan")))
        values, bins = pooled[:, 0], pooled[:, 1]
        percentiles = torch.stack(
            [ratio_percentiles(values), *(ratio_percentiles(values[bins == k]) for k in range(num_bins))]
        )
        tokens, low, high = counts.tolist()
        for row, suffix in zip(percentiles.tolist(), ["", *(f"_bin{k}" for k in range(num_bins))], strict=True):
            for p, value in zip(RATIO_PERCENTILES, row, strict=True):
                if not math.isnan(value):  # NaN: the (bin's) selection is empty
                    self._metrics[mode][f"off_policy/ratio_p{p}{suffix}"].append(value)
        for k, suffix in [(num_bins, ""), *((k, f"_bin{k}") for k in range(num_bins))]:
            if tokens[k] > 0:
                self._metrics[mode][f"off_policy/clipped_low_frac{suffix}"].append(low[k] / tokens[k])
                self._metrics[mode][f"off_policy/clipped_high_frac{suffix}"].append(high[k] / tokens[k])
        # how far past its bound each clipped token is: counts per bin of r / bound, summed over processes (a
        # micro-step's counts; their mean over a logging window, times its steps, is the window's count)
        for side, edges in (("low", CLIPPED_LOW_EDGES), ("high", CLIPPED_HIGH_EDGES)):
            clipped = masks[f"clipped_{side}"] & select
            histogram = clipped_ratio_histogram(ratio, clipped, diagnostics["bounds"][side], edges)
            for k, count in enumerate(self.accelerator.reduce(histogram, reduction="sum").tolist()):
                self._metrics[mode][f"off_policy/clipped_{side}_hist{k}"].append(count)
        if mode == "train":  # TRL's `_step` (micro-steps so far) is incremented after the loss of this one
            cycle = args.steps_per_generation * self.num_iterations
            self._metrics[mode]["off_policy/update_index"].append(float(self._step % cycle))

    # ---------------------------------------------------------------- Token credit assignment (DelTA)
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.args.token_credit != "none":
            # Here, after every round of dynamic sampling and curation, on the whole generation batch of this process:
            # the authors compute the weights once per rollout batch on each data-parallel rank, with the policy that
            # sampled it, before the updates (verl's `compute_log_prob_h`).
            output["token_credit_weights"] = self._token_credit_weights(output)
        return output

    def _token_credit_backbone(self) -> torch.nn.Module:
        """The module whose output is the hidden state entering the LM head: the transformers model's `base_model`
        (its backbone), which TRL's fused LM head also reads (`add_fused_lm_head`); under PEFT, that of the wrapped
        model."""
        from peft import PeftModel

        model = self.accelerator.unwrap_model(self.model)
        if isinstance(model, PeftModel):
            model = model.get_base_model()
        backbone = model.base_model
        if backbone is model:
            raise ValueError(
                f"token_credit={self.args.token_credit!r} reads the hidden state entering the LM head from the "
                f"model's backbone, but {type(model).__name__} has none (its `base_model` is itself). Use a "
                "transformers causal LM (a backbone plus an LM head), or token_credit='none'."
            )
        return backbone

    def _token_credit_weights(self, output: dict) -> torch.Tensor:
        """DelTA's weights for the generation batch `output` of this process: one extra forward pass without
        gradient, in chunks of the per-device batch size, with a forward hook on the backbone capturing the hidden
        states at the positions that predict the completion tokens; the log-probabilities come from the same pass
        (TRL's own, at its temperature)."""
        args = self.args
        mode = "train" if self.model.training else "eval"
        completion_ids, completion_mask = output["completion_ids"], output["completion_mask"]
        logits_to_keep = completion_ids.size(1)
        mask = completion_mask if "tool_mask" not in output else completion_mask * output["tool_mask"]
        captured = []

        def capture(module, module_args, module_output):
            # hidden state h_t at position t predicts token t + 1: the completion's are the last ones but one
            # (a copy, so that the prompt positions of the chunk's hidden states are freed)
            captured.append(module_output[0][:, -logits_to_keep - 1 : -1].detach().clone())

        # Without dropout (LoRA's included), as the authors' pass runs (`actor_module.eval()`): the weights are a
        # deterministic function of the batch, and this pass draws nothing from the global RNG.
        logps, _ = hooked_forward(self, self._token_credit_backbone(), capture, output)
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
        self._log_token_credit(mode, delta_weight_stats(result, mask, output["advantages"]))
        return result.weights

    def _log_token_credit(self, mode: str, stats: torch.Tensor) -> None:
        # Per process, then over processes: the mean of the means, std and fractions; the min of the minima, the max
        # of the maxima. NaN (a process without tokens or without signed tokens) is left out.
        stats = self.accelerator.gather(stats[None]).float()
        names = ["weight_mean", "weight_min", "weight_max", "weight_std", "frac_at_low", "frac_at_high"]
        for k, name in enumerate(names):
            column = stats[:, k][~torch.isnan(stats[:, k])]
            if column.numel() == 0:
                continue
            value = column.min() if name == "weight_min" else column.max() if name == "weight_max" else column.mean()
            self._metrics[mode][f"token_credit/{name}"].append(value.item())

    def _compute_loss(self, model, inputs):
        if self.args.objective == "popo":  # POPO replaces TRL's loss (grpo/popo.py)
            return self._popo_compute_loss(model, inputs)
        if (
            self.args.clip_recovery == "none"
            and self.args.adaptive_clip == "none"
            and self.args.token_credit == "none"
            and self.args.rsi_selection == "none"
            and not self.args.off_policy_diagnostics
        ):
            return super()._compute_loss(model, inputs)
        # TRL's `_compute_loss` for the installed TRL, with NSR / ACPO / DelTA / RSI-S / diagnostics in its marked blocks
        # (trl_rlvr_ext/_trl/)
        return _TRL_COPY._compute_loss(self, model, inputs)
