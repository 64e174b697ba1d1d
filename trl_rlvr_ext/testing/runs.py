"""The small CPU runs every check of the kit trains: a tiny model, a prompt set, a dense reward, the settings.

They are the settings the package's own tests use, so a method author's check is the check the built-in methods pass.
"""

import functools
import importlib
import inspect
import tempfile


def digit_reward(completions, **kwargs):
    """A dense, deterministic reward (share of digits in the completion), so GRPO groups have non-zero variance."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def dense_reward(completions, **kwargs):
    """Dense and deterministic per completion, so every group has a spread (the distributed checks' reward)."""
    return [sum(map(ord, c)) % 13 / 13 for c in completions]


def prompt_dataset(n: int = 16):
    """``n`` prompts ``"i+2i="`` (a prompt-only TRL dataset)."""
    from datasets import Dataset

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


@functools.cache
def tiny_model() -> str:
    """The path of a tiny model with its tokenizer (`trl_rlvr_ext.toy.save_tiny_model`), built once per process."""
    from ..toy import save_tiny_model

    return save_tiny_model(tempfile.mkdtemp(prefix="trl_rlvr_ext_kit_model_"))


def import_path(obj) -> str:
    """``"module:qualname"`` of a class or function, for a process that must import it again; refuses what another
    process cannot import (a function defined inside a function, a lambda, a class of ``__main__``)."""
    if isinstance(obj, str):
        return obj
    module, name = obj.__module__, obj.__qualname__
    if "<" in name or module == "__main__":
        raise ValueError(
            f"{obj!r} cannot be imported by the launched processes: define it at the top level of an importable module "
            "(e.g. the test file itself) or pass its import path as 'module:name'."
        )
    return f"{module}:{name}"


def load(path):
    """The object at ``"module:qualname"`` (``path`` itself when it is not a string)."""
    if not isinstance(path, str):
        return path
    module, _, name = path.partition(":")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def accepts(function, name: str) -> bool:
    """Whether ``function`` takes a keyword ``name`` (a config factory may ignore the output folder, for instance)."""
    parameters = inspect.signature(function).parameters
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
