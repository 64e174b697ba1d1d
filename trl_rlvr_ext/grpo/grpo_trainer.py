"""`RLVRGRPOTrainer`: TRL's `GRPOTrainer` plus stochastic clip recovery (NSR).

With every option of `RLVRGRPOConfig` at its default, each overridden method delegates to TRL unchanged, so the
trainer is stock `GRPOTrainer` to the bit (tests/test_grpo_trainer.py proves it).
"""

from typing import ClassVar

import torch
from trl import GRPOConfig, GRPOTrainer

from .._compat import check_fsdp_really_runs, resolve_trainer_config
from .._trl import load_copy
from ..losses.clip_recovery import clip_recovery_objective
from ..rewards.guard import guard_reward_funcs
from .checkpoint_state import CheckpointState, CheckpointStateMixin
from .curation_mixin import CurationMixin
from .dynamic_sampling import DynamicSamplingMixin
from .grpo_config import RLVRGRPOConfig
from .inputs import check_grpo_inputs, resolve_reward_names
from .signal_check import TrainingSignalCheckMixin
from .vllm_cpu import install_cpu_weight_sync, vllm_build_patches


# The copies of TRL's methods that match the installed TRL (a clear ImportError on an unsupported version)
_TRL_COPY = load_copy("grpo")


class RLVRGRPOTrainer(
    TrainingSignalCheckMixin, DynamicSamplingMixin, CurationMixin, CheckpointStateMixin, GRPOTrainer
):
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
    - A training-signal check (`signal_check`, on by default; it only observes): a warning with the likely cause when
      the first steps carry no learning signal, or an option cannot act (`TrainingSignalCheckMixin`).

    The constructor is `GRPOTrainer`'s; `args` is an [`RLVRGRPOConfig`] (a plain `trl.GRPOConfig` runs as stock TRL,
    with this package's options off).
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
        # Before any model loads: reward names resolved (never a hub look-up), the columns they read checked
        reward_funcs = resolve_reward_names(reward_funcs)
        check_grpo_inputs(args, reward_funcs, kwargs.get("train_dataset"), kwargs.get("eval_dataset"))
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
        self._init_signal_check()  # warns about options that cannot act here; watches the first steps' rewards
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

    def _clip_recovery_loss(self, ratio: torch.Tensor, advantages: torch.Tensor):
        """The per-token loss of PPO's clipped objective with clip recovery, and the rescue masks. The marked blocks in
        the copy of TRL's `_compute_loss` compute it from TRL's ratio before TRL's own `-min(r·A, clip(r)·A)` and put
        it in its place (computed there, so that autograd sums the gradients in the same order as TRL)."""
        surrogate, recovery_masks = clip_recovery_objective(
            ratio,
            advantages,
            self.epsilon_low,
            self.epsilon_high,
            mode=self.args.clip_recovery,
            generator=self._clip_recovery_generator(ratio.device),
            delta=self.args.delta,
        )
        return -surrogate, recovery_masks

    def _log_clip_recovery(self, mode: str, recovery_masks: dict, mask: torch.Tensor, global_masked_mean) -> None:
        # Rescued tokens over all completion tokens (a rescued sequence rescues all of its tokens), reduced over ranks
        # by TRL's own `global_masked_mean`, as its `clip_ratio/*` metrics are.
        for side in ("low", "high"):
            rescued = recovery_masks[f"rescued_{side}"].float().expand_as(mask)
            self._metrics[mode][f"clip_recovery/{side}_frac"].append(global_masked_mean(rescued))

    def _compute_loss(self, model, inputs):
        if self.args.clip_recovery == "none":
            return super()._compute_loss(model, inputs)
        # TRL's `_compute_loss` for the installed TRL, with NSR in its marked blocks (trl_rlvr_ext/_trl/)
        return _TRL_COPY._compute_loss(self, model, inputs)
