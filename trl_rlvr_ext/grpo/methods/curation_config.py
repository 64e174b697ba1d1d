"""Online curation's config fields (`CurationArguments`, flat in `RLVRGRPOConfig`) and checks; the method is
`trl_rlvr_ext.grpo.methods.curation` (a config module beside the method's, as PEFT's tuners keep theirs)."""

from dataclasses import dataclass, field

from ...curation.samplers import CURATION_MODES as CURATION_SAMPLER_MODES
from ...curation.samplers import PASS_RATE_TARGETS


CURATION_MODES = ("none", *CURATION_SAMPLER_MODES)
# Loss types that average each sequence's loss (or sum) over a row count, per micro-batch. With curation="self" the
# trainer rescales them so that every kept sequence of an optimizer window weighs 1/K (K: kept sequences in the window,
# all processes), which needs each window inside one generation batch.
SELF_SEQUENCE_AVERAGED_LOSS_TYPES = ("grpo", "sapo", "dr_grpo", "luspo")
# Token-normalised losses whose normaliser is TRL's `num_items_in_batch`, which SELF sets to the kept tokens.
SELF_TOKEN_NORMALISED_LOSS_TYPES = ("dapo", "cispo", "vespo")


@dataclass
class CurationArguments:
    r"""The fields of this method in [`RLVRGRPOConfig`] (flat: the same names on the command line and in YAML).

    Parameters:
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
    """

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


def check_curation_config(args) -> None:
    if args.curation not in CURATION_MODES:
        raise ValueError(f"curation={args.curation!r} is not supported. Use one of {list(CURATION_MODES)}.")
    if args.curation_pass_rate_target not in PASS_RATE_TARGETS:
        raise ValueError(
            f"curation_pass_rate_target={args.curation_pass_rate_target!r} is not supported. Use one of "
            f"{list(PASS_RATE_TARGETS)}."
        )
    if not 0 < args.curation_pass_rate_floor <= 1:
        raise ValueError(f"curation_pass_rate_floor must be in (0, 1], got {args.curation_pass_rate_floor}.")
    if args.curation_pass_rate_prior_alpha <= 0 or args.curation_pass_rate_prior_beta <= 0:
        raise ValueError("curation_pass_rate_prior_alpha and curation_pass_rate_prior_beta must be > 0.")
    if not 0 < args.curation_pass_rate_decay <= 1:
        raise ValueError(f"curation_pass_rate_decay must be in (0, 1], got {args.curation_pass_rate_decay}.")
    if args.curation_self_recheck_steps < 0:
        raise ValueError(
            f"curation_self_recheck_steps must be >= 0 (0 disables the memory), got "
            f"{args.curation_self_recheck_steps}."
        )
    if args.curation_self_greedy_max_tokens is not None and args.curation_self_greedy_max_tokens < 1:
        raise ValueError("curation_self_greedy_max_tokens must be at least 1 (or None for max_completion_length).")
    if args.curation == "self" and args.loss_type not in (
        SELF_SEQUENCE_AVERAGED_LOSS_TYPES + SELF_TOKEN_NORMALISED_LOSS_TYPES
    ):
        raise ValueError(
            f"curation='self' cannot give loss_type={args.loss_type!r} the loss of GRPO on the kept prompts: its "
            "normaliser is the token count of each micro-batch, which has no kept-prompts-only counterpart. Use "
            f"one of {list(SELF_TOKEN_NORMALISED_LOSS_TYPES + SELF_SEQUENCE_AVERAGED_LOSS_TYPES)} (dapo, TRL's "
            "default, normalises by the kept tokens of the generation batch)."
        )
    if (
        args.curation == "self"
        and args.loss_type in SELF_SEQUENCE_AVERAGED_LOSS_TYPES
        and args.steps_per_generation % args.gradient_accumulation_steps != 0
    ):
        raise ValueError(
            f"curation='self' with loss_type={args.loss_type!r} weighs each kept sequence of an optimizer step by "
            "1/(kept sequences of that step), which needs every step inside one generation batch: "
            f"steps_per_generation={args.steps_per_generation} must be a multiple of gradient_accumulation_steps="
            f"{args.gradient_accumulation_steps}. Change one of them, or use loss_type='dapo'."
        )
    if (
        args.curation == "self"
        and args.loss_type in SELF_SEQUENCE_AVERAGED_LOSS_TYPES
        and (args.entropy_coef != 0.0 or args.use_adaptive_entropy)
    ):
        raise ValueError(
            f"curation='self' with loss_type={args.loss_type!r} rescales each micro-batch's loss so that every kept "
            "sequence weighs 1/K; that factor would rescale TRL's entropy bonus too. Set entropy_coef=0.0 and "
            "use_adaptive_entropy=False, or use loss_type='dapo'."
        )
    if args.curation != "none" and args.remove_unused_columns:
        raise ValueError(
            "curation needs the prompt-id column to reach the trainer: set remove_unused_columns=False (TRL's "
            "GRPO default)."
        )
    if args.curation != "none" and args.curation_seed is None:
        args.curation_seed = args.seed
