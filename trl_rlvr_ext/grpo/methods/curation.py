"""Online curation (`curation="self"`, SELF https://huggingface.co/papers/2510.02230, or `"pass_rate"`): the method
that drives a `CurationController` from `GRPOTrainer`'s loop. What curation decides (ids,
statistics, sampler, keep mask, skipped steps, metrics, checkpoint state) is trainer-free code in
`trl_rlvr_ext.curation.controller`, and the greedy check's two strategies are in `trl_rlvr_ext.curation.greedy`; this
module only connects them to the trainer's hooks:

- `sampler`: the controller's `CurationSampler` (`RepeatSampler`'s batch structure).
- `generate_and_score`: opens the controller's record of the batch (gathered prompt rows) and starts
  SELF's greedy check; afterwards logs the batch's metrics and, for SELF, adds the keep mask and the kept-token
  normaliser (dapo, cispo, vespo) to the output.
- `generate_single_turn`: the fused greedy check adds its rows to the sampling call.
- `rewards`: rewards arrive gathered across ranks here, so every rank records the same data; SELF's dropped
  prompts get NaN rewards, which TRL's advantage code already excludes from group and batch statistics.
- `new_micro_batches`: counts the kept rows of every optimizer window (sequence-averaged losses).
- `micro_batch_loss`: TRL's loss on the kept rows (padded to a common count across processes), rescaled for the
  sequence-averaged losses so every kept sequence of the window weighs 1/K.
- `on_train_begin`: the SELF pre-pass; `on_pre_optimizer_step`: the controller's window
  decision: an empty window has every gradient set to ``None``, so the optimizer leaves parameters and state alone.
- the controller's state travels in ``curation_state.json`` through the trainer's checkpoint mechanism.
"""

import contextlib
import copy
import logging
from typing import ClassVar

import numpy as np
import torch
from accelerate.utils import gather_object

from ...curation.controller import (
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
from ...curation.greedy import FusedGreedy, SeparateGreedy, grade_sharded
from ...sampling import call_reward_func, decode_completions, is_conversational_prompt
from ..checkpoint_state import CheckpointState
from ..inputs import curation_id_column_message
from ..method import GRPOMethod
from .curation_config import (  # noqa: F401  (CURATION_MODES and the loss-type lists: imported from here too)
    CURATION_MODES,
    SELF_SEQUENCE_AVERAGED_LOSS_TYPES,
    SELF_TOKEN_NORMALISED_LOSS_TYPES,
    CurationArguments,
    check_curation_config,
)


logger = logging.getLogger(__name__)

CURATION_STATE_NAME = "curation_state.json"
_SEPARATE, _FUSED = SeparateGreedy(), FusedGreedy()


class _GreedyHost:
    """The trainer as seen by the greedy strategies (`trl_rlvr_ext.curation.greedy.GreedyHost`)."""

    def __init__(self, method):
        self.method = method
        self.process_index = method.trainer.accelerator.process_index
        self.num_processes = method.trainer.accelerator.num_processes

    def gather(self, items):
        return gather_object(items)

    def decode_and_grade(self, examples):
        return self.method.greedy_grade(examples)

    def grade(self, examples, completion_ids):
        return self.method.grade(examples, completion_ids)


class Curation(GRPOMethod):
    name = "curation"
    Args = CurationArguments
    switches: ClassVar[dict] = {"curation": "none"}
    paper = "[SELF](https://huggingface.co/papers/2510.02230)"

    @classmethod
    def check(cls, args) -> None:
        check_curation_config(args)

    # ------------------------------------------------------------------ set-up
    def setup(self, trainer) -> None:
        import datasets

        super().setup(trainer)
        args = self.args
        if not isinstance(self.trainer.train_dataset, datasets.Dataset):
            raise TypeError(
                f"curation={args.curation!r} needs a map-style `datasets.Dataset` as train_dataset (its sampler picks "
                f"prompts by index), got {type(self.trainer.train_dataset).__name__}. Load the dataset without streaming."
            )
        if (
            self.trainer.tools
            or self.trainer.rollout_func is not None
            or self.trainer.environment_factories is not None
        ):
            raise ValueError(
                f"curation={args.curation!r} grades single-turn completions; it does not support tools, rollout_func "
                "or environment_factory. Set curation='none' for agentic training."
            )
        names = list(self.trainer.reward_func_names)
        self.reward_index = resolve_reward_index(args.curation, names, args.curation_reward_func)
        if isinstance(self.trainer.reward_funcs[self.reward_index], torch.nn.Module):
            raise TypeError(
                f"curation_reward_func={names[self.reward_index]!r} is a reward model; curation needs a "
                "verifiable correctness function (a callable)."
            )
        controller = CurationController.from_config(args)
        dataset, id_column = self.trainer.train_dataset, args.curation_id_column
        if id_column is None:
            if ROW_COLUMN in dataset.column_names:
                raise ValueError(
                    f"The training set already has a {ROW_COLUMN!r} column, which curation reserves for row indices. "
                    f"Rename it, or pass it as curation_id_column={ROW_COLUMN!r} if it holds unique prompt ids."
                )
            id_column, ids = ROW_COLUMN, list(range(len(dataset)))
            self.trainer.train_dataset = dataset.add_column(ROW_COLUMN, ids)
        elif id_column not in dataset.column_names:
            raise ValueError(curation_id_column_message(id_column, dataset.column_names))
        else:
            ids = list(dataset[id_column])
        controller.setup(ids, id_column)
        self.controller = controller
        self.greedy_host = _GreedyHost(self)
        self.sequence_averaged = controller.mode == "self" and self.trainer.loss_type in (
            SELF_SEQUENCE_AVERAGED_LOSS_TYPES
        )
        self.check_loss_terms()
        if (
            self.trainer.is_deepspeed_enabled
            and controller.mode == "self"
            and not args.curation_self_allow_zero_grad_steps
        ):
            # Refused, not warned: the run would silently differ from the same run without DeepSpeed.
            raise ValueError(
                "curation='self' under DeepSpeed: DeepSpeed steps its optimizer inside backward, so an optimizer step "
                "whose window kept no prompt cannot be skipped: it would run with zero gradients, and momentum and "
                "weight decay would still move the parameters (without DeepSpeed such a step leaves parameters and "
                "optimizer state untouched). Set curation_self_allow_zero_grad_steps=True to accept that, or use "
                "FSDP2 / DDP."
            )

    def check_loss_terms(self):
        """The window rescaling of the sequence-averaged losses multiplies TRL's whole micro-batch loss, so it must
        hold only the policy term (the config refuses the entropy bonus; the router aux loss depends on the model)."""
        if self.sequence_averaged and self.trainer.aux_loss_enabled:
            raise ValueError(
                f"curation='self' with loss_type={self.trainer.loss_type!r} rescales each micro-batch's loss so that every kept "
                "sequence weighs 1/K; that factor would rescale the router auxiliary loss of this MoE model too. Set "
                "router_aux_loss_coef=0.0, or use loss_type='dapo'."
            )

    def checkpoint_states(self) -> list[CheckpointState]:
        controller = self.controller
        return [
            CheckpointState(
                CURATION_STATE_NAME,
                controller.state_dict,
                lambda payload, path: controller.load_state_dict(payload, source=path),
                missing=f"it was saved by a run without curation={controller.mode!r}. Resume with the curation "
                "setting of the run that saved it.",
            )
        ]

    @property
    def curation_state(self):
        return self.controller.state

    @property
    def training_sampler(self):
        return self.controller.sampler

    def _log(self, metrics: dict[str, float]) -> None:
        logged = self.metric_store("train")
        for name, value in metrics.items():
            if name in GAUGE_METRICS:
                logged[name] = [value]
            else:
                logged[name].append(value)

    # ------------------------------------------------------------------ sampler
    def sampler(self, dataset, training: bool = True):
        """A curation sampler with the training batch structure (``training=False``: an extra stream of that kind)."""
        return self.controller.make_sampler(
            len(dataset),
            mini_repeat_count=self.trainer.num_generations,
            batch_size=self.args.generation_batch_size // self.trainer.num_generations,
            repeat_count=self.trainer.num_iterations * self.args.steps_per_generation,
            shuffle=self.trainer.shuffle_dataset,
            training=training,
        )

    # ------------------------------------------------------------------ greedy check (SELF)
    @contextlib.contextmanager
    def greedy_generation(self):
        """Make the trainer's own generation path decode greedily (transformers `generate` or vLLM)."""
        max_tokens = self.args.curation_self_greedy_max_tokens or self.trainer.max_completion_length
        if self.trainer.use_vllm:
            engine = self.trainer.vllm_generation
            saved = (engine.temperature, engine.top_p, engine.min_p, engine.max_completion_length)
            engine.temperature, engine.top_p, engine.min_p, engine.max_completion_length = 0.0, 1.0, None, max_tokens
            try:
                yield
            finally:
                engine.temperature, engine.top_p, engine.min_p, engine.max_completion_length = saved
            return
        saved = (self.trainer.generation_config, self.trainer.generation_kwargs)
        greedy = copy.deepcopy(self.trainer.generation_config)
        greedy.do_sample = False
        greedy.temperature = greedy.top_p = greedy.top_k = greedy.min_p = None
        greedy.max_new_tokens = max_tokens
        overrides = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None, "min_p": None}
        self.trainer.generation_config = greedy
        self.trainer.generation_kwargs = {
            **(self.trainer.generation_kwargs or {}),
            **overrides,
            "max_new_tokens": max_tokens,
        }
        try:
            yield
        finally:
            self.trainer.generation_config, self.trainer.generation_kwargs = saved

    def greedy_grade(self, examples: list[dict]) -> list[bool]:
        """Greedy answer of each example (a separate `generate` / vLLM call), graded for correctness."""
        prompt_ids, _, multimodal_fields = self.trainer._tokenize_prompts([x["prompt"] for x in examples])
        with self.greedy_generation():
            completion_ids, _ = self.trainer._generate_single_turn(prompt_ids, None, multimodal_fields, 1)
        return self.grade(examples, completion_ids)

    def grade(self, examples: list[dict], completion_ids: list[list[int]]) -> list[bool]:
        """Whether each completion (token ids) answers its example correctly, by the correctness reward function."""
        prompts = [x["prompt"] for x in examples]
        completions = decode_completions(
            self.trainer.processing_class, completion_ids, is_conversational_prompt(prompts[0])
        )
        columns = {
            k: [x[k] for x in examples] for k in examples[0] if k not in ("prompt", "completion", "completion_ids")
        }
        rewards = call_reward_func(
            self.trainer.reward_funcs[self.reward_index],
            prompts,
            completions,
            completion_ids,
            columns,
            trainer_state=self.trainer.state,
        )
        return (np.nan_to_num(rewards, nan=-np.inf) >= self.args.curation_correct_threshold).tolist()

    def greedy_strategy(self):
        """Fused into the sampling call when that call is transformers' `generate` with the sampling length."""
        args = self.args
        fusable = (
            args.curation_self_fused_greedy
            and not self.trainer.use_vllm
            and not self.trainer.use_transformers_continuous_batching
            and args.curation_self_greedy_max_tokens in (None, self.trainer.max_completion_length)
        )
        return _FUSED if fusable else _SEPARATE

    def generate_single_turn(
        self, call, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False
    ):
        request = self.controller.take_fused_request()
        if request is None:
            return call(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        greedy_ids, _, _ = self.trainer._tokenize_prompts([x["prompt"] for x in request.examples])
        target = self.trainer.accelerator.unwrap_model(
            self.trainer.model_wrapped
        )  # what TRL's generation context yields
        with FusedGreedy.extend_sampling_call(target, len(prompt_ids), len(greedy_ids)):
            completion_ids, logprobs = call(
                list(prompt_ids) + list(greedy_ids), images, multimodal_fields, num_generations, has_tool_images
            )
        return FusedGreedy.split(request, completion_ids, logprobs, len(prompt_ids))

    def on_train_begin(self, state) -> None:
        controller = self.controller
        if not controller.needs_prepass(self.args.curation_self_prepass):
            return
        from tqdm.auto import tqdm

        dataset = self.trainer.train_dataset
        chunks = controller.prepass_chunks(max(1, self.args.generation_batch_size // self.trainer.num_generations))
        for rows in tqdm(chunks, desc="SELF greedy pre-pass", disable=not self.trainer.accelerator.is_main_process):
            result = grade_sharded(self.greedy_host, rows, {r: dataset[r] for r in rows})
            controller.record_prepass(result, self.trainer.state.global_step)
        metrics = controller.finish_prepass()
        self._log(metrics)
        if self.trainer.accelerator.is_main_process:
            logger.info(
                f"SELF pre-pass: {metrics['curation/prepass_solved_frac']:.1%} of the training prompts are "
                "solved greedily."
            )

    # ------------------------------------------------------------------ scoring
    def generate_and_score(self, call, inputs):
        if not self.trainer.model.training:
            return call(inputs)
        batch = self._begin_batch(inputs)
        try:
            output = call(inputs)
        finally:
            self.controller.close_batch()
        self._log(self.controller.batch_metrics(batch))
        return output if batch.keep is None else self._add_keep_mask(output, batch.keep, len(inputs))

    def _begin_batch(self, inputs: list[dict]):
        """Open the controller's record of this generation batch and start SELF's greedy check on it."""
        if "image" in inputs[0] or "images" in inputs[0]:
            raise ValueError("Curation does not support multimodal prompts; set curation='none'.")
        controller = self.controller
        rows = [controller.row(x) for x in inputs]
        batch = controller.begin_batch(
            gather_object(rows), self.trainer.state.global_step
        )  # global batch, `gather` order
        if controller.mode == "self":
            try:
                batch.greedy_strategy = self.greedy_strategy()
                batch.greedy_strategy.begin(self.greedy_host, batch, rows, inputs)
            except BaseException:
                controller.close_batch()
                raise
        return batch

    def _add_keep_mask(self, output: dict, keep, num_local: int) -> dict:
        """This process's rows of SELF's keep mask, and GRPO's token normaliser (dapo / cispo / vespo) over the kept
        completions of the whole generation batch."""
        rank = self.trainer.accelerator.process_index
        local_keep = torch.as_tensor(
            keep[rank * num_local : (rank + 1) * num_local], device=self.trainer.accelerator.device
        )
        output[KEEP_KEY] = local_keep
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        output["num_items_in_batch"] = self.trainer.accelerator.gather((mask * local_keep.unsqueeze(1)).sum()).sum()
        return output

    def rewards(self, rewards_per_func, inputs, completions):
        batch = self.controller.batch
        if batch is None:  # evaluation
            return rewards_per_func
        if self.controller.mode == "self":
            self.controller.record_greedy(batch.greedy_strategy.results(self.greedy_host, batch))
        keep = self.controller.record_rewards(rewards_per_func[:, self.reward_index].double().cpu().numpy())
        if keep is None:
            return rewards_per_func
        # NaN rewards are TRL's "unscorable" rows: left out of the group mean/std and of the batch std, and given a zero
        # advantage, so the kept prompts' advantages equal those of GRPO run on the kept prompts alone.
        dropped = torch.as_tensor(~keep, device=rewards_per_func.device)
        return rewards_per_func.masked_fill(dropped.unsqueeze(1), float("nan"))

    # ------------------------------------------------------------------ loss and optimizer step
    def new_micro_batches(self, micro_batches: list[dict]) -> None:
        if self.sequence_averaged:
            self.count_window_rows(micro_batches)

    def count_window_rows(self, micro_batches: list[dict]) -> None:
        """Give each micro-batch of a new generation batch the kept rows of its optimizer window, all processes."""
        counts = torch.tensor(
            [int(batch[KEEP_KEY].sum()) for batch in micro_batches], device=self.trainer.accelerator.device
        )
        counts = self.trainer.accelerator.gather(counts).view(-1, len(micro_batches)).sum(0).tolist()
        for batch, window_rows in zip(micro_batches, window_row_counts(counts, self.args.gradient_accumulation_steps)):
            batch[WINDOW_ROWS_KEY] = window_rows

    def micro_batch_loss(self, call, model, inputs, return_outputs, num_items_in_batch):
        if KEEP_KEY not in inputs:
            return call(model, inputs, return_outputs, num_items_in_batch)
        inputs, factor = self._kept_micro_batch(inputs)
        with self._metrics_discarded(factor == 0.0):
            loss = call(model, inputs, return_outputs, num_items_in_batch)
        return loss if factor == 1.0 else loss * factor

    def _kept_micro_batch(self, inputs: dict) -> tuple[dict, float]:
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
        if self.trainer.accelerator.num_processes > 1:
            target = int(self.trainer.accelerator.gather(torch.tensor([num_kept], device=keep.device)).max())
        # Per micro-batch, not per generation batch: with steps_per_generation > gradient_accumulation_steps a
        # generation batch that kept rows can still leave a whole optimizer window empty.
        self.controller.record_micro_batch(target)
        if target == 0:
            # No rank kept a row: still run forward and backward on one loss-free row (DDP all-reduces gradients
            # from every rank), with a zero factor.
            return select_rows(inputs, index, num_padding=1), 0.0
        factor = 1.0
        if self.sequence_averaged and self.trainer.model.training:
            factor = sequence_scale(
                target,
                self.trainer.current_gradient_accumulation_steps,
                self.trainer.accelerator.num_processes,
                window_rows,
            )
        if num_kept == keep.numel() and target == num_kept:
            return inputs, factor
        return select_rows(inputs, index, num_padding=target - num_kept), factor

    @contextlib.contextmanager
    def _metrics_discarded(self, discard: bool):
        """Drop the metrics TRL's loss logs inside the block (those of a micro-batch that kept no row)."""
        metrics = self.metric_store("train")
        lengths = {key: len(values) for key, values in metrics.items()}
        yield
        if discard:
            for key in list(metrics):
                if key not in lengths:
                    del metrics[key]
                else:
                    del metrics[key][lengths[key] :]

    def on_pre_optimizer_step(self, state) -> None:
        if self.controller.mode != "self":
            return
        skipped = self.controller.end_window()
        if skipped:
            # Every gradient None: torch optimizers leave such parameters and their state alone (no momentum, no
            # weight decay, no step count). The trainer still advances global_step and the LR scheduler: the step
            # counts windows of data, so max_steps, logging and checkpoints keep their meaning.
            self.trainer.optimizer.zero_grad(set_to_none=True)
            for param in self.trainer.model.parameters():
                param.grad = None
        self._log(self.controller.window_metrics(skipped))
