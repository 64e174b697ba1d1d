"""TRL's environments (`environment_factory`) through `RLVRGRPOTrainer`: TRL's own multi-environment scenario (a dict
factory, a dataset with only an ``environment`` column, each environment's ``reset()`` supplying the prompt) runs with
our options off equal to stock `GRPOTrainer` to the bit, and with an option on it trains; the early input check refuses
a dataset without ``prompt`` only where TRL does too (no environment)."""

import os

import pytest
import torch
from datasets import Dataset
from grpo_helpers import grpo_kwargs
from trl import GRPOConfig, GRPOTrainer

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer


os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


class CounterEnvironment:
    """Owns its prompt (``reset()`` returns it) and one tool, like TRL's test of several environments."""

    def reset(self, **kwargs):
        return "Count: 1+2="

    def increment(self, step: int) -> int:
        """
        Increment the counter.

        Args:
            step: Value to add to the counter.

        Returns:
            The updated counter value.
        """
        return step


class EchoEnvironment:
    """A second environment, with its own prompt and tool, and a reward of its own (``get_reward``)."""

    def reset(self, **kwargs):
        return "Echo: 3+4="

    def shout(self, text: str) -> str:
        """
        Shout the given text.

        Args:
            text: Text to shout.

        Returns:
            The text in upper case.
        """
        return text.upper()

    def get_reward(self) -> float:
        return 0.5


def digit_reward(completions, **kwargs):
    """The share of digits in each (conversational) completion's text: a dense reward, so groups have variance."""
    texts = ["".join(str(m.get("content") or "") for m in c) if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def _environment_dataset() -> Dataset:
    # TRL's scenario: no 'prompt' column, only the routing column
    return Dataset.from_dict({"environment": ["counter", "echo"] * 8})


def _train(trainer_cls, config_cls, model_path, output_dir, **overrides):
    args = config_cls(**grpo_kwargs(output_dir, shuffle_dataset=False, max_steps=2, **overrides))
    trainer = trainer_cls(
        model=model_path,
        reward_funcs=digit_reward,
        args=args,
        train_dataset=_environment_dataset(),
        environment_factory={"counter": CounterEnvironment, "echo": EchoEnvironment},
    )
    trainer.train()
    return trainer


def _step_logs(trainer):
    return [{k: v for k, v in log.items() if k != "step_time"} for log in trainer.state.log_history if "loss" in log]


def test_dict_environment_factory_without_prompt_column_is_stock_when_off(tiny_model_path, tmp_path):
    """With every option off, the run equals stock TRL's: every logged value and every parameter, to the bit."""
    stock = _train(GRPOTrainer, GRPOConfig, tiny_model_path, tmp_path / "stock")
    ours = _train(RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "ours")
    assert stock.reward_func_names == ours.reward_func_names == ["digit_reward", "EchoEnvironment"]
    stock_logs, our_logs = _step_logs(stock), _step_logs(ours)
    assert len(stock_logs) == len(our_logs) == 2
    assert stock_logs == our_logs
    # the environments' rewards reached the logs (the echo environment scores its own rollouts)
    assert our_logs[0]["rewards/EchoEnvironment/mean"] == pytest.approx(0.5)
    for (name, a), (_, b) in zip(stock.model.named_parameters(), ours.model.named_parameters(), strict=True):
        assert torch.equal(a, b), f"parameter {name} differs from stock TRL"


def test_dict_environment_factory_trains_with_an_option_on(tiny_model_path, tmp_path):
    """With NSR on (and the batch reused twice, so the ratio leaves 1), the same scenario trains and logs NSR."""
    trainer = _train(RLVRGRPOTrainer, RLVRGRPOConfig, tiny_model_path, tmp_path / "nsr", clip_recovery="nsr")
    logs = _step_logs(trainer)
    assert len(logs) == 2 and all("clip_recovery/high_frac" in log for log in logs)
    assert logs[1]["clip_ratio/region_mean"] > 0, "the clip never acted: NSR had nothing to do"
    assert all(torch.isfinite(torch.tensor(log["loss"])) for log in logs)


def test_a_dataset_without_prompt_is_refused_without_an_environment(tiny_model_path, tmp_path):
    """No environment: TRL would fail at the first batch with a KeyError; the early check names the fix before any
    model loads."""
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path))
    with pytest.raises(ValueError, match="no 'prompt' column.*environment_factory"):
        RLVRGRPOTrainer(
            model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=_environment_dataset()
        )
