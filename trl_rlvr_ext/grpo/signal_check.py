"""The training-signal check: a run that cannot learn says so, with the likely cause.

GRPO learns only from groups whose completions got different rewards: a group whose rewards are all equal has zero
advantage, so zero loss and zero gradient. The most common failures of a first run look the same from outside (loss 0,
``frac_reward_zero_std`` 1, exit code 0): a reward that does not read the dataset's answer format, a model that cannot
read the prompts, a task that is already solved or never solved. Options that need reused rollouts (NSR's clip
recovery, an adaptive clip) likewise do nothing, without a word, when every batch is used once: TRL's importance ratio
is then identically 1.

The method (`trl_rlvr_ext.grpo.methods.signal_check.SignalCheck`) watches the gathered rewards of the first ``signal_check_steps`` optimizer steps and warns
once, through the logger, with the share of all-correct and all-wrong groups and one completion next to its row's
data. It adds no metric and touches no tensor TRL uses, so the trainer stays stock TRL to the bit. The pure parts
(`GroupCounts`, `zero_signal_message`, `inactive_option_messages`) hold the logic and are tested on their own.
"""

import dataclasses
import logging

import torch

from ..curation.dynamic import group_reward_std
from ..rewards.guard import shorten


logger = logging.getLogger(__name__)


def reuses_rollouts(args) -> bool:
    """Whether TRL computes an old policy's log-probs, i.e. whether GRPO's importance ratio can differ from 1: only when
    a generation batch is used past the optimizer step it was generated for (TRL's own condition)."""
    generate_every = args.steps_per_generation * args.num_iterations
    return args.gradient_accumulation_steps % generate_every != 0


def inactive_option_messages(args) -> list[str]:
    """Warnings for options set in ``args`` that cannot act in this configuration (checked at start)."""
    if reuses_rollouts(args):
        return []
    reuse_hint = (
        f"every generation batch is used for exactly one optimizer step (num_iterations={args.num_iterations}, "
        f"steps_per_generation={args.steps_per_generation}, gradient_accumulation_steps="
        f"{args.gradient_accumulation_steps}), so TRL's importance ratio is identically 1 and PPO's clip never binds. "
        "Reuse each batch (num_iterations >= 2, or steps_per_generation > gradient_accumulation_steps) for it to act"
    )
    from .method import registered_methods  # the options that need reused rollouts are declared by their methods

    messages = []
    for method in registered_methods():
        for name in method.needs_reused_rollouts:
            off = method.off_values()[name]
            value = getattr(args, name, off)
            if value != off:
                messages.append(f"{name}={value!r} cannot act here: {reuse_hint}, or set {name}={off!r}.")
    return messages


@dataclasses.dataclass
class GroupCounts:
    """What the first steps' groups looked like (rewards gathered over processes, so the same on every one)."""

    groups: int = 0  # groups with at least two scored completions
    zero_std: int = 0  # of those, groups whose rewards are all equal
    at_top: int = 0  # zero-spread groups at the highest reward seen ("all correct" for a 0/1 reward)
    at_bottom: int = 0  # zero-spread groups at the lowest reward seen ("all wrong")
    dropped: int = 0  # groups with no scored completion (curation dropped them)
    low: float = float("inf")
    high: float = float("-inf")
    group_means: list = dataclasses.field(default_factory=list)  # of the zero-spread groups

    def add(self, rewards: torch.Tensor, num_generations: int) -> None:
        std = group_reward_std(rewards, num_generations)
        grouped = rewards.double().view(-1, num_generations)
        scored = ~torch.isnan(std)
        self.dropped += int(torch.isnan(grouped).all(dim=1).sum())
        self.groups += int(scored.sum())
        zero = scored & (std == 0)
        self.zero_std += int(zero.sum())
        finite = rewards[torch.isfinite(rewards)]
        if finite.numel():
            self.low, self.high = min(self.low, float(finite.min())), max(self.high, float(finite.max()))
        self.group_means.extend(torch.nanmean(grouped[zero], dim=1).tolist())

    def finish(self) -> None:
        self.at_top = sum(mean == self.high for mean in self.group_means)
        self.at_bottom = sum(mean == self.low for mean in self.group_means)

    @property
    def no_signal(self) -> bool:
        return self.groups > 0 and self.zero_std == self.groups


def zero_signal_message(
    counts: GroupCounts, steps: int, reward_names: list[str], sample: dict | None, small_vocabulary: bool
) -> str:
    """The warning for a run whose first ``steps`` steps had no group with a reward spread, with the likely causes."""
    lines = [
        (
            f"No learning signal in the first {steps} step(s): all {counts.groups} groups had zero reward spread "
            "(every completion of a prompt got the same reward), so every advantage, the loss and the gradient were "
            "zero."
        )
    ]
    if counts.low == counts.high:
        lines.append(f"Every completion got the reward {counts.low:g} from {', '.join(reward_names)}.")
    else:
        lines.append(
            f"{counts.at_top} group(s) sat at the highest reward ({counts.high:g}: already solved), {counts.at_bottom} "
            f"at the lowest ({counts.low:g}: never solved), {counts.groups - counts.at_top - counts.at_bottom} "
            "elsewhere."
        )
    lines.append("Likely causes:")
    if sample is not None:
        fields = ", ".join(f"{key}={shorten(value, 80)}" for key, value in sample["row"].items())
        lines.append(
            f"- the reward does not match the dataset's answer format: {', '.join(reward_names)} scored the "
            f"completion {shorten(sample['completion'], 120)} {sample['reward']:g}, for the row {fields or '(no other columns)'}. "
            "Check that the reward reads the columns this dataset has and the format the model writes "
            "(--reward_funcs on the command line)."
        )
    if small_vocabulary:
        lines.append(
            "- the model cannot read the prompts: this tokenizer has a byte-level vocabulary of a few hundred "
            "tokens, like the package's toy models (toy:base, toy:tiny), which read only the toy task's format "
            "('740+580=' -> '[2310]', see docs/toy.md). Train a real model on other data."
        )
    lines.append(
        "- every problem is already solved, or never solved, by this model: pick problems of a difficulty it "
        "sometimes solves, sample more completions per prompt (num_generations), or raise the temperature."
    )
    lines.append("Turn this check off with signal_check=False.")
    return "\n".join(lines)


def curation_kept_nothing_message(steps: int, curation: str) -> str:
    return (
        f"curation={curation!r} kept no prompt in the first {steps} step(s): every group was dropped, so nothing was "
        "trained on. With curation='self' every prompt is solved greedily by the current policy; pick harder "
        "problems, or set curation='none'. Turn this check off with signal_check=False."
    )
