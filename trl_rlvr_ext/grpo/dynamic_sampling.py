"""`DynamicSamplingMixin`: DAPO's dynamic sampling for `GRPOTrainer` (https://huggingface.co/papers/2503.14476).

Mix it in before `CurationMixin` (`RLVRGRPOTrainer` lists it after `TrainingSignalCheckMixin` only: see that class's
docstring for the order of every shared hook). With ``args.dynamic_sampling`` off every override calls ``super()``
unchanged. The rule itself (which groups are informative,
the round accounting, the extra-prompt stream) is trainer-free code in `trl_rlvr_ext.curation.dynamic`; this file
only wires it into TRL's loop:

- `_generate_and_score_completions`: each round is one call of ``super()._generate_and_score_completions``, i.e. TRL's
  own generation and scoring path (transformers ``generate``, or vLLM colocate / server when the trainer uses it),
  followed by curation's bookkeeping when curation is on. The rounds' informative groups are concatenated into one
  generation batch of stock size; ``num_items_in_batch`` (the token normaliser of dapo / cispo / vespo) is recounted
  over it, so the loss is GRPO's on the kept groups.
- `_calculate_rewards`: rewards arrive gathered across processes here, so the filter decides the same on every rank.
  Curation's override runs inside it for every generated group, so pass-rate estimates see the dropped groups too.
- Checkpoints: ``dynamic_sampling_state.json`` holds the extra-prompt stream (buffer and RNG), saved and restored by
  the trainer's one checkpoint-state mechanism (`trl_rlvr_ext.grpo.checkpoint_state`).
"""

import torch
import torch.nn.functional as F

from ..curation.dynamic import GroupSelector, PromptStream, ShuffledOrder, informative_groups, total_rewards
from .checkpoint_state import CheckpointState


DYNAMIC_SAMPLING_STATE_NAME = "dynamic_sampling_state.json"

# How each per-row output of TRL's `_generate_and_score_completions` is padded when rounds of different widths are
# concatenated: (side, pad value); the padded positions are masked out of the loss (completion_mask = 0).
_PER_TOKEN = {
    "prompt_ids": ("left", None),  # None: the tokenizer's pad token
    "prompt_mask": ("left", 0),
    "completion_ids": ("right", None),
    "completion_mask": ("right", 0),
    "tool_mask": ("right", 1),
    "old_per_token_logps": ("right", 0.0),
    "ref_per_token_logps": ("right", 0.0),
    "sampling_per_token_logps": ("right", 0.0),
    "importance_sampling_ratio": ("right", 0.0),
}
_PER_ROW = ("advantages", "curation_keep")


def _pad_to(tensor: torch.Tensor, width: int, side: str, value) -> torch.Tensor:
    missing = width - tensor.size(1)
    if missing == 0:
        return tensor
    return F.pad(tensor, (missing, 0) if side == "left" else (0, missing), value=value)


class DynamicSamplingMixin:
    """Dynamic sampling for `GRPOTrainer` subclasses, configured by the ``dynamic_sampling*`` fields of
    `RLVRGRPOConfig`."""

    _dynamic_sampling = False  # until __init__ has read the config: stock behaviour
    _ds_rewards = None
    _ds_collecting = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._dynamic_sampling = bool(getattr(self.args, "dynamic_sampling", False))
        if self._dynamic_sampling:
            self._dynamic_sampling_setup()

    # ------------------------------------------------------------------ set-up
    def _dynamic_sampling_setup(self):
        import datasets

        args = self.args
        if not isinstance(self.train_dataset, datasets.Dataset):
            raise TypeError(
                "dynamic_sampling draws extra prompts by index and needs a map-style `datasets.Dataset` as "
                f"train_dataset, got {type(self.train_dataset).__name__}. Load the dataset without streaming."
            )
        num_processes = self.accelerator.num_processes
        local_rows = args.generation_batch_size // num_processes
        if local_rows % self.num_generations:
            raise ValueError(
                f"dynamic_sampling keeps or drops whole groups on the process that generated them, but with "
                f"{num_processes} processes each holds {local_rows} completions of a generation batch, not a multiple "
                f"of num_generations={self.num_generations}: a group would straddle two processes. Make "
                "per_device_train_batch_size * steps_per_generation (or generation_batch_size / num_processes) a "
                "multiple of num_generations."
            )
        names = list(self.reward_func_names)
        if args.dynamic_sampling_reward_func is None:
            self._ds_reward_index = None
        elif args.dynamic_sampling_reward_func in names:
            self._ds_reward_index = names.index(args.dynamic_sampling_reward_func)
        else:
            raise ValueError(
                f"dynamic_sampling_reward_func={args.dynamic_sampling_reward_func!r} is not one of the reward "
                f"functions {names}. Name one of them, or leave it unset to filter on the weighted total reward."
            )
        self._ds_groups_per_process = local_rows // self.num_generations
        self._ds_selector = GroupSelector(num_processes, self._ds_groups_per_process, args.dynamic_sampling_max_rounds)
        # The extra prompts come from a sampler of the training sampler's kind: with curation on, its own sampler
        # (SELF skipping / pass-rate weights over the shared statistics), seeded apart from the training order.
        if getattr(self, "_curation", None) is not None:
            source = self._curation_make_sampler(self.train_dataset, training=False)
            source.generator.manual_seed(args.dynamic_sampling_seed)
        else:
            source = ShuffledOrder(len(self.train_dataset), args.dynamic_sampling_seed, self.shuffle_dataset)
        self._ds_stream = PromptStream(source)
        # The stream's position and generator go through the trainer's one checkpoint-state mechanism
        self._register_checkpoint_state(
            CheckpointState(
                DYNAMIC_SAMPLING_STATE_NAME,
                lambda: {"stream": self._ds_stream.state_dict()},
                lambda payload, path: self._ds_stream.load_state_dict(payload["stream"]),
                missing="it was saved by a run without dynamic_sampling. Resume with the settings of the run that "
                "saved it, or start a new run.",
            )
        )

    # ------------------------------------------------------------------ rewards (gathered)
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self._ds_collecting:
            if self._ds_reward_index is None:
                # The total reward of TRL's advantage (sum_then_normalize), unscorable rows NaN
                rewards = total_rewards(rewards_per_func, self.reward_weights)
            else:
                rewards = rewards_per_func[:, self._ds_reward_index]
            self._ds_rewards = rewards.detach().cpu()
        return rewards_per_func

    # ------------------------------------------------------------------ rounds
    def _ds_extra_inputs(self, num_groups: int, template: dict) -> list[dict]:
        """``num_groups`` extra prompts for this process, each repeated ``num_generations`` times like the sampler's
        rows. Every process draws the global set (the same on all of them) and takes its contiguous share."""
        rank = self.accelerator.process_index
        rows = self._ds_stream.draw(num_groups * self.accelerator.num_processes)
        local = rows[rank * num_groups : (rank + 1) * num_groups]
        keys = set(template)  # the columns the dataloader hands over (remove_unused_columns may have dropped some)
        out = []
        for row in local:
            example = {k: v for k, v in self.train_dataset[row].items() if k in keys}
            out.extend(dict(example) for _ in range(self.num_generations))
        return out

    def _generate_and_score_completions(self, inputs):
        if not self._dynamic_sampling or not self.model.training:
            return super()._generate_and_score_completions(inputs)
        if "image" in inputs[0] or "images" in inputs[0]:
            raise ValueError("dynamic_sampling does not support multimodal prompts; set dynamic_sampling=False.")
        G = self.num_generations
        if len(inputs) != self._ds_groups_per_process * G:
            raise RuntimeError(f"Expected {self._ds_groups_per_process * G} rows per process, got {len(inputs)}.")
        selector = self._ds_selector
        selector.start()
        rank = self.accelerator.process_index
        retained = {}  # (round, group) -> that group's rows of the round's output; only groups still selectable
        round_inputs = inputs
        while True:
            self._ds_collecting, self._ds_rewards = True, None
            try:
                out = super()._generate_and_score_completions(round_inputs)
            finally:
                self._ds_collecting = False
            if self._ds_rewards is None:
                raise RuntimeError("dynamic_sampling saw no rewards for the round (_calculate_rewards was bypassed).")
            keep = informative_groups(self._ds_rewards, G, self.args.dynamic_sampling_min_std)
            round_index = selector.rounds
            selector.record_round(keep)
            # Hold on to this round's selectable groups only, so memory stays within two generation batches
            for r, g in selector.candidates(rank):
                if r == round_index:
                    retained[(r, g)] = self._ds_group_rows(out, g)
            if selector.done:
                break
            round_inputs = self._ds_extra_inputs(selector.next_round_groups(), inputs[0])
        output = self._ds_merge([retained[key] for key in selector.selection(rank)])
        metrics = self._metrics["train"]
        for name, value in selector.metrics().items():
            metrics[name].append(value)
        return output

    def _ds_group_rows(self, out: dict, group: int) -> dict:
        """The rows of local group ``group`` in one round's output (per-row values only)."""
        G = self.num_generations
        rows = slice(group * G, (group + 1) * G)
        piece = {}
        for key, value in out.items():
            if key == "num_items_in_batch":
                continue
            if key not in _PER_TOKEN and key not in _PER_ROW:
                raise ValueError(
                    f"dynamic_sampling cannot merge the generation output {key!r} across rounds (multimodal or "
                    "custom rollout fields); set dynamic_sampling=False for this setup."
                )
            piece[key] = value[rows].clone()  # a copy, so the rest of the round can be freed
        return piece

    def _ds_merge(self, groups: list[dict]) -> dict:
        """One generation batch from the selected groups' rows (padded to a common width)."""
        pieces = {}
        for group in groups:
            for key, value in group.items():
                pieces.setdefault(key, []).append(value)
        merged = {}
        for key, values in pieces.items():
            if key in _PER_TOKEN and values[0].dim() == 2 and values[0].size(1) != 1:
                side, pad = _PER_TOKEN[key]
                pad = self._tokenizer.pad_token_id if pad is None else pad
                width = max(v.size(1) for v in values)
                values = [_pad_to(v, width, side, pad) for v in values]
            merged[key] = torch.cat(values, dim=0)
        # GRPO's token normaliser (dapo / cispo / vespo) over the batch that is trained on, on all processes
        mask = merged["completion_mask"]
        if "tool_mask" in merged:
            mask = mask * merged["tool_mask"]
        if "curation_keep" in merged:  # SELF: only the rows curation keeps carry loss (and count per micro-batch)
            mask = mask * merged["curation_keep"].unsqueeze(1)
        merged["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
        return merged
