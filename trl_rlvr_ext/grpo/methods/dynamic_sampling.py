"""DAPO's dynamic sampling (`dynamic_sampling=True`, https://huggingface.co/papers/2503.14476): drop the groups whose
rewards have (near-)zero spread and generate more prompts, in whole groups, until the generation batch holds only
informative groups. The rule itself (which groups are informative, the round accounting, the extra-prompt stream) is
trainer-free code in `trl_rlvr_ext.curation.dynamic`; this module wires it into TRL's loop:

- `generate_and_score`: each round is one call of the rest of the chain, i.e. curation's bookkeeping when curation is
  on, then TRL's own generation and scoring path (transformers ``generate``, or vLLM colocate / server). The rounds'
  informative groups are concatenated into one generation batch of stock size; ``num_items_in_batch`` (the token
  normaliser of dapo / cispo / vespo) is recounted over it, so the loss is GRPO's on the kept groups.
- `rewards`: rewards arrive gathered across processes here, so the filter decides the same on every rank. They come
  after curation's (which masks SELF's dropped prompts), so pass-rate estimates see the dropped groups too.
- The extra prompts come from a sampler of the training sampler's kind (`trainer.extra_sampler`: with curation on, a
  curation sampler over the shared statistics), seeded apart from the training order.
- Checkpoints: ``dynamic_sampling_state.json`` holds the extra-prompt stream (buffer and RNG).
"""

from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F

from ...curation.dynamic import GroupSelector, PromptStream, ShuffledOrder, informative_groups, total_rewards
from ..checkpoint_state import CheckpointState
from ..method import GRPOMethod


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


@dataclass
class DynamicSamplingArguments:
    r"""The fields of this method in [`RLVRGRPOConfig`] (flat: the same names on the command line and in YAML).

    Parameters:
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
    """

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


class DynamicSampling(GRPOMethod):
    name = "dynamic_sampling"
    Args = DynamicSamplingArguments
    switches: ClassVar[dict] = {"dynamic_sampling": False}
    paper = "[DAPO](https://huggingface.co/papers/2503.14476)"

    @classmethod
    def check(cls, args) -> None:
        if not args.dynamic_sampling:
            return
        if args.dynamic_sampling_max_rounds < 1:
            raise ValueError(
                f"dynamic_sampling_max_rounds must be at least 1 (the first generation round), got "
                f"{args.dynamic_sampling_max_rounds}. The DAPO recipe uses 10."
            )
        if args.dynamic_sampling_min_std < 0:
            raise ValueError(
                f"dynamic_sampling_min_std must be >= 0 (0 drops only groups whose rewards are all equal), got "
                f"{args.dynamic_sampling_min_std}."
            )
        if args.scale_rewards == "batch":
            raise ValueError(
                "dynamic_sampling with scale_rewards='batch' cannot be exact: the batch std would mix the rounds' "
                "dropped groups into the kept groups' advantages. Use scale_rewards='group' (DAPO) or 'none'."
            )
        if args.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                f"dynamic_sampling needs multi_objective_aggregation='sum_then_normalize': with "
                f"{args.multi_objective_aggregation!r} the advantages are normalised over the whole batch, so dropping "
                "groups would change the kept groups' advantages."
            )
        if args.dynamic_sampling_seed is None:
            args.dynamic_sampling_seed = args.seed + 1

    # ------------------------------------------------------------------ set-up
    def setup(self, trainer) -> None:
        import datasets

        super().setup(trainer)
        args = self.args
        self.rewards_per_round, self.collecting, self._stream = None, False, None
        if not isinstance(self.trainer.train_dataset, datasets.Dataset):
            raise TypeError(
                "dynamic_sampling draws extra prompts by index and needs a map-style `datasets.Dataset` as "
                f"train_dataset, got {type(self.trainer.train_dataset).__name__}. Load the dataset without streaming."
            )
        num_processes = self.trainer.accelerator.num_processes
        local_rows = args.generation_batch_size // num_processes
        if local_rows % self.trainer.num_generations:
            raise ValueError(
                f"dynamic_sampling keeps or drops whole groups on the process that generated them, but with "
                f"{num_processes} processes each holds {local_rows} completions of a generation batch, not a multiple "
                f"of num_generations={self.trainer.num_generations}: a group would straddle two processes. Make "
                "per_device_train_batch_size * steps_per_generation (or generation_batch_size / num_processes) a "
                "multiple of num_generations."
            )
        names = list(self.trainer.reward_func_names)
        if args.dynamic_sampling_reward_func is None:
            self.reward_index = None
        elif args.dynamic_sampling_reward_func in names:
            self.reward_index = names.index(args.dynamic_sampling_reward_func)
        else:
            raise ValueError(
                f"dynamic_sampling_reward_func={args.dynamic_sampling_reward_func!r} is not one of the reward "
                f"functions {names}. Name one of them, or leave it unset to filter on the weighted total reward."
            )
        self.groups_per_process = local_rows // self.trainer.num_generations
        self.selector = GroupSelector(num_processes, self.groups_per_process, args.dynamic_sampling_max_rounds)

    @property
    def stream(self) -> PromptStream:
        """The extra-prompt stream, built on first use (after every method's setup, so a curation sampler exists)."""
        if self._stream is None:
            source = self.trainer.extra_sampler(self.trainer.train_dataset)
            if source is not None:
                source.generator.manual_seed(self.args.dynamic_sampling_seed)
            else:
                source = ShuffledOrder(
                    len(self.trainer.train_dataset), self.args.dynamic_sampling_seed, self.trainer.shuffle_dataset
                )
            self._stream = PromptStream(source)
        return self._stream

    def checkpoint_states(self) -> list[CheckpointState]:
        return [
            CheckpointState(
                DYNAMIC_SAMPLING_STATE_NAME,
                lambda: {"stream": self.stream.state_dict()},
                lambda payload, path: self.stream.load_state_dict(payload["stream"]),
                missing="it was saved by a run without dynamic_sampling. Resume with the settings of the run that "
                "saved it, or start a new run.",
            )
        ]

    # ------------------------------------------------------------------ rewards (gathered)
    def rewards(self, rewards_per_func, inputs, completions):
        if self.collecting:
            if self.reward_index is None:
                # The total reward of TRL's advantage (sum_then_normalize), unscorable rows NaN
                rewards = total_rewards(rewards_per_func, self.trainer.reward_weights)
            else:
                rewards = rewards_per_func[:, self.reward_index]
            self.rewards_per_round = rewards.detach().cpu()
        return rewards_per_func

    # ------------------------------------------------------------------ rounds
    def _extra_inputs(self, num_groups: int, template: dict) -> list[dict]:
        """``num_groups`` extra prompts for this process, each repeated ``num_generations`` times like the sampler's
        rows. Every process draws the global set (the same on all of them) and takes its contiguous share."""
        rank = self.trainer.accelerator.process_index
        rows = self.stream.draw(num_groups * self.trainer.accelerator.num_processes)
        local = rows[rank * num_groups : (rank + 1) * num_groups]
        keys = set(template)  # the columns the dataloader hands over (remove_unused_columns may have dropped some)
        out = []
        for row in local:
            example = {k: v for k, v in self.trainer.train_dataset[row].items() if k in keys}
            out.extend(dict(example) for _ in range(self.trainer.num_generations))
        return out

    def generate_and_score(self, call, inputs):
        if not self.trainer.model.training:
            return call(inputs)
        if "image" in inputs[0] or "images" in inputs[0]:
            raise ValueError("dynamic_sampling does not support multimodal prompts; set dynamic_sampling=False.")
        G = self.trainer.num_generations
        if len(inputs) != self.groups_per_process * G:
            raise RuntimeError(f"Expected {self.groups_per_process * G} rows per process, got {len(inputs)}.")
        selector = self.selector
        selector.start()
        rank = self.trainer.accelerator.process_index
        retained = {}  # (round, group) -> that group's rows of the round's output; only groups still selectable
        round_inputs = inputs
        while True:
            self.collecting, self.rewards_per_round = True, None
            try:
                out = call(round_inputs)
            finally:
                self.collecting = False
            if self.rewards_per_round is None:
                raise RuntimeError("dynamic_sampling saw no rewards for the round (_calculate_rewards was bypassed).")
            keep = informative_groups(self.rewards_per_round, G, self.args.dynamic_sampling_min_std)
            round_index = selector.rounds
            selector.record_round(keep)
            # Hold on to this round's selectable groups only, so memory stays within two generation batches
            for r, g in selector.candidates(rank):
                if r == round_index:
                    retained[(r, g)] = self._group_rows(out, g)
            if selector.done:
                break
            round_inputs = self._extra_inputs(selector.next_round_groups(), inputs[0])
        output = self._merge([retained[key] for key in selector.selection(rank)])
        metrics = self.metric_store("train")
        for name, value in selector.metrics().items():
            metrics[name].append(value)
        return output

    def _group_rows(self, out: dict, group: int) -> dict:
        """The rows of local group ``group`` in one round's output (per-row values only)."""
        G = self.trainer.num_generations
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

    def _merge(self, groups: list[dict]) -> dict:
        """One generation batch from the selected groups' rows (padded to a common width)."""
        pieces = {}
        for group in groups:
            for key, value in group.items():
                pieces.setdefault(key, []).append(value)
        merged = {}
        for key, values in pieces.items():
            if key in _PER_TOKEN and values[0].dim() == 2 and values[0].size(1) != 1:
                side, pad = _PER_TOKEN[key]
                pad = self.trainer._tokenizer.pad_token_id if pad is None else pad
                width = max(v.size(1) for v in values)
                values = [_pad_to(v, width, side, pad) for v in values]
            merged[key] = torch.cat(values, dim=0)
        # GRPO's token normaliser (dapo / cispo / vespo) over the batch that is trained on, on all processes
        mask = merged["completion_mask"]
        if "tool_mask" in merged:
            mask = mask * merged["tool_mask"]
        if "curation_keep" in merged:  # SELF: only the rows curation keeps carry loss (and count per micro-batch)
            mask = mask * merged["curation_keep"].unsqueeze(1)
        merged["num_items_in_batch"] = self.trainer.accelerator.gather(mask.sum()).sum()
        return merged
