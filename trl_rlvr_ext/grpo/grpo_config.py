"""Configuration for `RLVRGRPOTrainer`: TRL's `GRPOConfig` plus the fields of this package's methods.

Every new field defaults to stock TRL behaviour. Fields are grouped by feature (one section each) so that the
validation of one feature lives next to its fields.
"""

import json
import os
from dataclasses import dataclass, field

from trl import GRPOConfig

from .._compat import check_training_values
from ..curation.samplers import CURATION_MODES as CURATION_SAMPLER_MODES
from ..curation.samplers import PASS_RATE_TARGETS
from ..extrapolation.trajectory import RECORD_DTYPES as RELEX_RECORD_DTYPES
from ..lora_init.config import LoraInitArguments
from ..lora_init.options import rewrites_base
from ..losses.acpo import ACPO_PAPER_SETTINGS
from ..losses.clip_recovery import CLIP_RECOVERY_FUNCTION_MODES
from ..losses.delta import DELTA_PAPER_SETTINGS
from ..losses.poise import POISE_PAPER_SETTINGS, POISE_TARGET_MODES
from ..losses.popo import POPO_PAPER_SETTINGS, POPO_WEIGHT_MODES
from ..rewards.guard import REWARD_ON_ERROR_MODES, REWARD_ON_NAN_MODES


# Loss types whose surrogate is PPO's hard clip min(r·A, clip(r)·A): the only ones with a clip to recover from.
CLIPPED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
# The config's choices are "none" (stock TRL) plus the modes the lower layers implement: one definition each.
CLIP_RECOVERY_MODES = ("none", *CLIP_RECOVERY_FUNCTION_MODES)
CURATION_MODES = ("none", *CURATION_SAMPLER_MODES)
ADAPTIVE_CLIP_MODES = ("none", "acpo")
ADAPTIVE_CLIP_SCOPES = ("global", "micro_batch")
# Why the loss types without PPO's hard clip cannot take an adaptive clip width.
ADAPTIVE_CLIP_REFUSED_LOSS_TYPES = {
    "cispo": "CISPO has no trust region to adapt: it truncates a detached importance weight from above at "
    "epsilon_high (a one-sided weight cap, not PPO's two-sided clip)",
    "sapo": "SAPO replaces the clip by a soft sigmoid gate (sapo_temperature_*): there is no clip width",
    "vespo": "VESPO weighs sequences with gamma weights: there is no per-token clip width",
}
TOKEN_CREDIT_MODES = ("none", "delta")
OBJECTIVES = ("grpo", "popo")
RSI_SELECTION_MODES = ("none", "interval", "quantile")
VALUE_BASELINES = ("none", "poise")
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
# Loss types that average each sequence's loss (or sum) over a row count, per micro-batch. With curation="self" the
# trainer rescales them so that every kept sequence of an optimizer window weighs 1/K (K: kept sequences in the window,
# all processes), which needs each window inside one generation batch.
SELF_SEQUENCE_AVERAGED_LOSS_TYPES = ("grpo", "sapo", "dr_grpo", "luspo")
# Token-normalised losses whose normaliser is TRL's `num_items_in_batch`, which SELF sets to the kept tokens.
SELF_TOKEN_NORMALISED_LOSS_TYPES = ("dapo", "cispo", "vespo")


def off_policy_diagnostics_apply(args) -> bool:
    """Whether `off_policy_diagnostics` can measure this config's clip: PPO's hard clip, at token level."""
    return args.loss_type in CLIPPED_LOSS_TYPES and args.importance_sampling_level == "token"


@dataclass
class RLVRGRPOConfig(LoraInitArguments, GRPOConfig):
    r"""
    Configuration class for [`RLVRGRPOTrainer`]: every field of TRL's `GRPOConfig`, plus the fields below. With the
    new fields at their defaults the trainer is stock TRL `GRPOTrainer`, to the bit.

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

        curation (`str`, *optional*, defaults to `"none"`):
            Which prompts GRPO trains on. `"none"`: stock TRL sampling. `"self"`: every generation step decodes each
            prompt of the batch greedily with the current policy; only prompts whose greedy answer is wrong enter the
            loss (GRPO's loss on those prompts alone); an optimizer step with none left in its window makes no update
            (parameters and optimizer state unchanged; `global_step` and the LR schedule still advance). By default
            every batch is drawn uniformly and shrinks to its kept prompts (the paper's rule);
            `curation_self_recheck_steps` > 0 makes the sampler skip prompts known to be solved and refill the batch.
            Works with `loss_type` dapo, cispo, vespo (kept-token normaliser) and grpo, sapo, dr_grpo, luspo (each
            kept sequence of an optimizer window weighs 1/K; needs `steps_per_generation` to be a multiple of
            `gradient_accumulation_steps`); `bnpo` is refused. `"pass_rate"`: prompts are
            drawn with weights from a running per-prompt pass-rate estimate (`curation_pass_rate_target`).
        curation_id_column (`str`, *optional*):
            Dataset column with a unique id per prompt (e.g. `"idx"`). Defaults to the row index, added by the trainer.
        curation_reward_func (`str`, *optional*):
            Name of the reward function whose output is correctness (a function's `__name__`). Required when there are
            several reward functions; shaped totals are never used for curation.
        curation_correct_threshold (`float`, *optional*, defaults to `1.0`):
            A completion is correct when `curation_reward_func` returns at least this (the paper's "reward = 1").
        curation_self_recheck_steps (`int`, *optional*, defaults to `0`):
            `"self"`: 0 (default) is the paper's rule: every drawn batch is checked and shrinks to the prompts the
            policy gets wrong; nothing is remembered. N > 0 is this package's extension: a prompt found solved is not
            drawn again for N optimizer steps, and the batch is refilled with other prompts; then it is re-checked (a
            solved problem can be forgotten).
        curation_self_prepass (`bool`, *optional*, defaults to `False`):
            `"self"`: decode the whole training set greedily before the first step, so the first batches already skip
            solved prompts.
        curation_self_greedy_max_tokens (`int`, *optional*):
            `"self"`: generation budget of the greedy pass. Defaults to `max_completion_length`.
        curation_self_fused_greedy (`bool`, *optional*, defaults to `True`):
            `"self"`: decode the greedy answers in the same `generate` call as the samples (one extra row per prompt,
            forced to its argmax), instead of a separate greedy call. Applies to transformers generation with the
            default greedy budget; vLLM uses a separate greedy call.
        curation_self_allow_zero_grad_steps (`bool`, *optional*, defaults to `False`):
            `"self"` under DeepSpeed: accept that an optimizer step whose window kept no prompt runs with zero
            gradients (DeepSpeed steps inside backward, so the step cannot be skipped; momentum and weight decay
            still move the parameters). Without it, `"self"` under DeepSpeed is refused at trainer init. Elsewhere
            (DDP, FSDP2, one process) such a step is skipped and this has no effect.
        curation_pass_rate_target (`str`, *optional*, defaults to `"mid"`):
            `"pass_rate"`: `"mid"` weights prompts by 4p(1-p) (groups with 0 < p < 1 carry GRPO signal), `"low"` by
            1-p (the hardest first).
        curation_pass_rate_floor (`float`, *optional*, defaults to `0.05`):
            `"pass_rate"`: minimum weight of any prompt, so none starves.
        curation_pass_rate_prior_alpha (`float`, *optional*, defaults to `1.0`):
            Beta prior successes of the pass-rate estimate.
        curation_pass_rate_prior_beta (`float`, *optional*, defaults to `1.0`):
            Beta prior failures of the pass-rate estimate.
        curation_pass_rate_decay (`float`, *optional*, defaults to `0.5`):
            Forgetting factor of a prompt's counts at each of its updates (1.0: never forget).
        curation_seed (`int`, *optional*):
            Seed of the curation sampler's own generator. Defaults to `seed`.

        lora_init (`str`, *optional*):
            Initialise the LoRA adapter of `peft_config` (required) with `"rlpo"` (A₀ = top-r right singular vectors
            of W, B₀ = 0), `"rlmo"` (bottom-r), `"pissa"` or `"milora"` (√σ-scaled top/bottom triplets, base
            rewritten to W − γ·B₀A₀), or a PEFT `init_lora_weights` value (`"olora"`, `"gaussian"`, ...). The
            trainer builds the PeftModel itself so that the reference is the original model for every init. Paper
            setting: `"rlpo"` with r = 16, α = 32, learning rate 1e-5.
        lora_init_kwargs (`dict`, *optional*):
            Options of the init: `solver`, `oversampling`, `niter`, `seed` (defaults to `seed`), `requantize`,
            `show_progress`, `initial_adapter_dir`, `save_initial_adapter`, `export_converted_adapter`. See `trl_rlvr_ext.lora_init`.

        reward_timeout (`float` or `None`, *optional*, defaults to `10.0`):
            Seconds a verifier may spend on one completion before the completion is scored 0.0 (counted in the
            `rewards/timeouts` metric). Passed to every reward function that accepts a `reward_timeout` keyword, such
            as `trl_rlvr_ext.rewards.math.math_accuracy_reward`, which then verifies in worker processes that are
            killed on time, on any thread. `None`: verify in-process, unbounded off the main thread.
        reward_on_error (`str`, *optional*, defaults to `"raise"`):
            What a reward function's failure on one completion does. `"raise"`: fail the step with an error naming
            the reward function, the row and the completion. `"zero"`: score the rows that raise (or return
            infinity or a non-number) 0.0, go on, and count them in the `rewards/errors` metric. See
            `trl_rlvr_ext.rewards.guard`.
        reward_on_nan (`str`, *optional*, defaults to `"ignore"`):
            What a NaN reward means. `"ignore"`: TRL's meaning, to the bit: that reward function gives the row no
            reward (TRL sums over reward functions with `nansum`); the first NaN of each function is logged as a
            warning. `"error"`: a NaN is a bad value like infinity, handled by `reward_on_error`.
        dynamic_sampling (`bool`, *optional*, defaults to `False`):
            DAPO's dynamic sampling (https://huggingface.co/papers/2503.14476, Sec. 3.2): groups whose rewards have
            (near-)zero spread are dropped and more prompts are generated, in whole groups, until the generation
            batch holds `generation_batch_size / num_generations` informative groups. The loss is GRPO's on the kept
            groups for every `loss_type`. Needs `scale_rewards` `"group"` or `"none"` and whole groups on each process.
        dynamic_sampling_max_rounds (`int`, *optional*, defaults to `10`):
            Most generation rounds per generation batch (the first included; the DAPO recipe's `max_num_gen_batches`
            is 10). At the bound the step goes ahead: a process short of informative groups completes its share with
            zero-variance groups it generated (zero advantage), and `dynamic_sampling/bound_hit` is logged as 1.
        dynamic_sampling_reward_func (`str`, *optional*):
            Name of the reward function whose spread decides (e.g. the correctness reward, as in the paper's accuracy
            filter). Defaults to the weighted total reward, the one GRPO's advantages are computed from (use it for
            shaped or non-binary rewards).
        dynamic_sampling_min_std (`float`, *optional*, defaults to `0.0`):
            A group is kept when the standard deviation of its rewards is greater than this. 0 is the paper's rule
            (not all rewards equal; equal values count as exactly 0); raise it to also drop near-constant groups of a
            shaped reward.
        dynamic_sampling_seed (`int`, *optional*):
            Seed of the stream of extra prompts (with curation on, the curation sampler's draws for it). Defaults to
            `seed + 1`, so the extra prompts do not follow the training sampler's own order.

        signal_check (`bool`, *optional*, defaults to `True`):
            Warn (through the logger, once) when the first `signal_check_steps` optimizer steps carried no learning
            signal (every group's rewards equal: zero advantages, loss and gradient), with the likely cause: a reward
            that does not read the data's answer format (one completion is shown with its row), a model that cannot
            read the prompts, problems all solved or all unsolved; when curation kept no prompt; and, at start, for
            options that cannot act in this configuration (`clip_recovery` without rollout reuse). It only observes
            the rewards: no metric is added and training is unchanged. See `trl_rlvr_ext.grpo.signal_check`.
        signal_check_steps (`int`, *optional*, defaults to `4`):
            How many optimizer steps the signal check watches.
        token_credit (`str`, *optional*, defaults to `"none"`):
            Per-token credit assignment inside each sequence. `"none"`: stock TRL (every token of a sequence gets its
            advantage). `"delta"`: DelTA ("Discriminative Token Credit Assignment for RLVR",
            https://arxiv.org/abs/2605.21467, code https://github.com/RUCBM/DelTA): each token's gradient proxy
            v = (1 − p)·h (p the sampled token's probability, h the hidden state entering the LM head) is compared
            with the advantage-weighted centroids of the positive- and negative-advantage tokens; a sigmoid of the
            margin maps it to a weight in [`token_credit_w_lo`, `token_credit_w_hi`], the weights are renormalised to
            mean 1 and multiply the advantage (`trl_rlvr_ext.losses.delta_token_weights`). As in the authors' code,
            the weights are computed once per generation batch on each process, without gradient, from one extra
            forward pass of the policy that sampled the batch. Only for loss types with PPO's clipped objective
            (grpo, bnpo, dr_grpo, dapo, luspo). Composes with `clip_recovery` and `adaptive_clip`.
        token_credit_w_lo (`float`, *optional*, defaults to `0.8`):
            DelTA: the weight of the least discriminative tokens, before renormalisation (released script: 0.8).
        token_credit_w_hi (`float`, *optional*, defaults to `1.2`):
            DelTA: the weight of the most discriminative tokens, before renormalisation (released script: 1.2).
        token_credit_refine_steps (`int`, *optional*, defaults to `1`):
            DelTA: refinements of the centroids by the tokens' sigmoid posteriors (the authors' K; released
            script: 1; 0 keeps the advantage-weighted centroids).
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
        vllm_engine_kwargs (`dict`, *optional*):
            Extra keyword arguments for the `vllm.LLM` engine TRL builds in `vllm_mode="colocate"` (TRL exposes no
            `dtype` or `enforce_eager` there), e.g. `{"enforce_eager": True, "dtype": "float32"}`: on a CPU machine
            `enforce_eager` cuts the engine build from ~30 s to ~3 s, and `dtype="float32"` keeps a float32 model in
            float32 (vLLM picks bfloat16 otherwise). See docs/vllm_cpu.md. A server takes its own on its command line.

        relex_record_steps (`int`, *optional*, defaults to `0`):
            Record the run's checkpoint trajectory for RELEX ("REinforcement Learning EXtrapolation",
            https://arxiv.org/abs/2605.21468, code https://github.com/weizhepei/RELEX) every this many optimizer steps:
            θ_0 at the start, then θ_s − θ_0 (`trl_rlvr_ext.extrapolation.RELEXTrajectoryCallback`; under PEFT, the
            adapter's tensors). `trl-rlvr-ext relex` then fits the rank-r subspace of each tensor's trajectory and
            writes extrapolated checkpoints. 0: off (stock TRL). The authors record every step (1). Training is
            unchanged; logged as `relex/recorded_steps` and `relex/record_seconds`.
        relex_trajectory_dir (`str`, *optional*):
            The trajectory folder. Defaults to `<output_dir>/relex_trajectory`.
        relex_record_dtype (`str`, *optional*, defaults to `"float16"`):
            dtype of the stored deltas: `"float16"` (the authors'), `"bfloat16"` or `"float32"`.

        objective (`str`, *optional*, defaults to `"grpo"`):
            `"grpo"`: TRL's loss (`loss_type`), stock. `"popo"`: POPO ("Positive-Only Policy Optimization",
            https://arxiv.org/abs/2605.06650, code https://github.com/momo1443/colm2026-POPO) replaces the whole loss
            (`trl_rlvr_ext.losses.popo`, `trl_rlvr_ext.grpo.popo`): L = L_NLL + α·L_sim + β_ent·L_ent, a weighted NLL
            of the positive rollouts (reward > `popo_reward_threshold`; weights: per group, a softmax of the mean token
            log-prob over the positives, computed once per generation batch without gradient), the cosine between a
            predictor MLP on the pooled last hidden states and an EMA copy of the policy's (ξ ← τ·ξ + (1 − τ)·θ every
            optimizer step), and an entropy bonus over every completion token. TRL's advantages, ratio, clip and KL are
            not used (`loss_type`, `epsilon*`, vLLM's importance-sampling correction are not read). The reward is the
            unweighted mean of the reward functions (the authors'). Frozen parameters (LoRA's base) are shared with
            the EMA copy, the trainable ones copied. Logged as `popo/*`.
        popo_alpha (`float`, *optional*, defaults to `0.1`):
            POPO: α, the weight of the similarity term L_sim (paper and 7B run: 0.1; README range [0.05, 0.3]).
        popo_beta_entropy (`float`, *optional*, defaults to `0.01`):
            POPO: β_ent, the weight of the entropy term (paper: 0.01; range [0.005, 0.05]). Replaces TRL's
            `entropy_coef`, which must stay 0.
        popo_tau (`float`, *optional*, defaults to `0.995`):
            POPO: τ, the EMA momentum of the target (authors' default 0.995; the reported 7B run 0.999).
        popo_reward_threshold (`float`, *optional*, defaults to `0.0`):
            POPO: τ_r; a rollout is positive when its mean reward is > τ_r (authors: 0.0).
        popo_predictor_hidden_dim (`int`, *optional*, defaults to `1024`):
            POPO: the predictor MLP's width (authors' default 1024; the reported 7B run 4096).
        popo_predictor_layers (`int`, *optional*, defaults to `2`):
            POPO: the predictor's linear layers (at least 2; authors: 2).
        popo_feature_noise_std (`float`, *optional*, defaults to `0.02`):
            POPO: σ of the Gaussian noise added to the EMA target's features in training (default 0.02; 7B run 0.01).
        popo_weight_mode (`str`, *optional*, defaults to `"softmax"`):
            POPO: `"softmax"` (the paper's weights) or `"uniform"` (1/|S⁺| per group, the authors' ablation).
        popo_weight_temperature (`float`, *optional*, defaults to `1.0`):
            POPO: the softmax temperature of the weights (authors: 1.0, not a config field there).
        popo_length_normalize (`bool`, *optional*, defaults to `False`):
            POPO: divide the weights by the completion length and renormalise per group (authors' option, off).
        popo_kl_monitor_steps (`int`, *optional*, defaults to `10`):
            POPO: log the k3 estimate of KL(π_θ ‖ π_ξ) to the EMA target every this many optimizer steps (0: never).
        popo_neg_logp_delta (`bool`, *optional*, defaults to `False`):
            POPO: log `popo/neg_logp_delta`, the mean change of the previous generation batch's negative completions'
            mean token log-prob over the updates made on that batch (the "implicit negative gradient"; ours). One
            extra forward of those negatives per generation batch, without gradient.
        value_baseline (`str`, *optional*, defaults to `"none"`):
            The advantage's baseline. `"none"`: stock TRL (the group mean). `"poise"`: POISE ("Policy Optimization with
            Internal State Value Estimation", https://arxiv.org/abs/2605.07579, code https://github.com/holi-lab/POISE):
            A_i = r_i − b_i with b_i the mean of the *sibling* rollouts' predicted values v_j, v = a ridge probe on
            the policy's own hidden states at decoder layer `poise_layer` (prompt and response pooled over their
            last `poise_pool_n` tokens, reduced by PCA to `poise_prompt_pca` / `poise_response_pca` dimensions) plus
            three mean token entropies; no std normalisation. The probe learns the sibling's reward online from a
            buffer of `poise_buffer_rows` rows, refitted every generation batch after `poise_warmup_steps`; the first
            `poise_bootstrap_steps` batches use A_i = r_i − target_i (RLOO's r_i − r_j) while the buffer fills. One extra forward pass
            without gradient per generation batch; the features are gathered over processes, so the probe is the same
            on every one; its state is saved in checkpoints. Needs num_generations=2 (the authors' scratch bootstrap),
            scale_rewards="none". Logged as `poise/*` (`trl_rlvr_ext.losses.poise`).
        poise_layer (`int`, *optional*):
            POISE: the decoder layer (0-based) whose output is read. Defaults to round(19/36 × layers), the authors'
            Qwen3-4B choice (19 of 36; OLMo-3-7B: 7 of 32).
        poise_pool_n (`int`, *optional*, defaults to `10`):
            POISE: the prompt and response features are the mean of their last n valid tokens (the response cut after
            its last `</think>`). Authors: 10 (Qwen3-4B), 32 (OLMo-3-7B).
        poise_prompt_pca (`int`, *optional*, defaults to `32`):
            POISE: PCA dimensions of the prompt feature (0: the raw hidden state). Authors: 32 (Qwen3-4B), 16 (OLMo).
        poise_response_pca (`int`, *optional*, defaults to `64`):
            POISE: PCA dimensions of the response feature (0: the raw hidden state). Authors: 64 (Qwen3-4B), 128
            (OLMo).
        poise_alpha (`float`, *optional*, defaults to `100.0`):
            POISE: the ridge penalty on the standardised features. Authors: 100 (Qwen3-4B), 1000 (OLMo).
        poise_clip_min (`float`, *optional*, defaults to `0.0`):
            POISE: predictions are clipped to [poise_clip_min, poise_clip_max] (authors: [0, 1], for 0/1 rewards).
        poise_clip_max (`float`, *optional*, defaults to `1.0`):
            POISE: see `poise_clip_min`.
        poise_buffer_rows (`int`, *optional*, defaults to `4096`):
            POISE: the probe's training rows (one per rollout) kept, oldest prompt groups dropped first. Authors: 4096
            (math), 3072 (code, other).
        poise_warmup_steps (`int`, *optional*, defaults to `8`):
            POISE: the probe is refitted after a batch only once this many batches were observed (the bootstrap
            counts). Authors: 8.
        poise_bootstrap_steps (`int`, *optional*, defaults to `16`):
            POISE: generation batches trained with A_i = r_i − target_i (the authors' bootstrap: RLOO with the default
            target, r_i − (r_i + r_j)/2 with "pair_average") before the first fit of the probe. Authors: 16.
        poise_target_mode (`str`, *optional*, defaults to `"other_rollout_correctness"`):
            POISE: the probe's target for rollout i: the mean reward of its siblings (the authors') or
            `"pair_average"` (the group's mean reward).
    """

    # ---------------------------------------------------------------- Stochastic clip recovery (NSR)
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

    # ---------------------------------------------------------------- Token credit assignment (DelTA)
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

    # ---------------------------------------------------------------- RSI-S token selection
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

    # ---------------------------------------------------------------- Adaptive clip (ACPO)
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

    # ---------------------------------------------------------------- Curation
    curation: str = field(
        default="none",
        metadata={
            "help": "Online prompt curation: 'none' (stock TRL), 'self' (train only on prompts whose greedy answer is "
            "wrong, SELF https://huggingface.co/papers/2510.02230) or 'pass_rate' (sample prompts by a running "
            "pass-rate estimate).",
            "choices": list(CURATION_MODES),
        },
    )
    curation_id_column: str | None = field(
        default=None,
        metadata={"help": "Dataset column with a unique id per prompt (e.g. 'idx'). Defaults to the row index."},
    )
    curation_reward_func: str | None = field(
        default=None,
        metadata={"help": "Name of the reward function that grades correctness (required with several)."},
    )
    curation_correct_threshold: float = field(
        default=1.0, metadata={"help": "Reward of `curation_reward_func` that counts as correct (paper: 1)."}
    )
    curation_self_recheck_steps: int = field(
        default=0,
        metadata={
            "help": "'self': 0 (default) is the paper's rule: filter each uniformly drawn batch and let it shrink. "
            "N > 0 (an extension): leave a greedily solved prompt out of the draws for N steps, then re-check it."
        },
    )
    curation_self_prepass: bool = field(
        default=False, metadata={"help": "'self': decode the whole training set greedily before the first step."}
    )
    curation_self_greedy_max_tokens: int | None = field(
        default=None, metadata={"help": "'self': token budget of the greedy pass. Defaults to max_completion_length."}
    )
    curation_self_fused_greedy: bool = field(
        default=True,
        metadata={"help": "'self': decode the greedy answers in the sampling `generate` call (transformers only)."},
    )
    curation_self_allow_zero_grad_steps: bool = field(
        default=False,
        metadata={
            "help": "'self' under DeepSpeed: accept that a window with no kept prompt runs an optimizer step with zero "
            "gradients (momentum and weight decay still move the parameters) instead of being skipped. Without it "
            "DeepSpeed + 'self' is refused."
        },
    )
    curation_pass_rate_target: str = field(
        default="mid",
        metadata={
            "help": "'pass_rate': 'mid' weights prompts by 4p(1-p) (0 < p < 1 carries GRPO signal), 'low' by 1-p.",
            "choices": list(PASS_RATE_TARGETS),
        },
    )
    curation_pass_rate_floor: float = field(
        default=0.05, metadata={"help": "'pass_rate': minimum sampling weight of any prompt, so none starves."}
    )
    curation_pass_rate_prior_alpha: float = field(
        default=1.0, metadata={"help": "Beta prior successes of the per-prompt pass-rate estimate."}
    )
    curation_pass_rate_prior_beta: float = field(
        default=1.0, metadata={"help": "Beta prior failures of the per-prompt pass-rate estimate."}
    )
    curation_pass_rate_decay: float = field(
        default=0.5, metadata={"help": "Forgetting factor of a prompt's pass-rate counts at each update (1: none)."}
    )
    curation_seed: int | None = field(
        default=None, metadata={"help": "Seed of the curation sampler's generator. Defaults to `seed`."}
    )

    # ---------------------------------------------------------------- Reward guard (time bound, failing rows)
    reward_timeout: float | None = field(
        default=10.0,
        metadata={
            "help": "Seconds a verifier may spend on one completion before it is scored 0.0 (logged as "
            "rewards/timeouts); passed to reward functions with a `reward_timeout` keyword (math_accuracy). None: "
            "verify in-process, unbounded off the main thread."
        },
    )
    reward_on_error: str = field(
        default="raise",
        metadata={
            "help": "A reward function that raises (or returns infinity / a non-number) on a completion: 'raise' "
            "fails the step naming the function, row and completion; 'zero' scores the row 0.0 and counts it "
            "(rewards/errors).",
            "choices": list(REWARD_ON_ERROR_MODES),
        },
    )
    reward_on_nan: str = field(
        default="ignore",
        metadata={
            "help": "A NaN reward: 'ignore' keeps TRL's meaning (the function gives that row no reward; the first NaN "
            "is logged as a warning); 'error' treats it as a bad value, as reward_on_error says.",
            "choices": list(REWARD_ON_NAN_MODES),
        },
    )
    # ---------------------------------------------------------------- Dynamic sampling (DAPO)
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO's dynamic sampling (https://huggingface.co/papers/2503.14476): drop groups whose rewards "
            "have (near-)zero spread and generate more prompts, in whole groups, until the generation batch holds "
            "only informative groups."
        },
    )
    dynamic_sampling_max_rounds: int = field(
        default=10,
        metadata={
            "help": "Most generation rounds per generation batch (DAPO recipe: max_num_gen_batches=10). At the bound "
            "the batch is completed with zero-variance groups and `dynamic_sampling/bound_hit` is logged."
        },
    )
    dynamic_sampling_reward_func: str | None = field(
        default=None,
        metadata={
            "help": "Reward function (its name) whose spread decides, e.g. the correctness reward. Defaults to the "
            "weighted total reward (for shaped or non-binary rewards)."
        },
    )
    dynamic_sampling_min_std: float = field(
        default=0.0,
        metadata={"help": "Keep a group when its reward std is greater than this (0: the paper's rule)."},
    )
    dynamic_sampling_seed: int | None = field(
        default=None, metadata={"help": "Seed of the extra-prompt stream. Defaults to `seed + 1`."}
    )
    # ---------------------------------------------------------------- Training-signal check
    signal_check: bool = field(
        default=True,
        metadata={
            "help": "Warn once when the first signal_check_steps steps had no group with a reward spread (zero loss "
            "and gradient), naming the likely cause; and at start for options that cannot act (clip_recovery "
            "without rollout reuse). Observes only: training is unchanged."
        },
    )
    signal_check_steps: int = field(default=4, metadata={"help": "Optimizer steps the signal check watches."})
    # ---------------------------------------------------------------- vLLM engine (colocate)
    vllm_engine_kwargs: dict | str | None = field(
        default=None,
        metadata={
            "help": "Extra keyword arguments for the colocated vllm.LLM engine, as a dict (or JSON string), e.g. "
            '{"enforce_eager": true, "dtype": "float32"} (CPU: ~3 s engine build instead of ~30 s). Colocate only.'
        },
    )

    # ---------------------------------------------------------------- RELEX trajectory recorder
    relex_record_steps: int = field(
        default=0,
        metadata={
            "help": "Record θ_s − θ_0 every this many optimizer steps for RELEX (https://arxiv.org/abs/2605.21468; "
            "`trl-rlvr-ext relex` extrapolates the trajectory). 0: off (stock TRL). The authors record every step (1)."
        },
    )
    relex_trajectory_dir: str | None = field(
        default=None, metadata={"help": "The RELEX trajectory folder. Defaults to <output_dir>/relex_trajectory."}
    )
    relex_record_dtype: str = field(
        default="float16",
        metadata={
            "help": "dtype of the recorded deltas: float16 (the authors'), bfloat16 or float32.",
            "choices": list(RELEX_RECORD_DTYPES),
        },
    )

    # ---------------------------------------------------------------- POPO (positive-only objective)
    objective: str = field(
        default="grpo",
        metadata={
            "help": "'grpo' (TRL's loss, stock) or 'popo' (POPO, https://arxiv.org/abs/2605.06650: positive-only "
            "weighted NLL + α·cosine to an EMA target through a predictor + β·entropy; replaces TRL's loss).",
            "choices": list(OBJECTIVES),
        },
    )
    popo_alpha: float = field(
        default=POPO_PAPER_SETTINGS["alpha"], metadata={"help": "POPO: weight of the similarity term (paper: 0.1)."}
    )
    popo_beta_entropy: float = field(
        default=POPO_PAPER_SETTINGS["beta_entropy"],
        metadata={"help": "POPO: weight of the entropy term (paper: 0.01); TRL's entropy_coef must stay 0."},
    )
    popo_tau: float = field(
        default=POPO_PAPER_SETTINGS["tau"],
        metadata={"help": "POPO: EMA momentum of the target (authors' default 0.995; reported 7B run 0.999)."},
    )
    popo_reward_threshold: float = field(
        default=POPO_PAPER_SETTINGS["reward_threshold"],
        metadata={"help": "POPO: a rollout is positive when its mean reward is > this (authors: 0.0)."},
    )
    popo_predictor_hidden_dim: int = field(
        default=POPO_PAPER_SETTINGS["predictor_hidden_dim"],
        metadata={"help": "POPO: predictor MLP width (authors' default 1024; reported 7B run 4096)."},
    )
    popo_predictor_layers: int = field(
        default=POPO_PAPER_SETTINGS["predictor_layers"],
        metadata={"help": "POPO: predictor linear layers, at least 2 (authors: 2)."},
    )
    popo_feature_noise_std: float = field(
        default=POPO_PAPER_SETTINGS["feature_noise_std"],
        metadata={"help": "POPO: std of the noise on the EMA features in training (default 0.02; 7B run 0.01)."},
    )
    popo_weight_mode: str = field(
        default=POPO_PAPER_SETTINGS["weight_mode"],
        metadata={"help": "POPO: 'softmax' (paper) or 'uniform' (ablation).", "choices": list(POPO_WEIGHT_MODES)},
    )
    popo_weight_temperature: float = field(
        default=1.0, metadata={"help": "POPO: softmax temperature of the weights (authors: 1.0)."}
    )
    popo_length_normalize: bool = field(
        default=POPO_PAPER_SETTINGS["length_normalize"],
        metadata={"help": "POPO: divide the weights by the completion length, renormalised (authors: off)."},
    )
    popo_kl_monitor_steps: int = field(
        default=POPO_PAPER_SETTINGS["kl_monitor_steps"],
        metadata={"help": "POPO: log KL(policy || EMA target) every this many steps; 0: never (authors: 10)."},
    )
    popo_neg_logp_delta: bool = field(
        default=False,
        metadata={
            "help": "POPO: log popo/neg_logp_delta, the change of the previous batch's negatives' mean token log-prob "
            "over the updates on it (one extra forward of them per generation batch; ours)."
        },
    )
    # ---------------------------------------------------------------- POISE value baseline
    value_baseline: str = field(
        default="none",
        metadata={
            "help": "The advantage's baseline: 'none' (stock TRL, the group mean) or 'poise' (POISE, "
            "https://arxiv.org/abs/2605.07579: A_i = r_i - mean of the sibling rollouts' values, predicted by a ridge "
            "probe on the policy's hidden states, fitted online; A = r - target for the first poise_bootstrap_steps batches). "
            "Needs num_generations=2 and scale_rewards='none'.",
            "choices": list(VALUE_BASELINES),
        },
    )
    poise_layer: int | None = field(
        default=None,
        metadata={"help": "POISE: decoder layer read (0-based). Default: round(19/36 x layers) (authors: 19 of 36)."},
    )
    poise_pool_n: int = field(
        default=POISE_PAPER_SETTINGS["pool_n"],
        metadata={"help": "POISE: features are the mean of the last n valid prompt / response tokens (authors: 10)."},
    )
    poise_prompt_pca: int = field(
        default=POISE_PAPER_SETTINGS["prompt_pca"],
        metadata={"help": "POISE: PCA dimensions of the prompt feature, 0: raw (authors: 32)."},
    )
    poise_response_pca: int = field(
        default=POISE_PAPER_SETTINGS["response_pca"],
        metadata={"help": "POISE: PCA dimensions of the response feature, 0: raw (authors: 64)."},
    )
    poise_alpha: float = field(
        default=POISE_PAPER_SETTINGS["alpha"], metadata={"help": "POISE: ridge penalty (authors: 100)."}
    )
    poise_clip_min: float = field(
        default=POISE_PAPER_SETTINGS["clip_min"], metadata={"help": "POISE: lowest prediction (authors: 0)."}
    )
    poise_clip_max: float = field(
        default=POISE_PAPER_SETTINGS["clip_max"], metadata={"help": "POISE: highest prediction (authors: 1)."}
    )
    poise_buffer_rows: int = field(
        default=POISE_PAPER_SETTINGS["buffer_rows"],
        metadata={"help": "POISE: probe training rows kept, oldest prompt groups first out (authors: 4096)."},
    )
    poise_warmup_steps: int = field(
        default=POISE_PAPER_SETTINGS["warmup_steps"],
        metadata={"help": "POISE: refit the probe once this many batches were observed (authors: 8)."},
    )
    poise_bootstrap_steps: int = field(
        default=POISE_PAPER_SETTINGS["bootstrap_steps"],
        metadata={
            "help": "POISE: generation batches with A = r - target (RLOO with the default target) before the first "
            "fit (authors: 16)."
        },
    )
    poise_target_mode: str = field(
        default=POISE_PAPER_SETTINGS["target_mode"],
        metadata={
            "help": "POISE: the probe's target: the siblings' mean reward (other_rollout_correctness, the authors') "
            "or the group's (pair_average).",
            "choices": list(POISE_TARGET_MODES),
        },
    )

    def __post_init__(self):
        check_training_values(self)  # before TRL's own checks, which would fail on them less clearly
        super().__post_init__()
        self._check_package_options()

    def _check_package_options(self):
        # This package's checks alone (also run on a plain GRPOConfig converted by the trainer, whose TRL fields
        # GRPOConfig.__post_init__ has already resolved)
        self._check_clip_recovery()
        self._check_adaptive_clip()
        self._check_token_credit()
        self._check_rsi_selection()
        self._check_curation()
        self._check_lora_init()
        self._check_reward_guard()
        self._check_dynamic_sampling()
        self._check_relex()
        self._check_popo()
        self._check_value_baseline()
        if self.signal_check_steps < 1:
            raise ValueError(
                f"signal_check_steps must be at least 1, got {self.signal_check_steps}; set signal_check=False to turn "
                "the check off."
            )
        if isinstance(self.vllm_engine_kwargs, str):  # from a command line
            self.vllm_engine_kwargs = json.loads(self.vllm_engine_kwargs)

    def _check_clip_recovery(self):
        if self.clip_recovery not in CLIP_RECOVERY_MODES:
            raise ValueError(
                f"clip_recovery={self.clip_recovery!r} is not supported. Use one of {list(CLIP_RECOVERY_MODES)}."
            )
        if self.clip_recovery != "none" and self.loss_type not in CLIPPED_LOSS_TYPES:
            raise ValueError(
                f"clip_recovery={self.clip_recovery!r} needs a loss with PPO's hard clip, but loss_type="
                f"{self.loss_type!r} has none to recover from. Set loss_type to one of {list(CLIPPED_LOSS_TYPES)} "
                "(the paper uses 'dapo' with epsilon=0.2, epsilon_high=0.28), or set clip_recovery='none'."
            )
        if self.clip_recovery != "none" and self.clip_recovery_seed is None:
            self.clip_recovery_seed = self.seed

    def _check_adaptive_clip(self):
        if self.adaptive_clip not in ADAPTIVE_CLIP_MODES:
            raise ValueError(
                f"adaptive_clip={self.adaptive_clip!r} is not supported. Use one of {list(ADAPTIVE_CLIP_MODES)}."
            )
        if self.adaptive_clip_scope not in ADAPTIVE_CLIP_SCOPES:
            raise ValueError(
                f"adaptive_clip_scope={self.adaptive_clip_scope!r} is not supported. Use one of "
                f"{list(ADAPTIVE_CLIP_SCOPES)}: 'global' (statistics over every process) or 'micro_batch' (each "
                "process's own, as the authors' code)."
            )
        if self.off_policy_diagnostics and not off_policy_diagnostics_apply(self):
            raise ValueError(
                f"off_policy_diagnostics measures the ratios and clipped shares of PPO's token-level clip, but "
                f"loss_type={self.loss_type!r} with importance_sampling_level={self.importance_sampling_level!r} has "
                f"none. Use loss_type in {list(CLIPPED_LOSS_TYPES)} with importance_sampling_level='token', or set "
                "off_policy_diagnostics=False."
            )
        if self.off_policy_diagnostics and (
            not isinstance(self.adaptive_clip_num_bins, int) or self.adaptive_clip_num_bins < 1
        ):
            raise ValueError(
                f"off_policy_diagnostics bins tokens by adaptive_clip_num_bins, which must be a positive integer, got "
                f"{self.adaptive_clip_num_bins!r} (paper: 5)."
            )
        if self.adaptive_clip == "none":
            return
        if self.loss_type in ADAPTIVE_CLIP_REFUSED_LOSS_TYPES:
            raise ValueError(
                f"adaptive_clip={self.adaptive_clip!r} adapts the width of PPO's hard clip, but loss_type="
                f"{self.loss_type!r} has none: {ADAPTIVE_CLIP_REFUSED_LOSS_TYPES[self.loss_type]}. Set loss_type to "
                f"one of {list(CLIPPED_LOSS_TYPES)} (the authors' runs aggregate like 'grpo'), or adaptive_clip='none'."
            )
        if self.loss_type not in CLIPPED_LOSS_TYPES:
            raise ValueError(
                f"adaptive_clip={self.adaptive_clip!r} does not know loss_type={self.loss_type!r}. Use one of "
                f"{list(CLIPPED_LOSS_TYPES)}."
            )
        if self.importance_sampling_level != "token":
            raise ValueError(
                f"adaptive_clip={self.adaptive_clip!r} bins each token by its own probability and clips its own ratio; "
                f"with importance_sampling_level={self.importance_sampling_level!r} the ratio is one per sequence, "
                "which has no token probability to bin. Set importance_sampling_level='token' (the paper's setting)."
            )
        if not isinstance(self.adaptive_clip_num_bins, int) or self.adaptive_clip_num_bins < 1:
            raise ValueError(
                f"adaptive_clip_num_bins must be a positive integer, got {self.adaptive_clip_num_bins!r} (paper: 5)."
            )
        for name in ("alpha", "base", "min", "max"):
            value = getattr(self, f"adaptive_clip_{name}")
            if not value >= 0:  # also refuses NaN
                paper = ACPO_PAPER_SETTINGS[name if name in ("alpha", "base") else f"{name}_clip"]
                raise ValueError(f"adaptive_clip_{name} must be a number >= 0, got {value!r} (paper: {paper}).")
        if self.adaptive_clip_max < self.adaptive_clip_min:
            raise ValueError(
                f"adaptive_clip_max ({self.adaptive_clip_max}) must be >= adaptive_clip_min ({self.adaptive_clip_min}): "
                "the width is clamped to [min, max] (paper: 0.0 and 3.0)."
            )

    def _check_token_credit(self):
        if self.token_credit not in TOKEN_CREDIT_MODES:
            raise ValueError(
                f"token_credit={self.token_credit!r} is not supported. Use one of {list(TOKEN_CREDIT_MODES)}."
            )
        if self.token_credit == "none":
            return
        if self.loss_type in TOKEN_CREDIT_REFUSED_LOSS_TYPES:
            raise ValueError(
                f"token_credit={self.token_credit!r} multiplies the advantages of PPO's clipped objective, but loss_type="
                f"{self.loss_type!r} has none: {TOKEN_CREDIT_REFUSED_LOSS_TYPES[self.loss_type]}. Set loss_type to "
                f"one of {list(CLIPPED_LOSS_TYPES)} (the authors use DAPO's clip with token-mean aggregation: 'dapo'), "
                "or token_credit='none'."
            )
        if self.loss_type not in CLIPPED_LOSS_TYPES:
            raise ValueError(
                f"token_credit={self.token_credit!r} does not know loss_type={self.loss_type!r}. Use one of "
                f"{list(CLIPPED_LOSS_TYPES)}."
            )
        if not 0 <= self.token_credit_w_lo <= self.token_credit_w_hi:  # also refuses NaN
            raise ValueError(
                f"DelTA needs 0 <= token_credit_w_lo <= token_credit_w_hi, got {self.token_credit_w_lo!r} and "
                f"{self.token_credit_w_hi!r} (released script: 0.8 and 1.2)."
            )
        steps = self.token_credit_refine_steps
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise ValueError(f"token_credit_refine_steps must be an integer >= 0, got {steps!r} (released script: 1).")

    def _check_rsi_selection(self):
        if self.rsi_selection not in RSI_SELECTION_MODES:
            raise ValueError(
                f"rsi_selection={self.rsi_selection!r} is not supported. Use one of {list(RSI_SELECTION_MODES)}."
            )
        absolute = {"rsi_low": self.rsi_low, "rsi_high": self.rsi_high}
        quantiles = {"rsi_quantile_low": self.rsi_quantile_low, "rsi_quantile_high": self.rsi_quantile_high}
        own, other = {"interval": (absolute, quantiles), "quantile": (quantiles, absolute)}.get(
            self.rsi_selection, ({}, {**absolute, **quantiles})
        )
        stray = [name for name, value in other.items() if value is not None]
        if stray:  # never ignored silently
            needs = "rsi_selection='interval'" if "rsi_low" in stray or "rsi_high" in stray else "'quantile'"
            raise ValueError(
                f"{', '.join(stray)} set with rsi_selection={self.rsi_selection!r}, which does not read it: use "
                f"{needs} (rsi_low / rsi_high are RSI values for 'interval', rsi_quantile_* are quantiles for "
                "'quantile'), or leave it unset."
            )
        if self.rsi_selection == "none":
            return
        if all(value is None for value in own.values()):
            raise ValueError(
                f"rsi_selection={self.rsi_selection!r} needs at least one of {list(own)}: the paper "
                "(https://arxiv.org/abs/2606.31575) gives no interval values, so there is no default. For example "
                + (
                    "rsi_low=0.25, rsi_high=3.0."
                    if self.rsi_selection == "interval"
                    else "rsi_quantile_low=0.1, rsi_quantile_high=0.9."
                )
            )
        for name, value in own.items():
            if value is None:
                continue
            if self.rsi_selection == "interval" and not value >= 0:  # also refuses NaN
                raise ValueError(f"{name} must be a number >= 0 (RSI = -log p / H is never negative), got {value!r}.")
            if self.rsi_selection == "quantile" and not 0 <= value <= 1:
                raise ValueError(f"{name} must be a quantile in [0, 1], got {value!r}.")
        low, high = own.values()
        if low is not None and high is not None and low > high:
            names = list(own)
            raise ValueError(f"{names[0]} ({low}) must be <= {names[1]} ({high}): the interval would keep no token.")
        if not self.rsi_eps >= 0:
            raise ValueError(f"rsi_eps must be >= 0, got {self.rsi_eps!r}.")
        if self.top_entropy_quantile < 1.0:
            raise ValueError(
                f"rsi_selection={self.rsi_selection!r} replaces TRL's entropy mask at the same place, and the two "
                f"selections are not combined (top_entropy_quantile={self.top_entropy_quantile}): RSI-S already drops "
                "the high-surprisal tail and the redundant low-surprisal tokens, and the paper defines no product of "
                "the two. Set top_entropy_quantile=1.0, or rsi_selection='none'."
            )

    def _check_curation(self):
        if self.curation not in CURATION_MODES:
            raise ValueError(f"curation={self.curation!r} is not supported. Use one of {list(CURATION_MODES)}.")
        if self.curation_pass_rate_target not in PASS_RATE_TARGETS:
            raise ValueError(
                f"curation_pass_rate_target={self.curation_pass_rate_target!r} is not supported. Use one of "
                f"{list(PASS_RATE_TARGETS)}."
            )
        if not 0 < self.curation_pass_rate_floor <= 1:
            raise ValueError(f"curation_pass_rate_floor must be in (0, 1], got {self.curation_pass_rate_floor}.")
        if self.curation_pass_rate_prior_alpha <= 0 or self.curation_pass_rate_prior_beta <= 0:
            raise ValueError("curation_pass_rate_prior_alpha and curation_pass_rate_prior_beta must be > 0.")
        if not 0 < self.curation_pass_rate_decay <= 1:
            raise ValueError(f"curation_pass_rate_decay must be in (0, 1], got {self.curation_pass_rate_decay}.")
        if self.curation_self_recheck_steps < 0:
            raise ValueError(
                f"curation_self_recheck_steps must be >= 0 (0 disables the memory), got "
                f"{self.curation_self_recheck_steps}."
            )
        if self.curation_self_greedy_max_tokens is not None and self.curation_self_greedy_max_tokens < 1:
            raise ValueError("curation_self_greedy_max_tokens must be at least 1 (or None for max_completion_length).")
        if self.curation == "self" and self.loss_type not in (
            SELF_SEQUENCE_AVERAGED_LOSS_TYPES + SELF_TOKEN_NORMALISED_LOSS_TYPES
        ):
            raise ValueError(
                f"curation='self' cannot give loss_type={self.loss_type!r} the loss of GRPO on the kept prompts: its "
                "normaliser is the token count of each micro-batch, which has no kept-prompts-only counterpart. Use "
                f"one of {list(SELF_TOKEN_NORMALISED_LOSS_TYPES + SELF_SEQUENCE_AVERAGED_LOSS_TYPES)} (dapo, TRL's "
                "default, normalises by the kept tokens of the generation batch)."
            )
        if (
            self.curation == "self"
            and self.loss_type in SELF_SEQUENCE_AVERAGED_LOSS_TYPES
            and self.steps_per_generation % self.gradient_accumulation_steps != 0
        ):
            raise ValueError(
                f"curation='self' with loss_type={self.loss_type!r} weighs each kept sequence of an optimizer step by "
                "1/(kept sequences of that step), which needs every step inside one generation batch: "
                f"steps_per_generation={self.steps_per_generation} must be a multiple of gradient_accumulation_steps="
                f"{self.gradient_accumulation_steps}. Change one of them, or use loss_type='dapo'."
            )
        if (
            self.curation == "self"
            and self.loss_type in SELF_SEQUENCE_AVERAGED_LOSS_TYPES
            and (self.entropy_coef != 0.0 or self.use_adaptive_entropy)
        ):
            raise ValueError(
                f"curation='self' with loss_type={self.loss_type!r} rescales each micro-batch's loss so that every kept "
                "sequence weighs 1/K; that factor would rescale TRL's entropy bonus too. Set entropy_coef=0.0 and "
                "use_adaptive_entropy=False, or use loss_type='dapo'."
            )
        if self.curation != "none" and self.remove_unused_columns:
            raise ValueError(
                "curation needs the prompt-id column to reach the trainer: set remove_unused_columns=False (TRL's "
                "GRPO default)."
            )
        if self.curation != "none" and self.curation_seed is None:
            self.curation_seed = self.seed

    def _check_reward_guard(self):
        if self.reward_on_error not in REWARD_ON_ERROR_MODES:
            raise ValueError(
                f"reward_on_error={self.reward_on_error!r} is not supported. Use one of {list(REWARD_ON_ERROR_MODES)}."
            )
        if self.reward_on_nan not in REWARD_ON_NAN_MODES:
            raise ValueError(
                f"reward_on_nan={self.reward_on_nan!r} is not supported. Use one of {list(REWARD_ON_NAN_MODES)}."
            )
        if self.reward_timeout is not None and not self.reward_timeout > 0:
            raise ValueError(
                f"reward_timeout must be a number of seconds > 0, or None to verify without a bound; got "
                f"{self.reward_timeout!r}."
            )

    def _check_dynamic_sampling(self):
        if not self.dynamic_sampling:
            return
        if self.dynamic_sampling_max_rounds < 1:
            raise ValueError(
                f"dynamic_sampling_max_rounds must be at least 1 (the first generation round), got "
                f"{self.dynamic_sampling_max_rounds}. The DAPO recipe uses 10."
            )
        if self.dynamic_sampling_min_std < 0:
            raise ValueError(
                f"dynamic_sampling_min_std must be >= 0 (0 drops only groups whose rewards are all equal), got "
                f"{self.dynamic_sampling_min_std}."
            )
        if self.scale_rewards == "batch":
            raise ValueError(
                "dynamic_sampling with scale_rewards='batch' cannot be exact: the batch std would mix the rounds' "
                "dropped groups into the kept groups' advantages. Use scale_rewards='group' (DAPO) or 'none'."
            )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                f"dynamic_sampling needs multi_objective_aggregation='sum_then_normalize': with "
                f"{self.multi_objective_aggregation!r} the advantages are normalised over the whole batch, so dropping "
                "groups would change the kept groups' advantages."
            )
        if self.dynamic_sampling_seed is None:
            self.dynamic_sampling_seed = self.seed + 1

    def _check_relex(self):
        steps = self.relex_record_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(
                f"relex_record_steps must be an integer >= 0 (0: off; the authors record every step, 1), got {steps!r}."
            )
        if self.relex_record_dtype not in RELEX_RECORD_DTYPES:
            raise ValueError(
                f"relex_record_dtype={self.relex_record_dtype!r} is not supported. Use one of "
                f"{list(RELEX_RECORD_DTYPES)} (the authors store float16 deltas)."
            )
        if steps == 0:
            return
        if self.lora_init is not None and rewrites_base(self.lora_init):
            raise ValueError(
                f"relex_record_steps records the adapter, but lora_init={self.lora_init!r} rewrites the base weights "
                "(a residual W − γ·B₀A₀): the extrapolated adapters would apply to that residual, not to the saved "
                "base model. Use lora_init 'rlpo' or 'rlmo' (base untouched), PEFT's default init, or full fine-tuning."
            )
        if self.relex_trajectory_dir is None:
            self.relex_trajectory_dir = os.path.join(self.output_dir, "relex_trajectory")

    # ---------------------------------------------------------------- POPO
    def _check_popo(self):
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective={self.objective!r} is not supported. Use one of {list(OBJECTIVES)}.")
        if self.objective != "popo":
            return
        replaced = "POPO replaces TRL's loss (no advantages, ratio, clip or KL)"
        refusals = {
            "beta": (self.beta != 0, "POPO's loss has no KL term (the authors force beta=0): set beta=0.0"),
            "entropy_coef": (
                self.entropy_coef != 0 or self.use_adaptive_entropy,
                (
                    "POPO's entropy term is popo_beta_entropy; TRL's entropy bonus would count it twice: set "
                    "entropy_coef=0.0 and use_adaptive_entropy=False"
                ),
            ),
            "use_liger_kernel": (self.use_liger_kernel, f"{replaced}; Liger's fused GRPO loss would bypass it"),
            "top_entropy_quantile": (self.top_entropy_quantile < 1, f"{replaced}: TRL's entropy mask has no loss"),
            "reward_weights": (
                self.reward_weights is not None,
                "POPO's positives use the unweighted mean of the reward functions (the authors'): drop reward_weights",
            ),
            "dynamic_sampling": (self.dynamic_sampling, "not composed with POPO yet: set dynamic_sampling=False"),
            "curation": (self.curation != "none", "not composed with POPO yet: set curation='none'"),
            "off_policy_diagnostics": (self.off_policy_diagnostics, f"{replaced}: there is no ratio to diagnose"),
        }
        for option in ("clip_recovery", "adaptive_clip", "token_credit", "rsi_selection", "value_baseline"):
            refusals[option] = (getattr(self, option) != "none", f"{replaced}, where {option} acts: set it to 'none'")
        for option, (refused, why) in refusals.items():
            if refused:
                raise ValueError(f"objective='popo' cannot take {option}={getattr(self, option)!r}: {why}.")
        if not 0 <= self.popo_tau <= 1:  # also refuses NaN
            raise ValueError(f"popo_tau must be in [0, 1] (0: copy, 1: frozen), got {self.popo_tau!r} (paper: 0.995).")
        for name in ("popo_alpha", "popo_beta_entropy", "popo_feature_noise_std"):
            if not getattr(self, name) >= 0:
                raise ValueError(
                    f"{name} must be >= 0, got {getattr(self, name)!r} (paper: {POPO_PAPER_SETTINGS[name[5:]]})."
                )
        if self.popo_weight_mode not in POPO_WEIGHT_MODES:
            raise ValueError(
                f"popo_weight_mode must be one of {list(POPO_WEIGHT_MODES)}, got {self.popo_weight_mode!r}."
            )
        if not self.popo_weight_temperature > 0:
            raise ValueError(
                f"popo_weight_temperature must be > 0, got {self.popo_weight_temperature!r} (authors: 1.0)."
            )
        if self.popo_predictor_layers < 2 or self.popo_predictor_hidden_dim < 1:
            raise ValueError(
                f"POPO's predictor needs popo_predictor_layers >= 2 and popo_predictor_hidden_dim >= 1, got "
                f"{self.popo_predictor_layers} and {self.popo_predictor_hidden_dim} (authors: 2 and 1024)."
            )
        if isinstance(self.popo_kl_monitor_steps, bool) or self.popo_kl_monitor_steps < 0:
            raise ValueError(
                f"popo_kl_monitor_steps must be an integer >= 0 (0: never), got {self.popo_kl_monitor_steps!r}."
            )

    def _check_value_baseline(self):
        # POISE (https://arxiv.org/abs/2605.07579): what it replaces and what it cannot be combined with
        if self.value_baseline not in VALUE_BASELINES:
            raise ValueError(
                f"value_baseline={self.value_baseline!r} is not supported. Use one of {list(VALUE_BASELINES)}."
            )
        if self.value_baseline == "none":
            return
        if self.num_generations != 2:
            raise ValueError(
                f"value_baseline='poise' needs num_generations=2, got {self.num_generations}: the authors' run starts "
                "from scratch with an RLOO bootstrap that requires n = 2 (each rollout's baseline is its one sibling's "
                "predicted value). Set num_generations=2 and spend the rollouts on more prompts."
            )
        if self.scale_rewards != "none":
            raise ValueError(
                f"value_baseline='poise' replaces the advantages by r_i - b_i without std normalisation (the authors'), "
                f"but scale_rewards={self.scale_rewards!r} asks for a normalisation it would silently drop. Set "
                "scale_rewards='none'."
            )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "value_baseline='poise' regresses the weighted sum of the rewards: set "
                "multi_objective_aggregation='sum_then_normalize'."
            )
        if self.dynamic_sampling:
            raise ValueError(
                "value_baseline='poise' is not combined with dynamic_sampling: that drops zero-variance groups and "
                "regenerates, while POISE trains on every prompt (the authors' run has no filtering and no dynamic "
                "sampling) and its probe learns from every group. Turn one of them off."
            )
        if self.curation == "self":
            raise ValueError(
                "value_baseline='poise' is not combined with curation='self': SELF drops the solved prompts' "
                "rollouts after the advantages are computed, so the trained rows and the probe's rows would differ. "
                "curation='pass_rate' (which only chooses the prompts) composes. Turn one of them off."
            )
        counts = {
            "poise_pool_n": self.poise_pool_n,
            "poise_warmup_steps": self.poise_warmup_steps,
            "poise_bootstrap_steps": self.poise_bootstrap_steps,
        }
        for name, value in counts.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r} (authors: {POISE_PAPER_SETTINGS}).")
        for name in ("poise_prompt_pca", "poise_response_pca"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0 (0: no projection), got {value!r}.")
        layer = self.poise_layer
        if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or layer < 0):
            raise ValueError(f"poise_layer must be a 0-based layer index >= 0, or None, got {self.poise_layer!r}.")
        if not self.poise_alpha > 0:
            raise ValueError(f"poise_alpha must be > 0 (authors: 100), got {self.poise_alpha!r}.")
        if not self.poise_clip_min < self.poise_clip_max:
            raise ValueError(
                f"poise_clip_min ({self.poise_clip_min!r}) must be < poise_clip_max ({self.poise_clip_max!r})."
            )
        if self.poise_buffer_rows < self.num_generations:
            raise ValueError(
                f"poise_buffer_rows ({self.poise_buffer_rows}) must hold at least one prompt group "
                f"({self.num_generations} rows); the authors keep 4096."
            )
        if self.poise_target_mode not in POISE_TARGET_MODES:
            raise ValueError(
                f"poise_target_mode={self.poise_target_mode!r} is not supported. Use one of {list(POISE_TARGET_MODES)}."
            )
