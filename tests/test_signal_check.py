"""The training-signal check: a run that cannot learn says so (once, with the likely cause), options that cannot act
are named at start, and a run that learns gets no warning. It only observes: the stock-equivalence tests of
tests/test_grpo_trainer.py run with it on (its default)."""

import math

import pytest
import torch
from datasets import Dataset
from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset, small_grpo_kwargs

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.grpo.signal_check import GroupCounts, inactive_option_messages, reuses_rollouts, zero_signal_message
from trl_rlvr_ext.rewards.toy import toy_accuracy_reward


LOGGER = "trl_rlvr_ext.grpo.signal_check"


class _Args:
    def __init__(self, ga=1, spg=1, iterations=1, **options):
        self.gradient_accumulation_steps, self.steps_per_generation, self.num_iterations = ga, spg, iterations
        self.__dict__.update(options)


@pytest.mark.parametrize(
    ("ga", "spg", "iterations", "reuse"),
    [(1, 1, 1, False), (4, 4, 1, False), (4, 2, 1, False), (1, 2, 1, True), (1, 1, 2, True), (2, 4, 1, True)],
)
def test_reuses_rollouts_is_trls_condition(ga, spg, iterations, reuse):
    """TRL computes old log-probs (so the ratio can leave 1) iff GA is not a multiple of spg * num_iterations."""
    assert reuses_rollouts(_Args(ga, spg, iterations)) is reuse


def test_inactive_options_are_named_only_without_reuse():
    (message,) = inactive_option_messages(_Args(clip_recovery="nsr"))
    assert message.startswith("clip_recovery='nsr' cannot act here") and "num_iterations >= 2" in message
    assert inactive_option_messages(_Args(iterations=2, clip_recovery="nsr")) == []
    assert inactive_option_messages(_Args(clip_recovery="none")) == []
    assert len(inactive_option_messages(_Args(clip_recovery="nsr", adaptive_clip="acpo"))) == 2


def test_group_counts_by_hand():
    counts = GroupCounts()
    nan = math.nan
    # all correct | all wrong | spread | curation-dropped ; then one more all-wrong group in a second batch
    counts.add(torch.tensor([1.0, 1, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0, nan, nan, nan, nan]), 4)
    counts.add(torch.tensor([0.0, 0, 0, 0]), 4)
    counts.finish()
    assert (counts.groups, counts.zero_std, counts.dropped) == (4, 3, 1)
    assert (counts.at_top, counts.at_bottom, counts.low, counts.high) == (1, 2, 0.0, 1.0)
    assert not counts.no_signal
    constant = GroupCounts()
    constant.add(torch.tensor([0.5, 0.5, 0.5, 0.5, 0.5, 0.5]), 3)
    constant.finish()
    assert constant.no_signal and constant.low == constant.high == 0.5


def test_message_names_reward_sample_and_causes():
    counts = GroupCounts()
    counts.add(torch.zeros(8), 4)
    counts.finish()
    sample = {"completion": "The sum is 12.", "reward": 0.0, "row": {"answer": "12"}}
    message = zero_signal_message(counts, 4, ["toy_accuracy_reward"], sample, small_vocabulary=True)
    assert "No learning signal in the first 4 step(s): all 2 groups had zero reward spread" in message
    assert "Every completion got the reward 0 from toy_accuracy_reward" in message
    assert "scored the completion 'The sum is 12.' 0, for the row answer='12'" in message
    assert "toy models (toy:base, toy:tiny)" in message and "signal_check=False" in message
    assert "toy models" not in zero_signal_message(counts, 4, ["r"], sample, small_vocabulary=False)


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_a_run_whose_reward_never_matches_warns_once_with_the_cause(tiny_model_path, tmp_path, caplog):
    """The issue's silent run: a prompt/answer dataset scored by the toy's reward, which expects the toy's bracketed
    answers, gives every completion 0: loss 0, no learning, and before this check no word."""
    data = Dataset.from_dict(
        {"prompt": [f"What is {i} + {i}?" for i in range(16)], "answer": [str(2 * i) for i in range(16)]}
    )
    args = RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, max_steps=5, signal_check_steps=3))
    trainer = RLVRGRPOTrainer(model=tiny_model_path, reward_funcs=toy_accuracy_reward, args=args, train_dataset=data)
    with caplog.at_level("WARNING", logger=LOGGER):
        trainer.train()
    (message,) = _warnings(caplog)
    assert message == trainer.signal_check_warnings[0] and len(trainer.signal_check_warnings) == 1
    assert "No learning signal in the first 3 step(s)" in message
    assert "Every completion got the reward 0 from toy_accuracy_reward" in message
    assert "for the row answer='" in message and "toy models" in message
    assert all(log["frac_reward_zero_std"] == 1 for log in trainer.state.log_history if "loss" in log)


def test_clip_recovery_without_reuse_is_named_at_start(tiny_model_path, tmp_path, caplog):
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, clip_recovery="nsr", num_iterations=1, max_steps=1))
    with caplog.at_level("WARNING", logger=LOGGER):
        trainer = RLVRGRPOTrainer(
            model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
        )
        assert [m for m in _warnings(caplog) if m.startswith("clip_recovery='nsr' cannot act here")]
        trainer.train()
    assert len(_warnings(caplog)) == 1  # the run itself had a signal: no second warning


def test_a_run_with_signal_gets_no_warning_and_the_check_can_be_turned_off(tiny_model_path, tmp_path, caplog):
    for extra in ({}, {"signal_check": False, "clip_recovery": "nsr", "num_iterations": 1}):
        args = RLVRGRPOConfig(**grpo_kwargs(tmp_path / str(len(extra)), max_steps=2, **extra))
        with caplog.at_level("WARNING", logger=LOGGER):
            trainer = RLVRGRPOTrainer(
                model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset()
            )
            trainer.train()
        assert _warnings(caplog) == [] and trainer.signal_check_warnings == []
    constant = RLVRGRPOConfig(**grpo_kwargs(tmp_path / "off", max_steps=2, signal_check=False))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=lambda completions, **kw: [1.0] * len(completions), args=constant,
        train_dataset=prompt_dataset(),
    )  # fmt: skip
    with caplog.at_level("WARNING", logger=LOGGER):
        trainer.train()
    assert _warnings(caplog) == []


def test_curation_that_keeps_nothing_says_so(tiny_model_path, tmp_path, caplog):
    from test_curation_trainer import length_reward, prompts, scripted_greedy

    args = RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, curation="self", max_steps=2, signal_check_steps=2))
    trainer = RLVRGRPOTrainer(model=tiny_model_path, reward_funcs=length_reward, args=args, train_dataset=prompts())
    scripted_greedy(trainer, lambda step: set(range(8)))  # every prompt solved greedily: SELF keeps none
    with caplog.at_level("WARNING", logger=LOGGER):
        trainer.train()
    (message,) = _warnings(caplog)
    assert message.startswith("curation='self' kept no prompt in the first 2 step(s)")


def test_config_refuses_a_zero_window():
    with pytest.raises(ValueError, match="signal_check_steps must be at least 1"):
        RLVRGRPOConfig(output_dir="x", use_cpu=True, report_to="none", signal_check_steps=0)
