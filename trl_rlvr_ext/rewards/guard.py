"""Guarded reward functions: a failing or misbehaving reward names itself, the row and the completion.

`RLVRGRPOTrainer` wraps every callable reward function in a `GuardedReward` before TRL sees it. With a well-behaved
reward the wrapper returns the reward's own list object untouched, under the reward's own ``__name__`` (so TRL's
``rewards/<name>/mean`` metrics keep their names), and training is stock TRL to the bit.

What it checks, per call (one process's batch of completions):

- The reward raises. ``on_error="raise"`` (default): the rows are re-scored one at a time (a reward called with
  one-element columns) to find the first row that raises, and a `RewardFunctionError` names the function, that row
  and a shortened completion, chained to the original exception. ``on_error="zero"``: every row is scored on its own;
  the rows that raise score 0.0, and their number is logged as ``rewards/errors``.
- The output has the wrong length, or is not a sequence: always a `RewardFunctionError` (a bug of the function).
- A value is NaN. ``on_nan="ignore"`` (default): TRL's meaning, kept to the bit: the row gets no reward from this
  function (TRL turns ``None`` into NaN itself and sums over reward functions with ``nansum``). The first NaN of each
  reward is logged as a warning naming the function, the row and the completion, since a NaN often means a broken
  reward. ``on_nan="error"``: NaN is treated as the other bad values below.
- A value is infinite or not a number (or NaN with ``on_nan="error"``): `RewardFunctionError` naming the row, or 0.0
  and counted with ``on_error="zero"``.
- A value is ``None``: kept, with TRL's meaning: the row gets no reward from this function (it is left out of the
  weighted sum across reward functions; a row with ``None`` from every function gets reward 0 and TRL warns).

A reward function that accepts a ``reward_timeout`` keyword (such as `math_accuracy_reward`) receives the
configured timeout through it, unless the caller (or a ``functools.partial``) already sets it.
"""

import functools
import inspect
import logging
import math
from collections.abc import Callable

from .columns import TRL_REWARD_KWARGS, missing_column_message, reward_columns


REWARD_ON_ERROR_MODES = ("raise", "zero")
REWARD_ON_NAN_MODES = ("ignore", "error")
logger = logging.getLogger(__name__)
# kwargs TRL passes that are callbacks, not per-row columns: silenced while rows are re-scored one by one
_CALLBACK_KWARGS = ("log_extra", "log_metric")


class RewardFunctionError(RuntimeError):
    """A reward function raised, or returned something GRPO cannot use."""


def shorten(text, limit: int = 160) -> str:
    """``repr`` of a completion (or any value) cut to about ``limit`` characters, with the total length stated."""
    if not isinstance(text, str):
        text = repr(text)
        return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
    if len(text) <= limit:
        return repr(text)
    head, tail = text[: limit * 2 // 3], text[-(limit // 3) :]
    return f"{head!r} ... {tail!r} ({len(text)} characters)"


def _callable_name(func: Callable) -> str:
    while isinstance(func, functools.partial):
        func = func.func
    return getattr(func, "__name__", type(func).__name__)


def _is_async(func: Callable) -> bool:
    while isinstance(func, functools.partial):
        func = func.func
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(type(func).__call__)


def _takes_timeout(func: Callable) -> bool:
    """Whether ``func`` names a ``reward_timeout`` parameter that no ``functools.partial`` around it already binds."""
    inner = func
    while isinstance(inner, functools.partial):
        if "reward_timeout" in inner.keywords:
            return False
        inner = inner.func
    try:
        parameter = inspect.signature(func).parameters.get("reward_timeout")
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return False
    return parameter is not None and parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)


def _completion_of(kwargs: dict, row: int):
    completion = kwargs["completions"][row]
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        completion = completion[-1].get("content")
    return completion


def check_dependencies(func: Callable) -> None:
    """Run the reward's own dependency check, if it has one (a ``check_dependencies`` attribute raising ImportError
    with the install hint): the shipped rewards with optional dependencies carry one."""
    check = getattr(func, "check_dependencies", None)
    if callable(check):
        check()


class GuardedReward:
    """A reward function with checked outputs and errors that name the function, row and completion.

    Args:
        func (`Callable`): the reward function ``(prompts, completions, **kwargs) -> list[float | None]``.
        on_error (`str`): ``"raise"`` (fail the call with a `RewardFunctionError`) or ``"zero"`` (score the rows that
            raise or return NaN / infinity / a non-number 0.0, and count them as ``rewards/errors``).
        timeout (`float`, *optional*): passed as ``reward_timeout`` to a function that accepts it.
        on_nan (`str`): ``"ignore"`` (TRL's meaning: a NaN row gets no reward from this function; the first one is
            logged as a warning) or ``"error"`` (a NaN is a bad value, as infinity is).
    """

    def __init__(self, func: Callable, on_error: str = "raise", timeout: float | None = None, on_nan: str = "ignore"):
        if on_error not in REWARD_ON_ERROR_MODES:
            raise ValueError(f"on_error={on_error!r} is not supported. Use one of {list(REWARD_ON_ERROR_MODES)}.")
        if on_nan not in REWARD_ON_NAN_MODES:
            raise ValueError(f"on_nan={on_nan!r} is not supported. Use one of {list(REWARD_ON_NAN_MODES)}.")
        # A reward with an optional dependency fails here, when the trainer is built, not at its first call in train()
        check_dependencies(func)
        self.func, self.on_error, self.timeout, self.on_nan = func, on_error, timeout, on_nan
        self._warned_nan = False
        self._columns = reward_columns(func)  # dataset columns the function reads (a missing one is named, below)
        self._passes_timeout = _takes_timeout(func)
        # TRL names a reward's metrics after `__name__`: keep the wrapped function's
        self.__name__ = _callable_name(func)
        self.__qualname__ = getattr(func, "__qualname__", self.__name__)
        self.__doc__ = getattr(func, "__doc__", None)
        self.__wrapped__ = func

    def __repr__(self):
        return (
            f"GuardedReward({self.func!r}, on_error={self.on_error!r}, timeout={self.timeout!r}, "
            f"on_nan={self.on_nan!r})"
        )

    # ------------------------------------------------------------------ the call
    def _prepare(self, kwargs: dict) -> tuple[dict, int]:
        if "completions" not in kwargs:
            raise TypeError(f"{self.__name__} must be called with keyword arguments, including completions=...")
        missing = [column for column in self._columns if column not in kwargs]
        if missing:
            # A configuration error, not a failing row: never answered by scoring zeros (reward_on_error='zero')
            present = [key for key in kwargs if key not in TRL_REWARD_KWARGS]
            raise RewardFunctionError(missing_column_message(self.__name__, missing, present, "batch"))
        if self._passes_timeout and "reward_timeout" not in kwargs:
            kwargs = {**kwargs, "reward_timeout": self.timeout}
        return kwargs, len(kwargs["completions"])

    def __call__(self, **kwargs):
        kwargs, n = self._prepare(kwargs)
        try:
            output = self.func(**kwargs)
        except Exception as error:  # noqa: BLE001 - any failure of user code is reported with its row
            output, errors = self._rescore_rows(kwargs, n, error, self._call_row)
        else:
            errors = 0
        return self._check(output, kwargs, n, errors)

    def _call_row(self, row_kwargs: dict):
        return self.func(**row_kwargs)

    # ------------------------------------------------------------------ failure path
    @staticmethod
    def _row_kwargs(kwargs: dict, row: int, n: int) -> dict:
        """The kwargs of a call on row ``row`` alone: every per-row column cut to that row, callbacks silenced."""
        row_kwargs = {}
        for key, value in kwargs.items():
            if key in _CALLBACK_KWARGS:
                value = _discard
            elif isinstance(value, list | tuple) and len(value) == n:
                value = value[row : row + 1]
            row_kwargs[key] = value
        return row_kwargs

    def _row_error(self, row: int, kwargs: dict, error: BaseException) -> RewardFunctionError:
        return RewardFunctionError(
            f"Reward function {self.__name__!r} raised {type(error).__name__}: {error} on row {row} of this "
            f"process's batch, completion {shorten(_completion_of(kwargs, row))}. Fix the reward function for such "
            "completions, or set reward_on_error='zero' to score the rows that raise 0.0 and go on (they are then "
            "counted in the rewards/errors metric)."
        )

    def _rescore_rows(self, kwargs: dict, n: int, batch_error: Exception, call_row) -> tuple[list, int]:
        scores, errors = [], 0
        for row in range(n):
            try:
                value = call_row(self._row_kwargs(kwargs, row, n))
            except Exception as error:
                if self.on_error == "raise":
                    raise self._row_error(row, kwargs, error) from error
                scores.append(0.0)
                errors += 1
                continue
            if not hasattr(value, "__len__") or len(value) != 1:
                raise RewardFunctionError(
                    f"Reward function {self.__name__!r} raised {type(batch_error).__name__}: {batch_error} on a batch "
                    f"of {n} completions; called on row {row} alone it returned {shorten(value)} instead of one "
                    "reward, so the failing row cannot be found."
                ) from batch_error
            scores.append(value[0])
        if errors == 0:
            raise RewardFunctionError(
                f"Reward function {self.__name__!r} raised {type(batch_error).__name__}: {batch_error} on a batch of "
                f"{n} completions, but on none of them alone: it depends on the batch as a whole. Fix the reward "
                "function."
            ) from batch_error
        return scores, errors

    # ------------------------------------------------------------------ output checks
    def _check(self, output, kwargs: dict, n: int, errors: int):
        if isinstance(output, str | bytes | dict) or not hasattr(output, "__len__"):
            raise RewardFunctionError(
                f"Reward function {self.__name__!r} returned {shorten(output)}; it must return a list with one reward "
                f"(a float, or None to give none) per completion, here {n}."
            )
        if len(output) != n:
            raise RewardFunctionError(
                f"Reward function {self.__name__!r} returned {len(output)} rewards for {n} completions; it must return "
                "exactly one reward (a float, or None to give none) per completion, in the order of `completions`."
            )
        fixed = None
        for row, value in enumerate(output):
            if value is None or _is_finite_number(value):
                continue
            if self.on_nan == "ignore" and _is_nan(value):
                self._warn_nan_once(row, kwargs)
                continue
            if self.on_error == "raise":
                raise RewardFunctionError(
                    f"Reward function {self.__name__!r} returned {value!r} for row {row} of this process's batch, "
                    f"completion {shorten(_completion_of(kwargs, row))}. Rewards must be finite numbers; return None "
                    "(or NaN, with reward_on_nan='ignore') to give a row no reward from this function (TRL then leaves "
                    "it out of the sum over reward functions), or set reward_on_error='zero' to score such rows 0.0 "
                    "and count them."
                )
            fixed = list(output) if fixed is None else fixed
            fixed[row] = 0.0
            errors += 1
        if self.on_error == "zero" and kwargs.get("log_metric") is not None:
            kwargs["log_metric"]("rewards/errors", float(errors))
        return output if fixed is None else fixed

    def _warn_nan_once(self, row: int, kwargs: dict) -> None:
        if self._warned_nan:
            return
        self._warned_nan = True
        logger.warning(
            "Reward function %r returned NaN for row %d of this process's batch, completion %s. As in TRL, the row "
            "gets no reward from this function (it is left out of the sum over reward functions; a row with no reward "
            "from any function scores 0). If a NaN means the reward is broken, set reward_on_nan='error' to fail (or, "
            "with reward_on_error='zero', to score such rows 0.0 and count them). Warned once per reward function.",
            self.__name__,
            row,
            shorten(_completion_of(kwargs, row)),
        )


class AsyncGuardedReward(GuardedReward):
    """`GuardedReward` for an ``async`` reward function (TRL awaits it on its event loop)."""

    async def __call__(self, **kwargs):
        kwargs, n = self._prepare(kwargs)
        try:
            output = await self.func(**kwargs)
        except Exception as error:  # noqa: BLE001 - any failure of user code is reported with its row
            output, errors = await self._async_rescore(kwargs, n, error)
        else:
            errors = 0
        return self._check(output, kwargs, n, errors)

    async def _async_rescore(self, kwargs: dict, n: int, batch_error: Exception) -> tuple[list, int]:
        # Await each row first, then reuse the synchronous bookkeeping on the collected outcomes.
        outcomes = []
        for row in range(n):
            try:
                outcomes.append(("ok", await self.func(**self._row_kwargs(kwargs, row, n))))
            except Exception as error:  # noqa: BLE001 - replayed below, where it is reported with its row
                outcomes.append(("error", error))
                if self.on_error == "raise":
                    break

        replayed = iter(outcomes)

        def replay(row_kwargs):
            status, value = next(replayed)
            if status == "error":
                raise value
            return value

        return self._rescore_rows(kwargs, len(outcomes) if self.on_error == "raise" else n, batch_error, replay)


def _discard(*args, **kwargs) -> None:
    return None


def _as_float(value) -> float | None:
    """``float(value)`` for a number, ``None`` for anything else (strings included, though ``float`` parses them)."""
    if isinstance(value, str | bytes):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _is_nan(value) -> bool:
    number = _as_float(value)
    return number is not None and math.isnan(number)


def _is_finite_number(value) -> bool:
    number = _as_float(value)
    return number is not None and math.isfinite(number)


def guard_reward_func(
    func: Callable, on_error: str = "raise", timeout: float | None = None, on_nan: str = "ignore"
) -> Callable:
    """``func`` wrapped in a `GuardedReward` (or `AsyncGuardedReward` for an ``async`` function); models (``str`` ids,
    ``torch.nn.Module``) and already guarded functions are returned as they are."""
    if isinstance(func, str | GuardedReward) or hasattr(func, "reward_guard") or not callable(func):
        return func
    try:
        from torch import nn

        if isinstance(func, nn.Module):
            return func
    except ImportError:  # pragma: no cover - torch is a dependency of every trainer
        pass
    if not _is_async(func):
        return GuardedReward(func, on_error=on_error, timeout=timeout, on_nan=on_nan)
    guarded = AsyncGuardedReward(func, on_error=on_error, timeout=timeout, on_nan=on_nan)

    # A coroutine function, not an instance with an async __call__: `inspect.iscoroutinefunction` must see it (this
    # package's grading helpers and TRL's own checks use it).
    async def guarded_async_reward(**kwargs):
        return await guarded(**kwargs)

    guarded_async_reward.__name__ = guarded.__name__
    guarded_async_reward.__qualname__ = guarded.__qualname__
    guarded_async_reward.__doc__ = guarded.__doc__
    guarded_async_reward.__wrapped__ = func
    guarded_async_reward.reward_guard = guarded
    return guarded_async_reward


def guard_reward_funcs(reward_funcs, on_error: str = "raise", timeout: float | None = None, on_nan: str = "ignore"):
    """`guard_reward_func` on one reward function or on each of a list (``None`` stays ``None``)."""
    if reward_funcs is None:
        return None
    if isinstance(reward_funcs, list):
        return [guard_reward_func(f, on_error=on_error, timeout=timeout, on_nan=on_nan) for f in reward_funcs]
    return guard_reward_func(reward_funcs, on_error=on_error, timeout=timeout, on_nan=on_nan)


__all__ = [
    "REWARD_ON_ERROR_MODES",
    "REWARD_ON_NAN_MODES",
    "AsyncGuardedReward",
    "GuardedReward",
    "RewardFunctionError",
    "guard_reward_func",
    "guard_reward_funcs",
]
