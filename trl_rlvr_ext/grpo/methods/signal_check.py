"""The training-signal check (`signal_check`, on by default; it only observes): a run that cannot learn says so.

It watches the gathered rewards of the first `signal_check_steps` optimizer steps (`rewards`, after curation and
dynamic sampling, so it sees every generated group, dropped ones included) and warns once, through the logger; at start
it warns about options that cannot act (the methods' `needs_reused_rollouts`). It adds no metric and touches no tensor
TRL uses, so the trainer stays stock TRL to the bit. The pure parts are in `trl_rlvr_ext.grpo.signal_check`.
`trainer.signal_check_warnings` keeps every warning it gave (the CLI prints them again at the end of a run).
"""

import logging
from dataclasses import dataclass, field
from typing import ClassVar

from ...curation.dynamic import total_rewards
from ..method import GRPOMethod
from ..signal_check import GroupCounts, curation_kept_nothing_message, inactive_option_messages, zero_signal_message


logger = logging.getLogger("trl_rlvr_ext.grpo.signal_check")  # the logger name users filter on


@dataclass
class SignalCheckArguments:
    r"""The fields of this method in [`RLVRGRPOConfig`] (flat: the same names on the command line and in YAML).

    Parameters:
        signal_check (`bool`, *optional*, defaults to `True`):
            Warn (through the logger, once) when the first `signal_check_steps` optimizer steps carried no learning
            signal (every group's rewards equal: zero advantages, loss and gradient), with the likely cause: a reward
            that does not read the data's answer format (one completion is shown with its row), a model that cannot
            read the prompts, problems all solved or all unsolved; when curation kept no prompt; and, at start, for
            options that cannot act in this configuration (`clip_recovery` without rollout reuse). It only observes
            the rewards: no metric is added and training is unchanged. See `trl_rlvr_ext.grpo.signal_check`.
        signal_check_steps (`int`, *optional*, defaults to `4`):
            How many optimizer steps the signal check watches.
    """

    signal_check: bool = field(
        default=True,
        metadata={
            "help": "Warn once when the first signal_check_steps steps had no group with a reward spread (zero loss "
            "and gradient), naming the likely cause; and at start for options that cannot act (clip_recovery "
            "without rollout reuse). Observes only: training is unchanged."
        },
    )
    signal_check_steps: int = field(default=4, metadata={"help": "Optimizer steps the signal check watches."})


class SignalCheck(GRPOMethod):
    name = "signal_check"
    Args = SignalCheckArguments
    switches: ClassVar[dict] = {"signal_check": False}
    paper = "(this package)"

    @classmethod
    def check(cls, args) -> None:
        if args.signal_check_steps < 1:
            raise ValueError(
                f"signal_check_steps must be at least 1, got {args.signal_check_steps}; set signal_check=False to turn "
                "the check off."
            )

    def setup(self, trainer) -> None:
        super().setup(trainer)
        self.counts, self.sample = GroupCounts(), None
        for message in inactive_option_messages(self.args):
            self.warn(message)

    def warn(self, message: str) -> None:
        self.trainer.signal_check_warnings.append(message)
        if self.trainer.accelerator.is_main_process:
            logger.warning(message)

    def rewards(self, rewards_per_func, inputs, completions):
        trainer = self.trainer
        if self.counts is not None and trainer.model.training:
            rewards = total_rewards(rewards_per_func, trainer.reward_weights).detach().cpu()
            self.counts.add(rewards, trainer.num_generations)
            if self.sample is None and len(completions) and inputs:
                # This process's first row: its completion and reward next to the row's data (prompt left out)
                first = trainer.accelerator.process_index * len(completions)
                self.sample = {
                    "completion": completions[0] if isinstance(completions[0], str) else completions[0][-1]["content"],
                    "reward": float(rewards[first]) if first < rewards.numel() else float("nan"),
                    "row": {key: value for key, value in inputs[0].items() if key != "prompt"},
                }
        return rewards_per_func

    def on_step_end(self, state) -> None:
        if state.global_step >= self.args.signal_check_steps:
            self.finish(state.global_step)

    def on_train_end(self, state) -> None:
        self.finish(state.global_step)

    def _popo_had_positives(self, counts: GroupCounts) -> bool:
        # POPO trains on the positives of a group whatever its spread (an all-correct group too): its signal is a
        # rollout whose mean reward (the highest summed reward over the functions) is above popo_reward_threshold
        positive = counts.high / len(self.trainer.reward_funcs) > self.args.popo_reward_threshold
        return self.args.objective == "popo" and positive

    def finish(self, step: int) -> None:
        counts, self.counts = self.counts, None
        if counts is None:
            return
        counts.finish()
        trainer = self.trainer
        if counts.groups == 0 and counts.dropped > 0:
            self.warn(curation_kept_nothing_message(step, self.args.curation))
        elif counts.no_signal and not self._popo_had_positives(counts):
            small_vocabulary = (
                len(trainer.processing_class) <= 512 if hasattr(trainer.processing_class, "__len__") else False
            )
            self.warn(
                zero_signal_message(counts, step, list(trainer.reward_func_names), self.sample, small_vocabulary)
            )
