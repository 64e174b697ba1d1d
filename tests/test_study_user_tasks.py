"""A study on a user's own task: ``python -m lab study self --tasks <reasoning_gym: name>`` (--quick), its warm-started
base, its rerun command, its trivial baseline row, and the refusals."""

import json
import shlex

import pytest

from lab.cli import main


pytest.importorskip("reasoning_gym", reason="needs the [gym] extra (installed by the dev extra)")

NAME = "reasoning_gym:chain_sum?size=40&test_size=5&max_terms=2&max_digits=1&strip_template=true"


def test_quick_study_on_a_reasoning_gym_name_then_its_rerun(tmp_path, monkeypatch, capsys):
    from lab.studies.user_tasks import task_dir_name

    out = tmp_path / "study"
    argv = ["study", "self", "--quick", "--tasks", NAME, "--arms", "base,grpo", "--seeds", "0"]
    assert main([*argv, "--out_dir", str(out)]) == 0
    folder = task_dir_name(NAME)
    assert folder.startswith("chain_sum-")
    result = json.loads((out / folder / "grpo" / "seed0" / "result.json").read_text())
    assert result["dataset"] == NAME and result["reward"] == "reasoning_gym" and result["boundary"]
    assert len(result["num_correct"]) == 3  # the quick sizes' evaluation problems
    table = (out / "results.md").read_text()
    assert f"## {folder}" in table and f"Dataset `{NAME}`" in table
    assert "| trivial_random_signs (guess from the prompt's structure) | 0,1,2 |" in table
    # the run's own rerun command selects the task by its dataset name again, and finds the run finished
    rerun = shlex.split(result["rerun_command"])
    assert rerun[:5] == ["python", "-m", "lab", "study", "self"] and rerun[rerun.index("--tasks") + 1] == NAME
    from trl_rlvr_ext.grpo.grpo_trainer import RLVRGRPOTrainer

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was redone")

    monkeypatch.setattr(RLVRGRPOTrainer, "train", no_training)
    capsys.readouterr()
    assert main(rerun[3:]) == 0
    assert "done, loading" in capsys.readouterr().out


def test_a_reasoning_gym_name_gets_a_warm_started_base(monkeypatch):
    from lab.studies.user_tasks import dataset_task
    from trl_rlvr_ext import gym_bases

    calls = []
    monkeypatch.setattr(gym_bases, "get_gym_base_model_path", lambda **kwargs: calls.append(kwargs) or "/base")
    task = dataset_task(NAME)
    assert task.base_model(False) == "/base" and calls == [{"dataset": NAME, "num_steps": 400}]
    # "<answer>-9</answer>" + EOS + slack: the budget follows the longest train answer
    assert task.max_completion_length == len("<answer>-9</answer>") + 3
    assert task.gold_completion({"answer": "7"}) == "<answer>7</answer>"
    mixture = "reasoning_gym:chain_sum+count_bits?size=20&test_size=3&chain_sum.max_digits=1"
    dataset_task(mixture).base_model(False)
    assert calls[-1] == {"dataset": mixture, "num_steps": 1000}
    # a setting's warm-start overrides reach the build; a base the user gave has no warm start to override
    assert task.base_model(False, num_steps=800) == "/base" and calls[-1] == {"dataset": NAME, "num_steps": 800}
    given = dataset_task(NAME, base_model="/mine")
    assert given.base_model(False) == "/mine"
    with pytest.raises(ValueError, match="the base was given"):
        given.base_model(False, num_steps=800)


def test_refusals_name_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_RLVR_EXT_DEBUG", "1")  # the CLI re-raises its clear errors instead of one line
    data = tmp_path / "own"
    from datasets import Dataset, DatasetDict

    DatasetDict({s: Dataset.from_dict({"prompt": ["1+1="], "answer": ["2"]}) for s in ("train", "test")}).save_to_disk(
        data
    )
    out = str(tmp_path / "out")
    with pytest.raises(ValueError, match="needs --reward .* and --base_model"):
        main(["study", "self", "--quick", "--tasks", str(data), "--out_dir", out])
    with pytest.raises(ValueError, match="runs its own kind of task"):
        main(["study", "is_dpo", "--quick", "--tasks", NAME, "--out_dir", out])
    with pytest.raises(ValueError, match="--reward and --base_model are for a dataset name"):
        main(["study", "self", "--quick", "--tasks", "toy", "--reward", "toy_accuracy", "--out_dir", out])


def test_the_clis_own_example_of_a_users_task_draws_its_splits():
    """The dataset name `python -m lab study --help` and the module's usage give as the example of a study on one's own
    task loads (an earlier example, count_bits with max_n=63, had too few distinct problems for the default splits)."""
    import re

    from lab.scripts import study
    from trl_rlvr_ext.data import load_named_dataset

    examples = set(re.findall(r"'(reasoning_gym:[^']+)'", (study.__doc__ or "") + study.make_parser().format_help()))
    assert examples
    for name in examples:
        splits = load_named_dataset(name)
        assert splits["train"].num_rows > 0 and splits["test"].num_rows > 0
