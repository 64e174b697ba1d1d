"""Guarded reward functions: errors name the function, row and completion; NaN / wrong length / non-numbers are clear
errors; None keeps TRL's meaning; reward_on_error="zero" scores failing rows 0 and counts them; names are kept."""

import asyncio
import functools
import inspect
import math

import pytest
import torch
from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.rewards.guard import GuardedReward, RewardFunctionError, guard_reward_func, shorten


def _explodes_on_boom(completions, **kwargs):
    return [1 / 0 if "boom" in c else float(len(c)) for c in completions]


def _returns(values):
    def reward(completions, **kwargs):
        return values

    return reward


def _call(func, completions, **kwargs):
    return func(prompts=["p"] * len(completions), completions=completions, **kwargs)


def test_a_well_behaved_reward_passes_through_untouched():
    output = [0.5, None, 1]
    guarded = guard_reward_func(_returns(output))
    assert _call(guarded, ["a", "b", "c"]) is output
    assert guard_reward_func(digit_reward).__name__ == "digit_reward"
    assert guard_reward_func(functools.partial(digit_reward)).__name__ == "digit_reward"
    assert guard_reward_func(guarded) is guarded
    assert guard_reward_func("org/reward-model") == "org/reward-model"
    module = torch.nn.Linear(1, 1)
    assert guard_reward_func(module) is module


def test_a_raising_reward_names_function_row_and_completion():
    guarded = guard_reward_func(_explodes_on_boom)
    long_boom = "boom" + "x" * 5000
    with pytest.raises(RewardFunctionError) as info:
        _call(guarded, ["fine", "ok", long_boom])
    message = str(info.value)
    assert "'_explodes_on_boom'" in message and "ZeroDivisionError" in message and "row 2" in message
    assert "'boomxxx" in message and "(5004 characters)" in message and len(message) < 700
    assert "reward_on_error='zero'" in message
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_zero_mode_scores_raising_rows_zero_and_counts_them():
    logged = []
    guarded = guard_reward_func(_explodes_on_boom, on_error="zero")
    rewards = _call(guarded, ["abc", "boom", "de"], log_metric=lambda name, value: logged.append((name, value)))
    assert rewards == [3.0, 0.0, 2.0]
    assert logged == [("rewards/errors", 1.0)]
    _call(guarded, ["abc"], log_metric=lambda name, value: logged.append((name, value)))
    assert logged[-1] == ("rewards/errors", 0.0)  # logged at every call, so the logged mean is a rate


def test_rows_are_rescored_with_their_own_columns_and_silenced_callbacks():
    seen = []

    def reward(completions, answer, trainer_state, log_metric, **kwargs):
        log_metric("custom", 1.0)
        seen.append((list(completions), list(answer), trainer_state))
        if "boom" in completions:
            raise ValueError("bad row")
        return [float(c == a) for c, a in zip(completions, answer)]

    logged = []
    guarded = guard_reward_func(reward, on_error="zero")
    state = object()
    rewards = _call(
        guarded,
        ["1", "boom", "3"],
        answer=["1", "2", "4"],
        trainer_state=state,
        log_metric=lambda *a: logged.append(a),
    )
    assert rewards == [1.0, 0.0, 0.0]
    assert seen[1:] == [(["1"], ["1"], state), (["boom"], ["2"], state), (["3"], ["4"], state)]
    assert logged == [("custom", 1.0), ("rewards/errors", 1.0)]  # the per-row re-scoring logs nothing


def test_a_failure_of_the_whole_batch_only_is_named():
    def batch_only(completions, **kwargs):
        if len(completions) > 1:
            raise RuntimeError("batch too big")
        return [1.0]

    with pytest.raises(RewardFunctionError, match="'batch_only' raised RuntimeError: batch too big on a batch of 2"):
        _call(guard_reward_func(batch_only, on_error="zero"), ["a", "b"])


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ([1.0, math.nan], r"'reward' returned nan for row 1 .* completion 'b'"),
        ([math.inf, 1.0], r"'reward' returned inf for row 0"),
        ([1.0, "1.0"], r"'reward' returned '1.0' for row 1"),
        ([1.0, [1.0]], r"'reward' returned \[1.0\] for row 1"),
        ([1.0], r"'reward' returned 1 rewards for 2 completions"),
        ([1.0, 2.0, 3.0], r"'reward' returned 3 rewards for 2 completions"),
        (1.0, r"'reward' returned 1.0; it must return a list"),
        ("ab", r"'reward' returned 'ab'; it must return a list"),
        (None, r"'reward' returned None; it must return a list"),
    ],
)
def test_bad_outputs_are_clear_errors(output, message):
    with pytest.raises(RewardFunctionError, match=message):
        _call(guard_reward_func(_returns(output), on_nan="error"), ["a", "b"])
    has_nan = isinstance(output, list) and any(isinstance(v, float) and math.isnan(v) for v in output)
    if not has_nan:
        with pytest.raises(RewardFunctionError, match=message):  # the default differs only for NaN
            _call(guard_reward_func(_returns(output)), ["a", "b"])


def test_nan_keeps_trls_meaning_by_default_and_warns_once(caplog):
    """NaN is TRL's "no reward from this function": the output passes through untouched (so TRL sums it with nansum,
    exactly as without the guard), and the first NaN of each reward is a warning naming it, the row and completion."""
    output = [1.0, math.nan, math.nan]
    guarded = guard_reward_func(_returns(output))
    with caplog.at_level("WARNING", logger="trl_rlvr_ext.rewards.guard"):
        assert _call(guarded, ["a", "b", "c"]) is output
        assert _call(guarded, ["a", "b", "c"]) is output
    warnings = [r.getMessage() for r in caplog.records if r.name == "trl_rlvr_ext.rewards.guard"]
    assert len(warnings) == 1
    assert "'reward' returned NaN for row 1" in warnings[0] and "completion 'b'" in warnings[0]
    assert "reward_on_nan='error'" in warnings[0]
    with pytest.raises(ValueError, match=r"on_nan='skip' is not supported. Use one of \['ignore', 'error'\]"):
        guard_reward_func(_returns(output), on_nan="skip")


def test_zero_mode_zeroes_nan_and_non_numbers_but_not_a_wrong_length():
    logged = []
    guarded = guard_reward_func(_returns([math.nan, None, "x", 0.5]), on_error="zero", on_nan="error")
    rewards = _call(guarded, list("abcd"), log_metric=lambda *a: logged.append(a))
    assert rewards == [0.0, None, 0.0, 0.5]
    assert logged == [("rewards/errors", 2.0)]
    with pytest.raises(RewardFunctionError, match="returned 1 rewards for 2"):
        _call(guard_reward_func(_returns([1.0]), on_error="zero"), ["a", "b"])


def test_none_keeps_trls_meaning():
    """None passes through (TRL turns it into NaN and leaves the row out of the sum over reward functions)."""
    output = [None, None]
    assert _call(guard_reward_func(_returns(output)), ["a", "b"]) is output


def test_async_rewards_stay_coroutine_functions():
    async def async_reward(completions, **kwargs):
        await asyncio.sleep(0)
        return [1 / 0 if c == "boom" else 1.0 for c in completions]

    guarded = guard_reward_func(async_reward, on_error="zero")
    assert inspect.iscoroutinefunction(guarded) and guarded.__name__ == "async_reward"
    assert asyncio.run(_call(guarded, ["a", "boom"])) == [1.0, 0.0]
    with pytest.raises(RewardFunctionError, match="'async_reward' raised ZeroDivisionError.* row 1"):
        asyncio.run(_call(guard_reward_func(async_reward), ["a", "boom", "boom"]))


def test_reward_timeout_reaches_functions_that_take_it():
    def timed(completions, reward_timeout=99.0, **kwargs):
        return [reward_timeout] * len(completions)

    assert _call(guard_reward_func(timed, timeout=2.5), ["a"]) == [2.5]
    assert _call(guard_reward_func(timed, timeout=2.5), ["a"], reward_timeout=1.0) == [1.0]
    assert _call(guard_reward_func(functools.partial(timed, reward_timeout=4.0), timeout=2.5), ["a"]) == [4.0]
    assert _call(guard_reward_func(digit_reward, timeout=2.5), ["a1"]) == [0.5]  # not passed to others


def test_shorten():
    assert shorten("abc") == "'abc'"
    short = shorten("x" * 1_000_000)
    assert len(short) < 250 and "(1000000 characters)" in short


def test_guard_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match="on_error='skip' is not supported"):
        GuardedReward(digit_reward, on_error="skip")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"reward_on_error": "skip"}, r"reward_on_error='skip' is not supported. Use one of \['raise', 'zero'\]"),
        ({"reward_timeout": 0}, "reward_timeout must be a number of seconds > 0"),
        ({"reward_timeout": -1.0}, "reward_timeout must be a number of seconds > 0"),
    ],
)
def test_config_rejects_invalid_values(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        RLVRGRPOConfig(**grpo_kwargs(tmp_path, **overrides))


def boom_on_first(completions, **kwargs):
    """Raises on the first completion of each call: a reward that breaks on one odd completion."""
    return [1 / 0 if i == 0 else digit_reward([c])[0] for i, c in enumerate(completions)]


def test_trainer_fails_the_step_naming_the_reward(tiny_model_path, tmp_path):
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, max_steps=1))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=boom_on_first, args=args, train_dataset=prompt_dataset()
    )
    assert trainer.reward_func_names == ["boom_on_first"]
    with pytest.raises(
        RewardFunctionError, match="'boom_on_first' raised ZeroDivisionError: division by zero on row 0"
    ):
        trainer.train()


def boom_on_odd_prompts(prompts, completions, **kwargs):
    """Raises on the completions of prompts with an odd number (those of `prompt_dataset` start with it)."""
    return [1 / 0 if int(p.split("+")[0]) % 2 else 1.0 for p in prompts]


def test_trainer_zero_mode_goes_on_and_logs_the_errors(tiny_model_path, tmp_path):
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, max_steps=2, num_iterations=1, reward_on_error="zero"))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path,
        reward_funcs=[boom_on_odd_prompts, digit_reward],
        args=args,
        train_dataset=prompt_dataset(),
    )
    trainer.train()
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 2
    for log in logs:
        # 8 completions (2 prompts x 4) per call; a row scores 1.0 unless its prompt is odd (raises, scored 0.0).
        # rewards/errors is the mean over the two reward calls of the step (digit_reward logs 0 errors).
        errors = (1 - log["rewards/boom_on_odd_prompts/mean"]) * 8
        assert errors in (0, 4, 8)
        assert log["rewards/errors"] == errors / 2
    assert any(log["rewards/errors"] > 0 for log in logs), "no prompt raised: the test is void (change the seed)"


def nan_on_odd_prompts(prompts, completions, **kwargs):
    """NaN (no reward) for the completions of odd prompts, a dense reward for the others."""
    return [math.nan if int(p.split("+")[0]) % 2 else r for p, r in zip(prompts, digit_reward(completions))]


def test_trainer_with_a_nan_reward_is_stock_grpo_and_strict_mode_fails(tiny_model_path, tmp_path):
    """A reward returning NaN for some rows trains exactly as under stock GRPOTrainer (TRL's meaning: no reward from
    it), and reward_on_nan='error' fails the step naming the function."""
    from trl import GRPOConfig, GRPOTrainer

    runs = []
    for trainer_cls, config_cls in ((GRPOTrainer, GRPOConfig), (RLVRGRPOTrainer, RLVRGRPOConfig)):
        args = config_cls(**grpo_kwargs(tmp_path / trainer_cls.__name__, max_steps=2))
        trainer = trainer_cls(
            model=tiny_model_path,
            reward_funcs=[nan_on_odd_prompts, digit_reward],
            args=args,
            train_dataset=prompt_dataset(),
        )
        trainer.train()
        logs = [{k: v for k, v in log.items() if k != "step_time"} for log in trainer.state.log_history]
        runs.append((logs, [p.detach().clone() for p in trainer.model.parameters()]))
    (stock_logs, stock_params), (our_logs, our_params) = runs
    assert stock_logs[:2] == our_logs[:2]
    assert all(torch.equal(a, b) for a, b in zip(stock_params, our_params))
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path / "strict", max_steps=1, reward_on_nan="error"))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=nan_on_odd_prompts, args=args, train_dataset=prompt_dataset()
    )
    with pytest.raises(RewardFunctionError, match="'nan_on_odd_prompts' returned nan for row"):
        trainer.train()


def tower_on_first(completions, reward_timeout, log_metric, **kwargs):
    """math_accuracy on a power tower for the first completion and an ordinary answer for the others."""
    from trl_rlvr_ext.rewards.math import math_accuracy_reward

    texts = ["\\boxed{9^{9^{9^{9^{9}}}}}"] + ["\\boxed{3}"] * (len(completions) - 1)
    return math_accuracy_reward(texts, answer=["3"] * len(texts), reward_timeout=reward_timeout, log_metric=log_metric)


def test_trainer_logs_reward_timeouts(tiny_model_path, tmp_path):
    pytest.importorskip("math_verify")
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path, max_steps=1, reward_timeout=0.5))
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path, reward_funcs=tower_on_first, args=args, train_dataset=prompt_dataset()
    )
    trainer.train()
    (log,) = [log for log in trainer.state.log_history if "loss" in log]
    assert log["rewards/timeouts"] == 1.0
    assert log["rewards/tower_on_first/mean"] == 7 / 8


def test_a_missing_reward_dependency_fails_when_the_trainer_is_built(tiny_model_path, tmp_path, monkeypatch):
    import importlib.util

    from trl_rlvr_ext.rewards import get_reward_func
    from trl_rlvr_ext.rewards.math import math_accuracy_reward

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "math_verify" else real_find_spec(name, *a)
    )
    with pytest.raises(ImportError, match=r"pip install 'math-verify>=0\.8'"):
        get_reward_func("math_accuracy")
    args = RLVRGRPOConfig(**grpo_kwargs(tmp_path))
    with pytest.raises(ImportError, match="math_accuracy_reward needs math-verify"):
        RLVRGRPOTrainer(
            model=tiny_model_path, reward_funcs=math_accuracy_reward, args=args, train_dataset=prompt_dataset()
        )
