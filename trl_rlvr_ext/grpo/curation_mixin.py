"""`CurationMixin`: the adapter that drives a `CurationController` from `GRPOTrainer`'s loop (SELF, pass-rate).

Mix it in before `GRPOTrainer` (``class RLVRGRPOTrainer(CurationMixin, GRPOTrainer)``). Every override calls
``super()`` unchanged when ``args.curation == "none"``, so stock behaviour is untouched. What curation decides (ids,
statistics, sampler, keep mask, skipped steps, metrics, checkpoint state) is trainer-free code in
`trl_rlvr_ext.curation.controller`, and the greedy check's two strategies are in `trl_rlvr_ext.curation.greedy`; this
file only connects them to TRL's hooks:

- `_get_train_sampler`: the controller's `CurationSampler` (`RepeatSampler`'s batch structure).
- `_generate_and_score_completions`: opens the controller's record of the batch (gathered prompt rows) and starts
  SELF's greedy check; afterwards logs the batch's metrics and, for SELF, adds the keep mask and the kept-token
  normaliser (dapo, cispo, vespo) to the output.
- `_generate_single_turn`: the fused greedy check adds its rows to the sampling call.
- `_calculate_rewards`: rewards arrive gathered across ranks here, so every rank records the same data; SELF's dropped
  prompts get NaN rewards, which TRL's advantage code already excludes from group and batch statistics.
- `_prepare_inputs`: counts the kept rows of every optimizer window (sequence-averaged losses).
- `compute_loss`: TRL's loss on the kept rows (padded to a common count across processes), rescaled for the
  sequence-averaged losses so every kept sequence of the window weighs 1/K.
- an internal callback: the SELF pre-pass at train start, and before each optimizer step the controller's window
  decision: an empty window has every gradient set to ``None``, so the optimizer leaves parameters and state alone.
- the controller's state travels in ``curation_state.json`` through `CheckpointStateMixin`.
"""

import contextlib
import copy
import logging

import numpy as np
import torch
from accelerate.utils import gather_object
from transformers import TrainerCallback

from ..curation.controller import (
    GAUGE_METRICS,
    KEEP_KEY,
    ROW_COLUMN,
    WINDOW_ROWS_KEY,
    CurationController,
    resolve_reward_index,
    select_rows,
    sequence_scale,
    window_row_counts,
)
from ..curation.greedy import FusedGreedy, GreedyRows, SeparateGreedy, grade_sharded
from ..sampling import call_reward_func, decode_completions, is_conversational_prompt
from .checkpoint_state import CheckpointState, CheckpointStateMixin
from .grpo_config import SELF_SEQUENCE_AVERAGED_LOSS_TYPES
from .inputs import curation_id_column_message


logger = logging.getLogger(__name__)

CURATION_STATE_NAME = "curation_state.json"
__all__ = ["CURATION_STATE_NAME", "CurationMixin", "GreedyRows", "select_rows"]  # GreedyRows, select_rows: old home

_SEPARATE, _FUSED = SeparateGreedy(), FusedGreedy()


class _CurationCallback(TrainerCallback):
    """Hooks the trainer has no method for: the greedy pre-pass at train start and the skip of empty steps."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        self.trainer._curation_on_train_begin()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.trainer._curation_before_optimizer_step()


class _TrainerGreedyHost:
    """The trainer as seen by the greedy strategies (`trl_rlvr_ext.curation.greedy.GreedyHost`)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.process_index = trainer.accelerator.process_index
        self.num_processes = trainer.accelerator.num_processes

    def gather(self, items):
        return gather_object(items)

    def decode_and_grade(self, examples):
        return self.trainer._curation_greedy_grade(examples)

    def grade(self, examples, completion_ids):
        return self.trainer._curation_grade(examples, completion_ids)


class CurationMixin(CheckpointStateMixin):
    """Online curation for `GRPOTrainer` subclasses, configured by the ``curation*`` fields of `RLVRGRPOConfig`."""

    _curation = None  # the `CurationController`; None while curation is off (stock behaviour)
    _curation_sequence_averaged = False  # SELF with grpo / sapo / dr_grpo / luspo: window-level normaliser

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if getattr(self.args, "curation", "none") != "none":
            self._curation_setup()

    # ------------------------------------------------------------------ set-up
    def _curation_setup(self):
        import datasets

        args = self.args
        if not isinstance(self.train_dataset, datasets.Dataset):
            raise TypeError(
                f"curation={args.curation!r} needs a map-style `datasets.Dataset` as train_dataset (its sampler picks "
                f"prompts by index), got {type(self.train_dataset).__name__}. Load the dataset without streaming."
            )
        if self.tools or self.rollout_func is not None or self.environment_factories is not None:
            raise ValueError(
                f"curation={args.curation!r} grades single-turn completions; it does not support tools, rollout_func "
                "or environment_factory. Set curation='none' for agentic training."
            )
        names = list(self.reward_func_names)
        self._curation_reward_index = resolve_reward_index(args.curation, names, args.curation_reward_func)
        if isinstance(self.reward_funcs[self._curation_reward_index], torch.nn.Module):
            raise TypeError(
                f"curation_reward_func={names[self._curation_reward_index]!r} is a reward model; curation needs a "
                "verifiable correctness function (a callable)."
            )
        controller = CurationController.from_config(args)
        dataset, id_column = self.train_dataset, args.curation_id_column
        if id_column is None:
            if ROW_COLUMN in dataset.column_names:
                raise ValueError(
                    f"The training set already has a {ROW_COLUMN!r} column, which curation reserves for row indices. "
                    f"Rename it, or pass it as curation_id_column={ROW_COLUMN!r} if it holds unique prompt ids."
                )
            id_column, ids = ROW_COLUMN, list(range(len(dataset)))
            self.train_dataset = dataset.add_column(ROW_COLUMN, ids)
        elif id_column not in dataset.column_names:
            raise ValueError(curation_id_column_message(id_column, dataset.column_names))
        else:
            ids = list(dataset[id_column])
        controller.setup(ids, id_column)
        self._curation = controller
        self._curation_greedy_host = _TrainerGreedyHost(self)
        self._curation_sequence_averaged = controller.mode == "self" and self.loss_type in (
            SELF_SEQUENCE_AVERAGED_LOSS_TYPES
        )
        self._curation_check_loss_terms()
        self.add_callback(_CurationCallback(self))
        self._register_checkpoint_state(
            CheckpointState(
                CURATION_STATE_NAME,
                controller.state_dict,
                lambda payload, path: controller.load_state_dict(payload, source=path),
                missing=f"it was saved by a run without curation={controller.mode!r}. Resume with the curation "
                "setting of the run that saved it.",
            )
        )
        if self.is_deepspeed_enabled and controller.mode == "self" and not args.curation_self_allow_zero_grad_steps:
            # Refused, not warned: the run would silently differ from the same run without DeepSpeed.
            raise ValueError(
                "curation='self' under DeepSpeed: DeepSpeed steps its optimizer inside backward, so an optimizer step "
                "whose window kept no prompt cannot be skipped: it would run with zero gradients, and momentum and "
                "weight decay would still move the parameters (without DeepSpeed such a step leaves parameters and "
                "optimizer state untouched). Set curation_self_allow_zero_grad_steps=True to accept that, or use "
                "FSDP2 / DDP."
            )

    def _curation_check_loss_terms(self):
        """The window rescaling of the sequence-averaged losses multiplies TRL's whole micro-batch loss, so it must
        hold only the policy term (the config refuses the entropy bonus; the router aux loss depends on the model)."""
        if self._curation_sequence_averaged and self.aux_loss_enabled:
            raise ValueError(
                f"curation='self' with loss_type={self.loss_type!r} rescales each micro-batch's loss so that every kept "
                "sequence weighs 1/K; that factor would rescale the router auxiliary loss of this MoE model too. Set "
                "router_aux_loss_coef=0.0, or use loss_type='dapo'."
            )

    @property
    def _curation_state(self):
        return self._curation.state

    @property
    def _curation_sampler(self):
        return self._curation.sampler

    def _curation_log(self, metrics: dict[str, float]) -> None:
        logged = self._metrics["train"]
        for name, value in metrics.items():
            if name in GAUGE_METRICS:
                logged[name] = [value]
            else:
                logged[name].append(value)

    # ------------------------------------------------------------------ sampler
    def _get_train_sampler(self, dataset=None):
        if self._curation is None:
            return super()._get_train_sampler(dataset)
        return self._curation_make_sampler(self.train_dataset if dataset is None else dataset)

    def _curation_make_sampler(self, dataset, training: bool = True):
        """A curation sampler with the training batch structure (``training=False``: an extra stream of that kind)."""
        return self._curation.make_sampler(
            len(dataset),
            mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            training=training,
        )

    # ------------------------------------------------------------------ greedy check (SELF)
    @contextlib.contextmanager
    def _curation_greedy_generation(self):
        """Make the trainer's own generation path decode greedily (transformers `generate` or vLLM)."""
        max_tokens = self.args.curation_self_greedy_max_tokens or self.max_completion_length
        if self.use_vllm:
            engine = self.vllm_generation
            saved = (engine.temperature, engine.top_p, engine.min_p, engine.max_completion_length)
            engine.temperature, engine.top_p, engine.min_p, engine.max_completion_length = 0.0, 1.0, None, max_tokens
            try:
                yield
            finally:
                engine.temperature, engine.top_p, engine.min_p, engine.max_completion_length = saved
            return
        saved = (self.generation_config, self.generation_kwargs)
        greedy = copy.deepcopy(self.generation_config)
        greedy.do_sample = False
        greedy.temperature = greedy.top_p = greedy.top_k = greedy.min_p = None
        greedy.max_new_tokens = max_tokens
        overrides = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None, "min_p": None}
        self.generation_config = greedy
        self.generation_kwargs = {**(self.generation_kwargs or {}), **overrides, "max_new_tokens": max_tokens}
        try:
            yield
        finally:
            self.generation_config, self.generation_kwargs = saved

    def _curation_greedy_grade(self, examples: list[dict]) -> list[bool]:
        """Greedy answer of each example (a separate `generate` / vLLM call), graded for correctness."""
        prompt_ids, _, multimodal_fields = self._tokenize_prompts([x["prompt"] for x in examples])
        with self._curation_greedy_generation():
            completion_ids, _ = self._generate_single_turn(prompt_ids, None, multimodal_fields, 1)
        return self._curation_grade(examples, completion_ids)

    def _curation_grade(self, examples: list[dict], completion_ids: list[list[int]]) -> list[bool]:
        """Whether each completion (token ids) answers its example correctly, by the correctness reward function."""
        prompts = [x["prompt"] for x in examples]
        completions = decode_completions(self.processing_class, completion_ids, is_conversational_prompt(prompts[0]))
        columns = {
            k: [x[k] for x in examples] for k in examples[0] if k not in ("prompt", "completion", "completion_ids")
        }
        rewards = call_reward_func(
            self.reward_funcs[self._curation_reward_index],
            prompts,
            completions,
            completion_ids,
            columns,
            trainer_state=self.state,
        )
        return (np.nan_to_num(rewards, nan=-np.inf) >= self.args.curation_correct_threshold).tolist()

    def _curation_greedy_strategy(self):
        """Fused into the sampling call when that call is transformers' `generate` with the sampling length."""
        args = self.args
        fusable = (
            args.curation_self_fused_greedy
            and not self.use_vllm
            and not self.use_transformers_continuous_batching
            and args.curation_self_greedy_max_tokens in (None, self.max_completion_length)
        )
        return _FUSED if fusable else _SEPARATE

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        request = None if self._curation is None else self._curation.take_fused_request()
        if request is None:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        greedy_ids, _, _ = self._tokenize_prompts([x["prompt"] for x in request.examples])
        target = self.accelerator.unwrap_model(self.model_wrapped)  # what TRL's generation context yields
        with FusedGreedy.extend_sampling_call(target, len(prompt_ids), len(greedy_ids)):
            completion_ids, logprobs = super()._generate_single_turn(
                list(prompt_ids) + list(greedy_ids), images, multimodal_fields, num_generations, has_tool_images
            )
        return FusedGreedy.split(request, completion_ids, logprobs, len(prompt_ids))

    def _curation_on_train_begin(self):
        controller = self._curation
        if not controller.needs_prepass(self.args.curation_self_prepass):
            return
        from tqdm.auto import tqdm

        dataset = self.train_dataset
        chunks = controller.prepass_chunks(max(1, self.args.generation_batch_size // self.num_generations))
        for rows in tqdm(chunks, desc="SELF greedy pre-pass", disable=not self.accelerator.is_main_process):
            result = grade_sharded(self._curation_greedy_host, rows, {r: dataset[r] for r in rows})
            controller.record_prepass(result, self.state.global_step)
        metrics = controller.finish_prepass()
        self._curation_log(metrics)
        if self.accelerator.is_main_process:
            logger.info(
                f"SELF pre-pass: {metrics['curation/prepass_solved_frac']:.1%} of the training prompts are "
                "solved greedily."
            )

    # ------------------------------------------------------------------ scoring
    def _generate_and_score_completions(self, inputs):
        if self._curation is None or not self.model.training:
            return super()._generate_and_score_completions(inputs)
        batch = self._curation_begin_batch(inputs)
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._curation.close_batch()
        self._curation_log(self._curation.batch_metrics(batch))
        return output if batch.keep is None else self._curation_add_keep_mask(output, batch.keep, len(inputs))

    def _curation_begin_batch(self, inputs: list[dict]):
        """Open the controller's record of this generation batch and start SELF's greedy check on it."""
        if "image" in inputs[0] or "images" in inputs[0]:
            raise ValueError("Curation does not support multimodal prompts; set curation='none'.")
        controller = self._curation
        rows = [controller.row(x) for x in inputs]
        batch = controller.begin_batch(gather_object(rows), self.state.global_step)  # global batch, `gather` order
        if controller.mode == "self":
            try:
                batch.greedy_strategy = self._curation_greedy_strategy()
                batch.greedy_strategy.begin(self._curation_greedy_host, batch, rows, inputs)
            except BaseException:
                controller.close_batch()
                raise
        return batch

    def _curation_add_keep_mask(self, output: dict, keep, num_local: int) -> dict:
        """This process's rows of SELF's keep mask, and GRPO's token normaliser (dapo / cispo / vespo) over the kept
        completions of the whole generation batch."""
        rank = self.accelerator.process_index
        local_keep = torch.as_tensor(keep[rank * num_local : (rank + 1) * num_local], device=self.accelerator.device)
        output[KEEP_KEY] = local_keep
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        output["num_items_in_batch"] = self.accelerator.gather((mask * local_keep.unsqueeze(1)).sum()).sum()
        return output

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        batch = None if self._curation is None else self._curation.batch
        if batch is None:  # curation off, or evaluation
            return rewards_per_func
        if self._curation.mode == "self":
            self._curation.record_greedy(batch.greedy_strategy.results(self._curation_greedy_host, batch))
        keep = self._curation.record_rewards(rewards_per_func[:, self._curation_reward_index].double().cpu().numpy())
        if keep is None:
            return rewards_per_func
        # NaN rewards are TRL's "unscorable" rows: left out of the group mean/std and of the batch std, and given a zero
        # advantage, so the kept prompts' advantages equal those of GRPO run on the kept prompts alone.
        dropped = torch.as_tensor(~keep, device=rewards_per_func.device)
        return rewards_per_func.masked_fill(dropped.unsqueeze(1), float("nan"))

    # ------------------------------------------------------------------ loss and optimizer step
    def _prepare_inputs(self, generation_batch):
        buffered = getattr(self, "_buffered_inputs", None)
        inputs = super()._prepare_inputs(generation_batch)
        new_batches = getattr(self, "_buffered_inputs", None)
        if self._curation_sequence_averaged and self.model.training and new_batches is not buffered:
            self._curation_count_window_rows(new_batches)
        return inputs

    def _curation_count_window_rows(self, micro_batches: list[dict]) -> None:
        """Give each micro-batch of a new generation batch the kept rows of its optimizer window, all processes."""
        counts = torch.tensor([int(batch[KEEP_KEY].sum()) for batch in micro_batches], device=self.accelerator.device)
        counts = self.accelerator.gather(counts).view(-1, len(micro_batches)).sum(0).tolist()
        for batch, window_rows in zip(micro_batches, window_row_counts(counts, self.args.gradient_accumulation_steps)):
            batch[WINDOW_ROWS_KEY] = window_rows

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self._curation is None or KEEP_KEY not in inputs:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        inputs, factor = self._curation_kept_micro_batch(inputs)
        with self._curation_metrics_discarded(factor == 0.0):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        return loss if factor == 1.0 else loss * factor

    def _curation_kept_micro_batch(self, inputs: dict) -> tuple[dict, float]:
        """The kept rows of a micro-batch, padded to the common count of the processes, and the factor of its loss:
        0 when no process kept a row, the window factor for the sequence-averaged losses, else 1."""
        keep = inputs[KEEP_KEY]
        window_rows = inputs.get(WINDOW_ROWS_KEY)
        inputs = {k: v for k, v in inputs.items() if k not in (KEEP_KEY, WINDOW_ROWS_KEY)}
        index = keep.nonzero(as_tuple=True)[0]
        num_kept = index.numel()
        # TRL's loss gathers per-sequence metrics across ranks, which needs equal row counts: pad every rank's kept
        # rows to the largest count of this micro-step with rows that carry no loss (zero mask and advantage).
        target = num_kept
        if self.accelerator.num_processes > 1:
            target = int(self.accelerator.gather(torch.tensor([num_kept], device=keep.device)).max())
        # Per micro-batch, not per generation batch: with steps_per_generation > gradient_accumulation_steps a
        # generation batch that kept rows can still leave a whole optimizer window empty.
        self._curation.record_micro_batch(target)
        if target == 0:
            # No rank kept a row: still run forward and backward on one loss-free row (DDP all-reduces gradients
            # from every rank), with a zero factor.
            return select_rows(inputs, index, num_padding=1), 0.0
        factor = 1.0
        if self._curation_sequence_averaged and self.model.training:
            factor = sequence_scale(
                target, self.current_gradient_accumulation_steps, self.accelerator.num_processes, window_rows
            )
        if num_kept == keep.numel() and target == num_kept:
            return inputs, factor
        return select_rows(inputs, index, num_padding=target - num_kept), factor

    @contextlib.contextmanager
    def _curation_metrics_discarded(self, discard: bool):
        """Drop the metrics TRL's loss logs inside the block (those of a micro-batch that kept no row)."""
        metrics = self._metrics["train"]
        lengths = {key: len(values) for key, values in metrics.items()}
        yield
        if discard:
            for key in list(metrics):
                if key not in lengths:
                    del metrics[key]
                else:
                    del metrics[key][lengths[key] :]

    def _curation_before_optimizer_step(self):
        if self._curation.mode != "self":
            return
        skipped = self._curation.end_window()
        if skipped:
            # Every gradient None: torch optimizers leave such parameters and their state alone (no momentum, no
            # weight decay, no step count). The trainer still advances global_step and the LR scheduler: the step
            # counts windows of data, so max_steps, logging and checkpoints keep their meaning.
            self.optimizer.zero_grad(set_to_none=True)
            for param in self.model.parameters():
                param.grad = None
        self._curation_log(self._curation.window_metrics(skipped))
