"""POPO's config fields (`PopoArguments`, flat in `RLVRGRPOConfig`) and checks; the method is
`trl_rlvr_ext.grpo.methods.popo`. The methods POPO does not compose with are in the composition table
(`trl_rlvr_ext.grpo.composition.REFUSED`)."""

from dataclasses import dataclass, field

from ...losses.popo import POPO_PAPER_SETTINGS, POPO_WEIGHT_MODES


OBJECTIVES = ("grpo", "popo")


@dataclass
class PopoArguments:
    r"""The fields of this method in [`RLVRGRPOConfig`] (flat: the same names on the command line and in YAML).

    Parameters:
        objective (`str`, *optional*, defaults to `"grpo"`):
            `"grpo"`: TRL's loss (`loss_type`), stock. `"popo"`: POPO ("Positive-Only Policy Optimization",
            https://arxiv.org/abs/2605.06650, code https://github.com/momo1443/colm2026-POPO) replaces the whole loss
            (`trl_rlvr_ext.losses.popo`, `trl_rlvr_ext.grpo.methods.popo`): L = L_NLL + α·L_sim + β_ent·L_ent, a weighted NLL
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
    """

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


def check_popo_config(args) -> None:
    if args.objective not in OBJECTIVES:
        raise ValueError(f"objective={args.objective!r} is not supported. Use one of {list(OBJECTIVES)}.")
    if args.objective != "popo":
        return
    replaced = "POPO replaces TRL's loss (no advantages, ratio, clip or KL)"
    refusals = {
        "beta": (args.beta != 0, "POPO's loss has no KL term (the authors force beta=0): set beta=0.0"),
        "entropy_coef": (
            args.entropy_coef != 0 or args.use_adaptive_entropy,
            (
                "POPO's entropy term is popo_beta_entropy; TRL's entropy bonus would count it twice: set "
                "entropy_coef=0.0 and use_adaptive_entropy=False"
            ),
        ),
        "use_liger_kernel": (args.use_liger_kernel, f"{replaced}; Liger's fused GRPO loss would bypass it"),
        "top_entropy_quantile": (args.top_entropy_quantile < 1, f"{replaced}: TRL's entropy mask has no loss"),
        "reward_weights": (
            args.reward_weights is not None,
            "POPO's positives use the unweighted mean of the reward functions (the authors'): drop reward_weights",
        ),
    }
    for option, (refused, why) in refusals.items():
        if refused:
            raise ValueError(f"objective='popo' cannot take {option}={getattr(args, option)!r}: {why}.")
    if not 0 <= args.popo_tau <= 1:  # also refuses NaN
        raise ValueError(f"popo_tau must be in [0, 1] (0: copy, 1: frozen), got {args.popo_tau!r} (paper: 0.995).")
    for name in ("popo_alpha", "popo_beta_entropy", "popo_feature_noise_std"):
        if not getattr(args, name) >= 0:
            raise ValueError(
                f"{name} must be >= 0, got {getattr(args, name)!r} (paper: {POPO_PAPER_SETTINGS[name[5:]]})."
            )
    if args.popo_weight_mode not in POPO_WEIGHT_MODES:
        raise ValueError(f"popo_weight_mode must be one of {list(POPO_WEIGHT_MODES)}, got {args.popo_weight_mode!r}.")
    if not args.popo_weight_temperature > 0:
        raise ValueError(f"popo_weight_temperature must be > 0, got {args.popo_weight_temperature!r} (authors: 1.0).")
    if args.popo_predictor_layers < 2 or args.popo_predictor_hidden_dim < 1:
        raise ValueError(
            f"POPO's predictor needs popo_predictor_layers >= 2 and popo_predictor_hidden_dim >= 1, got "
            f"{args.popo_predictor_layers} and {args.popo_predictor_hidden_dim} (authors: 2 and 1024)."
        )
    if isinstance(args.popo_kl_monitor_steps, bool) or args.popo_kl_monitor_steps < 0:
        raise ValueError(
            f"popo_kl_monitor_steps must be an integer >= 0 (0: never), got {args.popo_kl_monitor_steps!r}."
        )
