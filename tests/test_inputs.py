"""Inputs checked before anything loads: the columns rewards and curation read, reward names, model paths, the hub
when it cannot be reached, and the command line's one-line errors."""

import functools
import json
import os
import subprocess
import sys
import time

import pytest
from datasets import Dataset
from grpo_helpers import small_grpo_kwargs

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.data import check_model_name_or_path
from trl_rlvr_ext.rewards.columns import check_reward_columns, reward_columns
from trl_rlvr_ext.rewards.guard import RewardFunctionError, guard_reward_func
from trl_rlvr_ext.rewards.toy import toy_accuracy_reward


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def answer_and_unit(completions, answer, unit, scale=1.0, **kwargs):
    return [0.0] * len(completions)


class CallableReward:
    def __call__(self, prompts, completions, solution, **kwargs):
        return [0.0] * len(completions)


def test_reward_columns_are_the_parameters_trl_does_not_pass():
    assert reward_columns(toy_accuracy_reward) == ["answer"]
    assert reward_columns(answer_and_unit) == ["answer", "unit"]  # `scale` has a default
    assert reward_columns(functools.partial(answer_and_unit, unit="kg")) == ["answer"]
    assert reward_columns(CallableReward()) == ["solution"]
    assert reward_columns(lambda completions, **kwargs: []) == []
    assert reward_columns(guard_reward_func(toy_accuracy_reward)) == ["answer"]  # through the guard
    assert reward_columns("org/reward-model") == []


def test_missing_column_message_names_reward_column_columns_and_fix():
    with pytest.raises(ValueError) as raised:
        check_reward_columns([toy_accuracy_reward], ["prompt", "solution"], "training set")
    message = str(raised.value)
    assert "'toy_accuracy_reward' reads the column(s) ['answer'], which the training set does not have" in message
    assert "(its columns: ['prompt', 'solution'])" in message and "rename_column('solution', 'answer')" in message
    check_reward_columns([toy_accuracy_reward], None, "stream")  # unknown columns: nothing to check up front


def test_the_guard_names_a_missing_column_instead_of_suggesting_zeros():
    for on_error in ("raise", "zero"):
        guarded = guard_reward_func(toy_accuracy_reward, on_error=on_error)
        with pytest.raises(RewardFunctionError) as raised:
            guarded(prompts=["1+1="], completions=["[2]"], completion_ids=[[1]], solution=["2"])
        message = str(raised.value)
        assert "reads the column(s) ['answer'], which the batch does not have" in message
        assert "(its columns: ['solution'])" in message and "reward_on_error" not in message


NO_MODEL = "/nonexistent/model-that-is-never-loaded"


def test_a_missing_answer_column_fails_before_the_model_loads(tmp_path):
    """The model path does not exist: an error about the column (and not about the model) proves the check ran
    first, before TRL tried to load anything."""
    data = Dataset.from_dict({"prompt": ["1+1="] * 4, "solution": ["2"] * 4})
    args = RLVRGRPOConfig(**small_grpo_kwargs(tmp_path))
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"reads the column\(s\) \['answer'\], which the training set does not"):
        RLVRGRPOTrainer(model=NO_MODEL, reward_funcs="toy_accuracy", args=args, train_dataset=data)
    with pytest.raises(ValueError, match="The eval set has no 'prompt' column"):
        RLVRGRPOTrainer(
            model=NO_MODEL, reward_funcs=toy_accuracy_reward, args=args,
            train_dataset=data.rename_column("solution", "answer"), eval_dataset=Dataset.from_dict({"q": ["x"]}),
        )  # fmt: skip
    assert time.monotonic() - started < 5


def test_a_missing_curation_id_column_says_how_to_add_one(tmp_path):
    data = Dataset.from_dict({"prompt": ["1+1="] * 4, "answer": ["2"] * 4})
    args = RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, curation="pass_rate", curation_id_column="idx"))
    with pytest.raises(ValueError) as raised:
        RLVRGRPOTrainer(model=NO_MODEL, reward_funcs=toy_accuracy_reward, args=args, train_dataset=data)
    message = str(raised.value)
    assert "curation_id_column='idx' is not a column of the training set" in message
    assert "Leave curation_id_column unset" in message and "add_column('idx', list(range(len(dataset))))" in message


def test_reward_names_are_functions_and_never_a_hub_lookup(tiny_model_path, tmp_path):
    """TRL reads a string reward as a reward model id (a hub download); a registered name is that function."""
    data = Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(8)], "answer": [str(2 * i) for i in range(8)]})
    args = RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, max_steps=1))
    trainer = RLVRGRPOTrainer(model=tiny_model_path, reward_funcs="toy_accuracy", args=args, train_dataset=data)
    assert trainer.reward_func_names == ["toy_accuracy_reward"]
    with pytest.raises(FileNotFoundError, match="looks like a local path, but nothing is there"):
        RLVRGRPOTrainer(model=NO_MODEL, reward_funcs=["./reward_model"], args=args, train_dataset=data)


def test_an_unreachable_hub_is_one_line_that_says_how_to_go_offline(monkeypatch):
    from huggingface_hub import HfApi

    class ConnectError(Exception):  # the HTTP client's own class, whatever its module
        pass

    def unreachable(self, *args, **kwargs):
        raise ConnectError("[Errno -2] Name or service not known")

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr(HfApi, "model_info", unreachable)
    with pytest.raises(ConnectionError) as raised:
        check_model_name_or_path("behavior_model")
    message = str(raised.value)
    assert "'behavior_model': no such directory" in message and "could not be reached" in message
    assert "set HF_HUB_OFFLINE=1" in message and "\n" not in message


def _cli(*args, env=None, timeout=60):
    environment = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRL_RLVR_EXT_DEBUG")}
    # Without HF_HUB_OFFLINE the hub client tries the network: point it at a closed loopback port, so the test
    # never leaves the machine and the connection is refused at once
    environment.update({"HF_ENDPOINT": "http://127.0.0.1:9", "PYTHONPATH": ROOT, **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "trl_rlvr_ext.cli", *args], capture_output=True, text=True, timeout=timeout,
        env=environment, cwd=ROOT, check=False,
    )  # fmt: skip


def test_cli_missing_paths_and_an_unreachable_hub_fail_at_once_in_one_line(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"prompt": "1+1=", "chosen": "[2]", "rejected": "[3]"}) + "\n")
    for model in ("behavior_model", "./runs/behavior_model"):
        started = time.monotonic()
        result = _cli(
            "score-behavior", "--model_name_or_path", model, "--dataset_path", str(pairs), "--output_path",
            str(tmp_path / "out.jsonl"),
        )  # fmt: skip
        assert time.monotonic() - started < 20  # the interpreter and imports included; the check itself is instant
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
        (line,) = [line for line in result.stderr.splitlines() if line.strip()]
        assert line.startswith("trl-rlvr-ext score-behavior: error: Model ") and model in line


def test_cli_our_errors_have_no_traceback_unless_debug(tmp_path):
    data = tmp_path / "arith.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i)}) + "\n" for i in range(4)))
    argv = ["grpo", "--model_name_or_path", "toy:tiny", "--dataset_name", str(data), "--use_cpu", "true"]
    argv += ["--output_dir", str(tmp_path / "run")]
    result = _cli(*argv, env={"HF_HUB_OFFLINE": "1"})
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "trl-rlvr-ext grpo: error: No reward given for the dataset" in result.stderr
    assert "run again with --debug for the traceback" in result.stderr
    debug = _cli(*argv, "--debug", env={"HF_HUB_OFFLINE": "1"})
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "ValueError: No reward given" in debug.stderr


def test_cli_a_bad_option_value_prints_the_option_not_the_usage(tmp_path):
    result = _cli(
        "grpo", "--config", "toy_nsr", "--loss_type", "dapoo", "--max_steps", "abc", env={"HF_HUB_OFFLINE": "1"}
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) <= 4, result.stderr[-3000:]
    assert lines[0].startswith("trl-rlvr-ext grpo: error: argument --max_steps") and "abc" in lines[0]
    assert lines[1].lstrip().startswith("--max_steps")


def test_console_short_line_and_quiet_warnings(tmp_path):
    """The CLI prints one short line per logging step (every metric in train_log.jsonl) and no dependency
    deprecation warning a user cannot act on; the library itself leaves warnings alone."""
    import warnings

    from trl_rlvr_ext.scripts.console import short_line
    from trl_rlvr_ext.scripts.quiet import quiet_dependency_warnings

    line = short_line({"loss": 0.0123, "reward": 0.45, "grad_norm": 1.5, "epoch": 0.1, "entropy": 5.5}, 10, 200)
    assert line == "step 10/200  loss 0.0123  reward 0.4500  grad norm 1.5000"
    assert short_line({"epoch": 0.1}, 1, 2) is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_dependency_warnings()
        warnings.warn("`is_gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning)
        warnings.warn("something else", FutureWarning)
    assert [str(w.message) for w in caught] == ["something else"]


def test_cli_training_console_is_short_and_the_log_is_whole(tiny_model_path, tmp_path):
    argv = ["grpo", "--config", "toy_nsr", "--model_name_or_path", tiny_model_path, "--max_steps", "2"]
    argv += ["--logging_steps", "1", "--save_strategy", "no", "--output_dir", str(tmp_path / "run")]
    result = _cli(*argv, env={"HF_HUB_OFFLINE": "1"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    steps = [line for line in result.stdout.splitlines() if line.startswith("step ")]
    assert len(steps) == 2 and all(len(line) < 250 and "{" not in line for line in steps)
    assert "FutureWarning" not in result.stderr and "Setting accelerator to CPU" not in result.stderr
    records = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2] and "clip_recovery/high_frac" in records[0]


def test_a_reward_may_read_the_row_column_curation_adds(tiny_model_path, tmp_path):
    """With curation on and no id column, the trainer adds 'curation_row' itself: a reward reading it is fine."""

    def by_row(completions, curation_row, **kwargs):
        return [float(row % 2) for row in curation_row]

    data = Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(8)]})
    args = RLVRGRPOConfig(**small_grpo_kwargs(tmp_path, curation="pass_rate", max_steps=1))
    RLVRGRPOTrainer(model=tiny_model_path, reward_funcs=by_row, args=args, train_dataset=data).train()
    with pytest.raises(ValueError, match=r"reads the column\(s\) \['curation_row'\]"):
        RLVRGRPOTrainer(model=NO_MODEL, reward_funcs=by_row, args=RLVRGRPOConfig(**small_grpo_kwargs(tmp_path)),
                        train_dataset=data)  # fmt: skip
