"""`RLVRGRPOTrainer`: TRL's `GRPOTrainer` composed with this package's GRPO methods, in their declared order.

With every option of `RLVRGRPOConfig` at its default, each overridden method delegates to TRL unchanged, so the
trainer is stock `GRPOTrainer` to the bit (tests/test_grpo_trainer.py proves it).
"""

import functools
from typing import ClassVar

from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from .._compat import check_fsdp_really_runs, resolve_trainer_config
from .._trl import load_copy
from ..data import resolve_model_argument
from ..lora_init.saving import CheckpointAdapterMixin
from ..losses.ppo import ppo_clipped_objective
from .checkpoint_state import CheckpointStateMixin
from .grpo_config import RLVRGRPOConfig
from .inputs import check_grpo_inputs, resolve_reward_names
from .method import HOOKS, LOSS_COPY_HOOKS, GRPOMethod, active_methods
from .vllm_cpu import install_cpu_weight_sync, vllm_build_patches
from .vllm_lora import colocate_lora_engine_kwargs
from .vllm_state import install_server_guard


# The copies of TRL's methods that match the installed TRL (a clear ImportError on an unsupported version)
_TRL_COPY = load_copy("grpo")


class RLVRGRPOTrainer(CheckpointAdapterMixin, CheckpointStateMixin, GRPOTrainer):
    """[`~trl.GRPOTrainer`] with this package's methods, configured by [`RLVRGRPOConfig`].

    Each method is one module of `trl_rlvr_ext/grpo/methods/` implementing the protocol `GRPOMethod`
    (`trl_rlvr_ext.grpo.method`): NSR, ACPO and the off-policy diagnostics (`clip_objective`), DelTA (`delta`), RSI-S
    (`rsi`), POPO, POISE, curation (SELF, pass rate), dynamic sampling, RELEX recording, the signal check and the reward
    guard; a user's method is written and registered the same way (`register_method`, docs/tutorials/own_method.md).
    The trainer builds the active methods once (`self.methods`, in the registry's declared order) and overrides each
    TRL hook once, calling the methods that act there in that order; which pairs compose is the table in
    `trl_rlvr_ext.grpo.composition` (docs/reference/composition.md). LoRA initialisers (`lora_init`, with a
    `peft_config`) build the PeftModel before TRL's construction, with TRL's reference kept equal to the original model.

    With no method active (every option at its default) each override delegates to TRL unchanged, so the trainer is
    stock `GRPOTrainer` to the bit (tests/test_grpo_trainer.py). The constructor is `GRPOTrainer`'s; `args` is an
    [`RLVRGRPOConfig`] (a plain `trl.GRPOConfig` runs as stock TRL, with this package's options off).

    The one mechanism for checkpoint state (`CheckpointStateMixin`, grpo/checkpoint_state.py) saves and restores what
    the methods declare (`GRPOMethod.checkpoint_states`).
    """

    _tag_names: ClassVar[list[str]] = ["trl", "grpo", "trl-rlvr-ext"]
    _hooks: ClassVar[dict] = dict.fromkeys(HOOKS, ())  # until `_build_methods`: no method, stock TRL

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
        # The methods' reward wrappers, before TRL's construction: the reward guard (bounded verifier time, errors that
        # name the reward, row and completion; a well-behaved reward's output passes through untouched)
        for method in active_methods(args):
            if "reward_funcs" in method.acts_on():
                reward_funcs = method.reward_funcs(reward_funcs, args)
        # vllm_sync="adapter", colocated on CPU: the engine is built with LoRA on (grpo/vllm_lora.py)
        lora_engine_kwargs = colocate_lora_engine_kwargs(args, model, kwargs.get("peft_config"))
        with vllm_build_patches(args, lora_engine_kwargs):  # vllm_engine_kwargs; server on CPU: no NCCL group
            super().__init__(model, reward_funcs, args=args, **kwargs)
        # vLLM on CPU: weights reach the engine through vLLM's reload path; elsewhere TRL's own sync stays
        self._vllm_cpu_sync = install_cpu_weight_sync(self)
        # server mode on CPU: the server's sampling state in checkpoints; a checkpoint, then a clear error, if it dies
        self._vllm_server_guard = install_server_guard(self, self._vllm_cpu_sync)
        self.signal_check_warnings: list[str] = []  # the signal check's warnings (the CLI repeats them at the end)
        self._build_methods()  # the active methods, in the registry's order (grpo/methods/__init__.py)

    # ---------------------------------------------------------------- the methods, composed by the registry's order
    def _build_methods(self) -> None:
        """Build the active methods once (`trl_rlvr_ext.grpo.method`), set them up, register their checkpoint state,
        and index them by hook: each TRL hook below loops over the methods that override it, in the registry's order."""
        self.methods = [cls() for cls in active_methods(self.args)]
        for method in self.methods:
            method.setup(self)
            for state in method.checkpoint_states():
                self._register_checkpoint_state(state)
        self._hooks = {hook: [m for m in self.methods if hook in type(m).acts_on()] for hook in HOOKS}
        if any(
            self._hooks[hook] for hook in ("on_train_begin", "on_pre_optimizer_step", "on_step_end", "on_train_end")
        ):
            self.add_callback(_MethodsCallback(self._hooks))

    def method(self, name: str) -> GRPOMethod:
        """The active method called ``name`` (KeyError naming the active ones when it is not active)."""
        for method in self.methods:
            if method.name == name:
                return method
        raise KeyError(f"no active method {name!r}; active: {[m.name for m in self.methods]}")

    def _chain(self, hook: str, last):
        """``last`` (TRL's own) wrapped by the methods' ``hook``, the first method outermost."""
        call = last
        for method in reversed(self._hooks[hook]):
            call = functools.partial(getattr(method, hook), call)
        return call

    def _get_train_sampler(self, dataset=None):
        for method in self._hooks["sampler"]:  # one at most (the composition check)
            return method.sampler(self.train_dataset if dataset is None else dataset)
        return super()._get_train_sampler(dataset)

    def extra_sampler(self, dataset):
        """A second sampler of the training sampler's kind, for a method that draws extra prompts (dynamic sampling):
        the sampler method's (``training=False``), or None with TRL's own sampler (then the method draws its own)."""
        for method in self._hooks["sampler"]:
            return method.sampler(dataset, training=False)
        return None

    def _generate_and_score_completions(self, inputs):
        output = self._chain("generate_and_score", super()._generate_and_score_completions)(inputs)
        for method in reversed(self._hooks["scored_batch"]):  # from the inside out (see grpo/methods/__init__.py)
            method.scored_batch(output)
        return output

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        call = self._chain("generate_single_turn", super()._generate_single_turn)
        return call(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        for method in reversed(self._hooks["rewards"]):  # gathered over processes: the same on every rank
            rewards_per_func = method.rewards(rewards_per_func, inputs, completions)
        return rewards_per_func

    def _prepare_inputs(self, generation_batch):
        buffered = getattr(self, "_buffered_inputs", None)
        inputs = super()._prepare_inputs(generation_batch)
        new_batches = getattr(self, "_buffered_inputs", None)
        if new_batches is not buffered and self.model.training:  # TRL buffered the micro-batches of a new batch
            for method in self._hooks["new_micro_batches"]:
                method.new_micro_batches(new_batches)
        return inputs

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        return self._chain("micro_batch_loss", super().compute_loss)(model, inputs, return_outputs, num_items_in_batch)

    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        for method in self._hooks["optimizer"]:
            method.optimizer(optimizer)
        return optimizer

    def _compute_loss(self, model, inputs):
        for method in self._hooks["compute_loss"]:  # one at most (the composition check)
            return method.compute_loss(model, inputs)
        if not any(self._hooks[hook] for hook in LOSS_COPY_HOOKS):
            return super()._compute_loss(model, inputs)
        # TRL's `_compute_loss` for the installed TRL, with the methods' loss hooks in its marked blocks (trl_rlvr_ext/_trl/)
        return _TRL_COPY._compute_loss(self, model, inputs)

    # The four calls of the marked blocks in the copy of TRL's `_compute_loss` (their names are the copy's)
    def _rsi_selection_mask(self, per_token_logps, entropies, mask, entropy_mask, inputs):
        for method in self._hooks["token_mask"]:
            entropy_mask = method.token_mask(per_token_logps, entropies, mask, entropy_mask, inputs)
        return entropy_mask

    def _acpo_clamp_log_ratio(self, log_ratio):
        for method in self._hooks["log_ratio"]:
            log_ratio = method.log_ratio(log_ratio)
        return log_ratio

    def _clip_objective_loss(self, ratio, advantages, per_token_logps, mask, inputs):
        """The per-token loss of PPO's clipped objective, computed before TRL's own `-min(r·A, clip(r)·A)` and put in
        its place (computed there, so that autograd sums the gradients in the same order as TRL): the methods'
        advantages transforms (DelTA), then a method's clipped objective (NSR, ACPO), else PPO's with TRL's clip."""
        for method in self._hooks["advantages"]:
            advantages = method.advantages(advantages, inputs)
        for method in self._hooks["clip_objective"]:  # one at most (the composition check)
            return method.clip_objective(ratio, advantages, per_token_logps, mask, inputs)
        surrogate, low, high = ppo_clipped_objective(
            ratio, advantages, self.epsilon_low, self.epsilon_high, delta=self.args.delta
        )
        return -surrogate, {"masks": {"clipped_low": low, "clipped_high": high}, "acpo": None, "diagnostics": None}

    def _log_clip_objective(self, mode: str, clip_state: dict, mask, global_masked_mean) -> None:
        for method in self._hooks["log_loss"]:
            method.log_loss(mode, clip_state, mask, global_masked_mean)


class _MethodsCallback(TrainerCallback):
    """The methods' step hooks, in the registry's order (one callback for all of them)."""

    def __init__(self, hooks: dict):
        self.hooks = hooks

    def on_train_begin(self, args, state, control, **kwargs):
        for method in self.hooks["on_train_begin"]:
            method.on_train_begin(state)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        for method in self.hooks["on_pre_optimizer_step"]:
            method.on_pre_optimizer_step(state)

    def on_step_end(self, args, state, control, **kwargs):
        for method in self.hooks["on_step_end"]:
            method.on_step_end(state)

    def on_train_end(self, args, state, control, **kwargs):
        for method in self.hooks["on_train_end"]:
            method.on_train_end(state)
