"""Shared set-up for GRPO trainer tests: the method authors' kit's prompt set, dense reward and settings."""

from trl_rlvr_ext.testing.runs import digit_reward, grpo_kwargs, prompt_dataset, small_grpo_kwargs


__all__ = ["digit_reward", "grpo_kwargs", "prompt_dataset", "small_grpo_kwargs"]
