"""`CurationMixin`: online prompt curation for `GRPOTrainer` (SELF and pass-rate sampling).

Mix it in before `GRPOTrainer` (``class RLVRGRPOTrainer(CurationMixin, GRPOTrainer)``). Every override calls
``super()`` unchanged when ``args.curation == "none"``, so stock behaviour is untouched. The samplers, the per-prompt
statistics and their serialisation are trainer-free code in `trl_rlvr_ext.curation`; this file only wires them in:

- `_get_train_sampler`: a `CurationSampler` with `RepeatSampler`'s batch structure (whole groups, identical stream on
  every rank, fixed length).
- `_generate_and_score_completions`: for ``"self"``, a greedy pass over the batch's prompts with the current policy
  (through the trainer's own generation path, so vLLM when the trainer uses it), graded by the correctness reward
  function; prompts solved greedily are dropped from the loss.
- `_calculate_rewards`: rewards arrive gathered across ranks here, so the per-prompt statistics are updated from the
  same data on every rank; dropped prompts get NaN rewards, which TRL's advantage code already excludes from group and
  batch statistics, so the kept prompts' advantages are those of GRPO on the kept prompts alone.
- `_prepare_inputs`: once TRL has split a generation batch into micro-batches, count the kept rows of every
  optimizer window (all processes), for the sequence-averaged losses.
- `compute_loss`: the loss of a micro-batch is TRL's loss on its kept rows, with ``num_items_in_batch`` counting kept
  tokens only (dapo, cispo, vespo), or rescaled so that every kept sequence of the window weighs 1/K (grpo, sapo,
  dr_grpo, luspo): the normalisers of GRPO on the kept prompts alone.
- an internal callback: an optimizer window none of whose micro-batches kept a row (on any process) has every
  gradient set to ``None`` before the step, so the optimizer leaves the parameters and its own state untouched (no
  momentum, no weight decay, no step count). The trainer's ``global_step`` and the LR scheduler still advance.
  `compute_loss` records, per micro-batch, whether the window kept a row.
- `_save_checkpoint` / `_load_optimizer_and_scheduler`: ``curation_state.json`` holds the statistics and the sampler's
  RNG and position; a resumed run continues the same index stream.
"""

import contextlib
import copy
import json
import logging
import os

import numpy as np
import torch
from accelerate.utils import gather_object
from transformers import LogitsProcessor, LogitsProcessorList, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..curation.samplers import CurationSampler
from ..curation.state import CurationState
from ..evaluation.generation import call_reward_func, decode_completions, is_conversational_prompt
from .grpo_config import SELF_SEQUENCE_AVERAGED_LOSS_TYPES


logger = logging.getLogger(__name__)

CURATION_STATE_NAME = "curation_state.json"
ROW_COLUMN = "curation_row"  # added to the training set when no `curation_id_column` is given
KEEP_KEY = "curation_keep"  # per-row keep mask of a micro-batch (SELF)
WINDOW_ROWS_KEY = "curation_window_rows"  # kept rows of the micro-batch's optimizer window, all processes (SELF)


class _CurationCallback(TrainerCallback):
    """Hooks the trainer has no method for: the greedy pre-pass at train start and the skip of empty steps."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        self.trainer._curation_on_train_begin()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.trainer._curation_before_optimizer_step()


class GreedyRows(LogitsProcessor):
    """Make sampling pick the highest-scoring token in the rows where ``rows`` is True, so those rows decode greedily
    inside a sampling `generate` call. It runs after the sampling warpers (temperature, top-k, top-p, min-p), which all
    keep the top token, so the forced token is the model's argmax; the other rows are left untouched."""

    def __init__(self, rows: torch.Tensor):
        self.rows = rows

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        rows = self.rows.to(scores.device).unsqueeze(1)
        forced = torch.full_like(scores, float("-inf")).scatter(1, scores.argmax(dim=-1, keepdim=True), 0.0)
        return torch.where(rows, forced, scores)


def select_rows(inputs: dict, index: torch.Tensor, num_padding: int = 0) -> dict:
    """Rows ``index`` of a GRPO micro-batch (per-row tensors and lists; 0-dim values pass through), followed by
    ``num_padding`` copies of its first row that carry no loss: completion (and tool) mask and advantage zeroed."""
    batch_size = inputs["completion_mask"].size(0)
    if num_padding:
        source = index[:1] if index.numel() else torch.zeros(1, dtype=torch.long, device=index.device)
        index = torch.cat([index, source.repeat(num_padding)])
    out = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.ndim > 0 and value.size(0) == batch_size:
            out[key] = value[index]
        elif isinstance(value, list) and len(value) == batch_size:
            out[key] = [value[i] for i in index.tolist()]
        else:
            out[key] = value
    if num_padding:
        for key in ("completion_mask", "tool_mask", "advantages"):
            if key in out:
                out[key] = out[key].clone()
                out[key][-num_padding:] = 0
    return out


class CurationMixin:
    """Online curation for `GRPOTrainer` subclasses, configured by the ``curation*`` fields of `RLVRGRPOConfig`."""

    _curation_mode = "none"  # until __init__ has read the config: stock behaviour
    _curation_sequence_averaged = False  # SELF with grpo / sapo / dr_grpo / luspo: window-level normaliser
    _curation_batch = None
    _curation_fuse = None  # the SELF greedy rows to add to the next sampling `generate` call
    _curation_fused = None  # ... and their completions, once decoded

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._curation_mode = getattr(self.args, "curation", "none")
        if self._curation_mode != "none":
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
        if args.curation_reward_func is None:
            if len(names) != 1:
                raise ValueError(
                    f"curation={args.curation!r} needs the correctness signal, not the shaped total of {names}: set "
                    "curation_reward_func to the name of the reward function that grades correctness."
                )
            self._curation_reward_index = 0
        elif args.curation_reward_func in names:
            self._curation_reward_index = names.index(args.curation_reward_func)
        else:
            raise ValueError(
                f"curation_reward_func={args.curation_reward_func!r} is not one of the reward functions {names}."
            )
        if isinstance(self.reward_funcs[self._curation_reward_index], torch.nn.Module):
            raise TypeError(
                f"curation_reward_func={names[self._curation_reward_index]!r} is a reward model; curation needs a "
                "verifiable correctness function (a callable)."
            )

        dataset = self.train_dataset
        if args.curation_id_column is None:
            if ROW_COLUMN in dataset.column_names:
                raise ValueError(
                    f"The training set already has a {ROW_COLUMN!r} column, which curation reserves for row indices. "
                    f"Rename it, or pass it as curation_id_column={ROW_COLUMN!r} if it holds unique prompt ids."
                )
            ids = list(range(len(dataset)))
            self.train_dataset = dataset.add_column(ROW_COLUMN, ids)
            self._curation_id_column = ROW_COLUMN
        else:
            if args.curation_id_column not in dataset.column_names:
                raise ValueError(
                    f"curation_id_column={args.curation_id_column!r} is not a column of the training set "
                    f"({dataset.column_names})."
                )
            ids = list(dataset[args.curation_id_column])
            if len(set(ids)) != len(ids):
                raise ValueError(
                    f"The {args.curation_id_column!r} column must hold a unique id per prompt; it has "
                    f"{len(ids) - len(set(ids))} duplicates. Deduplicate the prompts or leave curation_id_column unset."
                )
            self._curation_id_column = args.curation_id_column
        self._curation_ids = ids
        self._curation_row_of_id = {id_: row for row, id_ in enumerate(ids)}
        self._curation_state = CurationState(
            len(ids),
            prior_alpha=args.curation_pass_rate_prior_alpha,
            prior_beta=args.curation_pass_rate_prior_beta,
            decay=args.curation_pass_rate_decay,
        )
        self._curation_sampler = None
        self._curation_pending_sampler_state = None
        self._curation_batch = None  # the current generation batch's rows / keep mask, while it is being scored
        self._curation_window_kept = False  # whether a micro-batch of the current optimizer window kept a row
        self._curation_sequence_averaged = self._curation_mode == "self" and self.loss_type in (
            SELF_SEQUENCE_AVERAGED_LOSS_TYPES
        )
        self._curation_check_loss_terms()
        self.add_callback(_CurationCallback(self))
        if self.is_deepspeed_enabled and self._curation_mode == "self":
            logger.warning(
                "curation='self' under DeepSpeed: DeepSpeed steps its optimizer inside backward, so an optimizer step "
                "whose window kept no prompt cannot be skipped: it runs with zero gradients, and momentum and weight "
                "decay still move the parameters. Without DeepSpeed such a step leaves parameters and optimizer state "
                "untouched."
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

    def _curation_row(self, example: dict) -> int:
        try:
            return self._curation_row_of_id[example[self._curation_id_column]]
        except KeyError as error:
            raise KeyError(
                f"A training example has no known {self._curation_id_column!r} id; curation needs the column to reach "
                "the trainer (remove_unused_columns=False) and the ids of the training set it was built with."
            ) from error

    # ------------------------------------------------------------------ sampler
    def _get_train_sampler(self, dataset=None):
        if self._curation_mode == "none":
            return super()._get_train_sampler(dataset)
        dataset = self.train_dataset if dataset is None else dataset
        if len(dataset) != self._curation_state.num_prompts:
            raise ValueError(
                f"The training set has {len(dataset)} rows but curation was set up for "
                f"{self._curation_state.num_prompts}; do not replace train_dataset after building the trainer."
            )
        args = self.args
        sampler = CurationSampler(
            len(dataset),
            self._curation_state,
            self._curation_mode,
            mini_repeat_count=self.num_generations,
            batch_size=args.generation_batch_size // self.num_generations,
            repeat_count=self.num_iterations * args.steps_per_generation,
            seed=args.curation_seed,
            shuffle=self.shuffle_dataset,
            recheck_steps=args.curation_self_recheck_steps,
            target=args.curation_pass_rate_target,
            floor=args.curation_pass_rate_floor,
        )
        if self._curation_pending_sampler_state is not None:
            sampler.load_state_dict(self._curation_pending_sampler_state)
            self._curation_pending_sampler_state = None
        self._curation_sampler = sampler
        return sampler

    # ------------------------------------------------------------------ greedy pass (SELF)
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

    def _curation_fusable(self) -> bool:
        """Whether the greedy answers can be decoded inside the sampling `generate` call."""
        args = self.args
        return (
            args.curation_self_fused_greedy
            and not self.use_vllm
            and not self.use_transformers_continuous_batching
            and args.curation_self_greedy_max_tokens in (None, self.max_completion_length)
        )

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        fuse = self._curation_fuse
        if fuse is None:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        self._curation_fuse = None
        # SELF, fused: one extra row per distinct local prompt, forced to decode greedily in the same call
        greedy_ids, _, _ = self._tokenize_prompts([x["prompt"] for x in fuse["examples"]])
        num_sampled = len(prompt_ids)
        rows = torch.tensor([False] * num_sampled + [True] * len(greedy_ids))
        target = self.accelerator.unwrap_model(self.model_wrapped)  # what TRL's generation context yields
        original = target.generate

        def generate(*args, **kwargs):
            processors = LogitsProcessorList([*(kwargs.pop("logits_processor", None) or []), GreedyRows(rows)])
            return original(*args, logits_processor=processors, **kwargs)

        target.generate = generate
        try:
            completion_ids, logprobs = super()._generate_single_turn(
                list(prompt_ids) + list(greedy_ids), images, multimodal_fields, num_generations, has_tool_images
            )
        finally:
            del target.generate
        fuse["completion_ids"] = completion_ids[num_sampled:]
        self._curation_fused = fuse
        return completion_ids[:num_sampled], None if logprobs is None else logprobs[:num_sampled]

    def _curation_greedy_sharded(self, rows: list[int], examples: dict[int, dict]) -> dict[int, bool]:
        """Grade ``rows`` (the same list on every rank) greedily, each rank one contiguous, equal-sized share (so
        every rank makes the same generation calls), and gather the results onto every rank."""
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        per_rank = -(-len(rows) // world)
        mine = rows[rank * per_rank : (rank + 1) * per_rank]
        padded = mine + [rows[-1]] * (per_rank - len(mine))
        correct = self._curation_greedy_grade([examples[r] for r in padded])
        return dict(gather_object([(int(r), bool(c)) for r, c in zip(mine, correct)]))

    def _curation_greedy_check(self, inputs: list[dict], rows: list[int]) -> dict[int, bool]:
        local = {}
        for row, example in zip(rows, inputs):
            local.setdefault(row, example)
        examples = {}
        for row, example in gather_object(list(local.items())):
            examples.setdefault(row, example)
        return self._curation_greedy_sharded(list(examples), examples)

    def _curation_on_train_begin(self):
        state = self._curation_state
        if self._curation_mode != "self" or not self.args.curation_self_prepass or state.prepass_done:
            return
        from tqdm.auto import tqdm

        dataset = self.train_dataset
        chunk = max(1, self.args.generation_batch_size // self.num_generations)
        starts = range(0, len(dataset), chunk)
        disable = not self.accelerator.is_main_process
        for start in tqdm(starts, desc="SELF greedy pre-pass", disable=disable):
            rows = list(range(start, min(start + chunk, len(dataset))))
            examples = {r: dataset[r] for r in rows}
            result = self._curation_greedy_sharded(rows, examples)
            state.update_greedy(list(result), list(result.values()), self.state.global_step)
        state.prepass_done = True
        solved = float((state.greedy_correct == 1).mean())
        self._metrics["train"]["curation/prepass_solved_frac"].append(solved)
        if self.accelerator.is_main_process:
            logger.info(f"SELF pre-pass: {solved:.1%} of the training prompts are solved greedily.")

    # ------------------------------------------------------------------ scoring
    def _generate_and_score_completions(self, inputs):
        if self._curation_mode == "none" or not self.model.training:
            return super()._generate_and_score_completions(inputs)
        if "image" in inputs[0] or "images" in inputs[0]:
            raise ValueError("Curation does not support multimodal prompts; set curation='none'.")
        state = self._curation_state
        state.step = self.state.global_step
        rows = [self._curation_row(x) for x in inputs]
        all_rows = np.asarray(gather_object(rows), dtype=np.int64)  # global batch, in the order of `gather`
        batch = {"rows": all_rows, "greedy": None}
        if self._curation_mode == "self":
            if self._curation_fusable():
                # greedy rows ride along in the sampling call (see _generate_single_turn), graded in _calculate_rewards
                local = {}
                for row, example in zip(rows, inputs):
                    local.setdefault(row, example)
                self._curation_fuse = {"rows": list(local), "examples": list(local.values())}
            else:
                batch["greedy"] = self._curation_greedy_check(inputs, rows)
        self._curation_batch = batch
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._curation_batch = self._curation_fuse = self._curation_fused = None

        metrics = self._metrics["train"]
        unique_rows = np.unique(all_rows)
        if not np.isnan(batch["sample_correct"]).all():
            metrics["curation/batch_pass_rate"].append(float(np.nanmean(batch["sample_correct"])))
        seen = state.seen()
        if seen.any():
            metrics["curation/mean_pass_rate"].append(float(state.pass_rate()[seen].mean()))
        if self._curation_mode != "self":
            metrics["curation/kept_prompts"].append(float(len(unique_rows)))
            return output
        solved = sum(batch["greedy"][int(r)] for r in unique_rows)
        metrics["curation/greedy_solved_frac"].append(solved / len(unique_rows))
        metrics["curation/kept_prompts"].append(float(len(unique_rows) - solved))
        metrics["curation/skipped_steps"] = [float(state.skipped_steps)]
        keep = batch["keep"]
        rank = self.accelerator.process_index
        local_keep = torch.as_tensor(
            keep[rank * len(inputs) : (rank + 1) * len(inputs)], device=self.accelerator.device
        )
        output[KEEP_KEY] = local_keep
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        kept_tokens = (mask * local_keep.unsqueeze(1)).sum()
        # GRPO's token normaliser (dapo / cispo / vespo) over the kept completions of the whole generation batch
        output["num_items_in_batch"] = self.accelerator.gather(kept_tokens).sum()
        return output

    def _prepare_inputs(self, generation_batch):
        buffered = getattr(self, "_buffered_inputs", None)
        inputs = super()._prepare_inputs(generation_batch)
        new_batches = getattr(self, "_buffered_inputs", None)
        if self._curation_sequence_averaged and self.model.training and new_batches is not buffered:
            self._curation_count_window_rows(new_batches)
        return inputs

    def _curation_count_window_rows(self, micro_batches: list[dict]) -> None:
        """Give each micro-batch of a new generation batch the number of kept rows in its optimizer window, summed
        over processes. Micro-batch m is used at micro-step m (mod steps_per_generation), and windows are runs of
        gradient_accumulation_steps micro-steps that start with the generation batch (the config requires
        steps_per_generation to be a multiple of gradient_accumulation_steps)."""
        counts = torch.tensor([int(batch[KEEP_KEY].sum()) for batch in micro_batches], device=self.accelerator.device)
        counts = self.accelerator.gather(counts).view(-1, len(micro_batches)).sum(0).tolist()
        window = self.args.gradient_accumulation_steps
        for m, batch in enumerate(micro_batches):
            start = m - m % window
            batch[WINDOW_ROWS_KEY] = int(sum(counts[start : start + window]))

    def _curation_fused_greedy(self) -> dict[int, bool]:
        """Grade the greedy rows decoded inside the sampling call, and gather them (the first rank's answer wins for
        a prompt whose group straddles two ranks), so every rank holds the same results."""
        fused = self._curation_fused
        if fused is None or "completion_ids" not in fused:
            raise RuntimeError("The fused greedy decode did not run; set curation_self_fused_greedy=False.")
        correct = self._curation_grade(fused["examples"], fused["completion_ids"])
        greedy = {}
        for row, c in gather_object([(int(r), bool(c)) for r, c in zip(fused["rows"], correct)]):
            greedy.setdefault(row, c)
        return greedy

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        batch = self._curation_batch
        if batch is None:  # curation off, or evaluation
            return rewards_per_func
        rows, state = batch["rows"], self._curation_state
        if len(rows) != rewards_per_func.size(0):
            raise RuntimeError(f"Gathered {rewards_per_func.size(0)} rewards for {len(rows)} curated rows.")
        rewards = rewards_per_func[:, self._curation_reward_index].double().cpu().numpy()
        correct = np.where(np.isnan(rewards), np.nan, (rewards >= self.args.curation_correct_threshold).astype(float))
        state.update_samples(rows, correct)
        batch["sample_correct"] = correct
        if self._curation_mode != "self":
            return rewards_per_func
        if batch["greedy"] is None:
            batch["greedy"] = self._curation_fused_greedy()
        greedy = batch["greedy"]
        state.update_greedy(list(greedy), list(greedy.values()), state.step)
        keep = np.array([not greedy[int(r)] for r in rows], dtype=bool)
        batch["keep"] = keep
        # NaN rewards are TRL's "unscorable" rows: left out of the group mean/std and of the batch std, and given a zero
        # advantage, so the kept prompts' advantages equal those of GRPO run on the kept prompts alone.
        dropped = torch.as_tensor(~keep, device=rewards_per_func.device)
        return rewards_per_func.masked_fill(dropped.unsqueeze(1), float("nan"))

    # ------------------------------------------------------------------ loss and optimizer step
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self._curation_mode == "none" or KEEP_KEY not in inputs:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
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
        # generation batch that kept rows can still leave a whole optimizer window empty. `target` is gathered, so
        # every process reaches the same decision in _curation_before_optimizer_step.
        self._curation_window_kept = self._curation_window_kept or target > 0
        if target == 0:
            # No rank kept a row: still run forward and backward on one loss-free row (DDP all-reduces gradients
            # from every rank), and discard its metrics.
            metrics = self._metrics["train"]
            lengths = {key: len(values) for key, values in metrics.items()}
            batch = select_rows(inputs, index, num_padding=1)
            loss = super().compute_loss(model, batch, return_outputs, num_items_in_batch) * 0.0
            for key in list(metrics):
                if key not in lengths:
                    del metrics[key]
                else:
                    del metrics[key][lengths[key] :]
            return loss
        scale = self._curation_sequence_scale(target, window_rows)
        if num_kept == keep.numel() and target == num_kept:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        else:
            batch = select_rows(inputs, index, num_padding=target - num_kept)
            loss = super().compute_loss(model, batch, return_outputs, num_items_in_batch)
        return loss if scale == 1.0 else loss * scale

    def _curation_sequence_scale(self, rows: int, window_rows: int | None) -> float:
        """Factor that turns TRL's sequence-averaged micro-batch loss into the kept-prompts-only loss.

        For grpo, sapo, dr_grpo and luspo TRL divides the micro-batch's sum of per-sequence terms by its row count
        ``rows`` (kept rows padded to the common count, see compute_loss) and by the accumulation steps GA; DDP then
        averages over the P processes. Multiplying by rows·GA·P/K, with K the kept rows of the whole optimizer window
        on all processes, makes every kept sequence weigh 1/K, as GRPO on the kept prompts alone. When nothing is
        dropped, K = rows·GA·P and the factor is exactly 1 (stock TRL, to the bit).
        """
        if not self._curation_sequence_averaged or not self.model.training:
            return 1.0
        if window_rows is None:
            raise RuntimeError(
                "curation='self' with a sequence-averaged loss needs the kept-row count of the optimizer window, set "
                "when TRL splits a generation batch (_prepare_inputs); this micro-batch did not come from there."
            )
        numerator = rows * self.current_gradient_accumulation_steps * self.accelerator.num_processes
        return 1.0 if numerator == window_rows else numerator / window_rows

    def _curation_before_optimizer_step(self):
        if self._curation_mode != "self":
            return
        skipped = not self._curation_window_kept
        if skipped:
            # Every gradient None: torch optimizers leave such parameters and their state alone (no momentum, no
            # weight decay, no step count). The trainer still advances global_step and the LR scheduler: the step
            # counts windows of data, so max_steps, logging and checkpoints keep their meaning.
            self.optimizer.zero_grad(set_to_none=True)
            for param in self.model.parameters():
                param.grad = None
            self._curation_state.skipped_steps += 1
        self._metrics["train"]["curation/skipped_steps"] = [float(self._curation_state.skipped_steps)]
        self._metrics["train"]["curation/step_skipped"].append(float(skipped))
        self._curation_window_kept = False

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self._curation_mode == "none" or not self.args.should_save:
            return
        checkpoint_folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        output_dir = os.path.join(self._get_output_dir(trial=trial), checkpoint_folder)
        payload = {
            "version": 1,
            "mode": self._curation_mode,
            "ids": self._curation_ids,
            "state": self._curation_state.state_dict(),
            "sampler": None if self._curation_sampler is None else self._curation_sampler.state_dict(),
        }
        with open(os.path.join(output_dir, CURATION_STATE_NAME), "w") as f:
            json.dump(payload, f)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if self._curation_mode == "none" or checkpoint is None:
            return
        path = os.path.join(checkpoint, CURATION_STATE_NAME)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{checkpoint} has no {CURATION_STATE_NAME}: it was saved by a run without curation="
                f"{self._curation_mode!r}. Resume with the curation setting of the run that saved it."
            )
        with open(path) as f:
            payload = json.load(f)
        if payload["mode"] != self._curation_mode:
            raise ValueError(
                f"{path} was saved with curation={payload['mode']!r}, this run uses {self._curation_mode!r}."
            )
        if payload["ids"] != self._curation_ids:
            raise ValueError(
                f"{path} was saved for a different training set (prompt ids differ). Resume with the same data."
            )
        self._curation_state.load_state_dict(payload["state"])
        if payload["sampler"] is not None:
            if self._curation_sampler is not None:
                self._curation_sampler.load_state_dict(payload["sampler"])
            else:
                self._curation_pending_sampler_state = payload["sampler"]
