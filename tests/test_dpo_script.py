"""The IS-DPO script (`python -m trl_rlvr_ext.scripts.dpo`), its recipes, and the behaviour scorer's command line."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset, load_from_disk
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_rlvr_ext.dpo import behavior
from trl_rlvr_ext.scripts import dpo, score_behavior
from trl_rlvr_ext.toy.preference import load_toy_dataset, make_toy_preference_dataset


ROOT = Path(__file__).resolve().parents[1]
TOY_RECIPE = ROOT / "recipes" / "dpo" / "toy_isdpo.yaml"
LLAMA_RECIPE = ROOT / "recipes" / "dpo" / "llama3.2-3b_hh_isdpo.yaml"


def _toy_args(model_path, output_dir, *extra):
    return [
        "--config", str(TOY_RECIPE), "--model_name_or_path", model_path, "--output_dir", str(output_dir),
        "--max_steps", "2", "--logging_steps", "1", *extra,
    ]  # fmt: skip


def test_toy_recipe_runs(tiny_model_path, tmp_path):
    parsed = dpo.make_parser().parse_args_and_config(args=_toy_args(tiny_model_path, tmp_path / "run"))
    trainer = dpo.main(*parsed)
    logged = {key for log in trainer.state.log_history for key in log}
    assert {"train_loss", "is/weight_mean", "is/clipped_frac", "is/ess", "rewards/margins"} <= logged
    assert (tmp_path / "run" / "config.json").exists() and any((tmp_path / "run").glob("*.safetensors"))
    # The command-line entry point returns 0 once the model is saved
    assert dpo.cli_main(_toy_args(tiny_model_path, tmp_path / "cli", "--max_steps", "1")) == 0
    assert (tmp_path / "cli" / "config.json").exists()


def test_toy_recipe_parses_to_the_documented_values():
    script_args, training_args, model_args, _ = dpo.make_parser().parse_args_and_config(
        args=["--config", str(TOY_RECIPE)]
    )
    assert script_args.dataset_name == "toy:preference" and model_args.model_name_or_path == "toy:tiny"
    assert training_args.importance_sampling is True
    assert training_args.importance_weight_cap == pytest.approx(math.exp(0.5))
    assert training_args.loss_type == ["sigmoid"] and training_args.use_cpu and not training_args.bf16


def test_llama_recipe_has_the_papers_settings():
    script_args, training_args, model_args, _ = dpo.make_parser().parse_args_and_config(
        args=["--config", str(LLAMA_RECIPE), "--use_cpu", "true", "--bf16", "false"]  # parse only; no GPU here
    )
    assert model_args.model_name_or_path == "DatPySci/Llama-3.2-3B-sft-mixture"
    assert script_args.dataset_name == "Anthropic/hh-rlhf"
    assert training_args.beta == 0.05 and training_args.learning_rate == 1e-6 and training_args.num_train_epochs == 1
    # batch 128 on the 8 GPUs of the launch line
    assert training_args.per_device_train_batch_size * 8 * training_args.gradient_accumulation_steps == 128
    assert training_args.importance_weight_cap == pytest.approx(math.exp(2.0))
    assert training_args.importance_sampling is True


def _write_split(directory, rows):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "train.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return str(directory)


def test_bad_datasets_fail_with_clear_errors(tiny_model_path, tmp_path):
    no_chosen = _write_split(tmp_path / "no_chosen", [{"prompt": "1+1=", "answer": "2"}] * 4)
    with pytest.raises(ValueError, match=r"not a preference dataset: it has no \['chosen', 'rejected'\]"):
        dpo.cli_main(_toy_args(tiny_model_path, tmp_path / "a", "--dataset_name", no_chosen))
    row = {"prompt": "1+1=", "chosen": "2", "rejected": "3", "behavior_chosen_logps": -3.0}
    one_column = _write_split(tmp_path / "one_column", [row] * 4)
    with pytest.raises(ValueError, match="has the column 'behavior_chosen_logps' but not 'behavior_rejected_logps'"):
        dpo.cli_main(_toy_args(tiny_model_path, tmp_path / "b", "--dataset_name", one_column))
    with pytest.raises(ValueError, match="Unknown toy dataset"):
        dpo.cli_main(_toy_args(tiny_model_path, tmp_path / "c", "--dataset_name", "toy:nope"))
    misspelt = tmp_path / "misspelt.yaml"
    misspelt.write_text(TOY_RECIPE.read_text() + "\nis_weight_mx: 2.0\n")
    with pytest.raises(ValueError, match="is_weight_mx"):
        dpo.cli_main(["--config", str(misspelt), "--model_name_or_path", tiny_model_path])


def test_toy_preference_data():
    data = load_toy_dataset("toy:preference")
    assert set(data) == {"train", "test"} and len(data["train"]) == 512
    assert len(data["test"]) == 64 and data["train"][:4] != data["test"][:4]
    for row in make_toy_preference_dataset(200, seed=1):
        a, op, b = row["prompt"][:-1].partition("+") if "+" in row["prompt"] else row["prompt"][:-1].partition("-")
        right = int(a) + int(b) if op == "+" else int(a) - int(b)
        assert row["prompt"].endswith("=") and int(row["chosen"]) == right and int(row["rejected"]) != right
        assert int(row["rejected"]) >= 0
    assert make_toy_preference_dataset(8, seed=2)[:] == make_toy_preference_dataset(8, seed=2)[:]


def test_score_behavior_cli(tiny_model_path, tmp_path, capsys):
    dataset = make_toy_preference_dataset(6, seed=4)
    dataset.save_to_disk(str(tmp_path / "pairs"))
    out = tmp_path / "scored.jsonl"
    argv = ["--model_name_or_path", tiny_model_path, "--dataset_path", str(tmp_path / "pairs"),
            "--output_path", str(out), "--batch_size", "4", "--max_length", "32"]  # fmt: skip
    assert score_behavior.cli_main(argv) == 0
    scored = Dataset.from_json(str(out))
    expected = behavior.score_behavior_logps(
        dataset,
        AutoModelForCausalLM.from_pretrained(tiny_model_path),
        AutoTokenizer.from_pretrained(tiny_model_path),
        max_length=32,
        show_progress=False,
    )
    for column in behavior.BEHAVIOR_COLUMNS:
        torch.testing.assert_close(torch.tensor(scored[column]), torch.tensor(expected[column]))
    # A save_to_disk directory as output, and a refusal to overwrite the columns silently
    assert score_behavior.cli_main([*argv[:5], str(tmp_path / "scored_dir")]) == 0
    assert set(behavior.BEHAVIOR_COLUMNS) <= set(load_from_disk(str(tmp_path / "scored_dir")).column_names)
    # Bad inputs stop before the model is loaded: exit status 2, the fix on stderr, no traceback
    capsys.readouterr()
    assert score_behavior.cli_main([*argv[:3], str(out), "--output_path", str(tmp_path / "again.jsonl")]) == 2
    assert "--overwrite" in capsys.readouterr().err
    (tmp_path / "pairs.csv").write_text("prompt,chosen,rejected\n1+1=,2,3\n")
    assert score_behavior.cli_main([*argv[:3], str(tmp_path / "pairs.csv"), "--output_path", "x.jsonl"]) == 2
    assert "Cannot read" in capsys.readouterr().err


def test_score_behavior_checks_everything_before_loading_the_model(tiny_model_path, tmp_path, capsys, monkeypatch):
    import transformers

    monkeypatch.setattr(
        transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: pytest.fail("model loaded first")
    )
    from datasets import DatasetDict

    pairs = tmp_path / "pairs"
    DatasetDict(
        {"train": make_toy_preference_dataset(4, seed=0), "test": make_toy_preference_dataset(2, seed=1)}
    ).save_to_disk(str(pairs))
    ok = ["--model_name_or_path", tiny_model_path, "--dataset_path", str(pairs)]
    # several splits cannot go into one file: said before scoring, not after
    assert score_behavior.cli_main([*ok, "--output_path", str(tmp_path / "out.jsonl")]) == 2
    assert "cannot go into the single file" in capsys.readouterr().err
    missing = ["--model_name_or_path", str(tmp_path / "no_model"), "--dataset_path", str(pairs)]
    assert score_behavior.cli_main([*missing, "--output_path", str(tmp_path / "out")]) == 2
    assert "no_model" in capsys.readouterr().err
    assert score_behavior.cli_main([*ok, "--split", "dev", "--output_path", str(tmp_path / "out")]) == 2
    assert "'dev' not found" in capsys.readouterr().err


def test_score_behavior_writes_each_split_as_it_finishes(tiny_model_path, tmp_path, monkeypatch):
    from datasets import DatasetDict

    pairs = tmp_path / "pairs"
    DatasetDict(
        {"train": make_toy_preference_dataset(4, seed=0), "test": make_toy_preference_dataset(2, seed=1)}
    ).save_to_disk(str(pairs))
    out = tmp_path / "scored"
    argv = ["--model_name_or_path", tiny_model_path, "--dataset_path", str(pairs), "--output_path", str(out)]
    real = behavior.score_behavior_logps

    def fail_on_the_second_split(dataset, *args, **kwargs):
        if len(dataset) == 2:
            raise RuntimeError("interrupted")
        return real(dataset, *args, show_progress=False, **kwargs)

    monkeypatch.setattr(behavior, "score_behavior_logps", fail_on_the_second_split)
    with pytest.raises(RuntimeError, match="interrupted"):
        score_behavior.cli_main(argv)
    assert len(load_from_disk(str(out / "train"))) == 4  # the finished split was kept
    monkeypatch.setattr(behavior, "score_behavior_logps", real)
    assert score_behavior.cli_main(argv) == 0
    scored = load_from_disk(str(out))
    assert set(scored) == {"train", "test"} and set(behavior.BEHAVIOR_COLUMNS) <= set(scored["test"].column_names)


@pytest.mark.slow
def test_accelerate_launch_module(tiny_model_path, tmp_path):
    """`accelerate launch -m trl_rlvr_ext.scripts.dpo --config ...` (one CPU process)."""
    accelerate = Path(sys.executable).parent / "accelerate"
    command = [
        str(accelerate), "launch", "--cpu", "--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no",
        "--dynamo_backend", "no", "-m", "trl_rlvr_ext.scripts.dpo", *_toy_args(tiny_model_path, tmp_path / "run"),
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Model saved to" in result.stdout and (tmp_path / "run" / "config.json").exists()
