"""Verifiable reward functions, and their lookup by name or dotted import path (for recipes and the CLI)."""

import importlib
from collections.abc import Callable


def _registry() -> dict[str, str]:
    # name -> "module:attribute", resolved lazily so that optional dependencies are imported only when used
    return {
        "toy_accuracy": "trl_rlvr_ext.rewards.toy:toy_accuracy_reward",
        "math_accuracy": "trl_rlvr_ext.rewards.math:math_accuracy_reward",
        "reasoning_gym": "trl_rlvr_ext.rewards.reasoning_gym:reasoning_gym_reward",
        # TRL's own rewards, by the names TRL's scripts use
        "accuracy_reward": "trl.rewards:accuracy_reward",
        "reasoning_accuracy_reward": "trl.rewards:reasoning_accuracy_reward",
        "think_format_reward": "trl.rewards:think_format_reward",
    }


REWARD_NAMES = tuple(_registry())


def get_reward_func(name: str) -> Callable:
    """The reward function called ``name`` (see `REWARD_NAMES`), or the one at a dotted path ``pkg.module.fn``."""
    registry = _registry()
    target = registry.get(name)
    if target is None and "." in name:
        target = "{}:{}".format(*name.rsplit(".", 1))
    if target is None:
        raise ValueError(
            f"Unknown reward function {name!r}. Use one of {sorted(registry)} or a dotted import path such as "
            "'my_package.rewards.my_reward' (a function (prompts, completions, **kwargs) -> list[float])."
        )
    module_name, attribute = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"Cannot import module {module_name!r} for reward function {name!r}: {error}") from error
    try:
        func = getattr(module, attribute)
    except AttributeError as error:
        raise ValueError(f"Module {module_name!r} has no reward function {attribute!r} (from {name!r}).") from error
    if not callable(func):
        raise TypeError(f"{name!r} resolved to {func!r}, which is not callable.")
    from .guard import check_dependencies

    check_dependencies(func)  # a missing optional dependency fails at lookup, with its install hint
    return func


__all__ = ["REWARD_NAMES", "get_reward_func"]
