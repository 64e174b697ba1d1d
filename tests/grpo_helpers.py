"""Shared set-up for GRPO trainer tests: a tiny prompt dataset, a dense reward, and a config factory."""

from datasets import Dataset


def digit_reward(completions, **kwargs):
    """A dense, deterministic reward (share of digits in the completion), so GRPO groups have non-zero variance."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def prompt_dataset(n: int = 16) -> Dataset:
    return Dataset.from_dict({"prompt": [f"{i}+{2 * i}=" for i in range(n)]})


def grpo_kwargs(output_dir, **overrides) -> dict:
    """CPU-sized GRPO settings; num_iterations=2 so the importance ratio is not identically 1 (clipping happens)."""
    kwargs = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 8,
        "num_iterations": 2,
        "learning_rate": 0.1,  # large on purpose: ratios move far from 1 within one reuse, so the clip is active
        "max_steps": 4,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "gradient_checkpointing": False,
        "seed": 42,
        "epsilon": 0.2,
        "epsilon_high": 0.28,
    }
    kwargs.update(overrides)
    return kwargs


def small_grpo_kwargs(output_dir, **overrides) -> dict:
    """CPU-sized GRPO settings with groups of 2 and no batch reuse (the curation and dynamic-sampling tests)."""
    kwargs = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": 8,
        "num_generations": 2,
        "max_completion_length": 6,
        "learning_rate": 1e-2,
        "max_steps": 3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "gradient_checkpointing": False,
        "seed": 0,
    }
    kwargs.update(overrides)
    return kwargs
