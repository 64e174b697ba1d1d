"""The IS-DPO docs run as printed: the tutorial end to end (its command-line section too) and the method page's
configuration example."""

import math

import pytest
from datasets import load_dataset
from docs_helpers import docs_env, docs_toy_cache, python_blocks, run_docs_page  # noqa: F401 -- fixtures


@pytest.mark.slow
@pytest.mark.usefixtures("docs_env")
def test_tutorial_runs_end_to_end(tmp_path):
    namespace = run_docs_page("tutorials/is_dpo.md", tmp_path)
    assert len(python_blocks("tutorials/is_dpo.md")) == 5
    logs = namespace["trainer"].state.log_history
    assert "train_loss" in logs[-1] and namespace["trainer"].state.global_step == 30  # as printed
    assert {"is/weight_mean", "is/weight_max", "is/clipped_frac", "is/ess"} <= set(logs[0])
    # Section 4 trained on behaviour columns: the weights differ from 1 from the very first step
    assert namespace["first"]["is/weight_mean"] != 1.0
    assert {"behavior_chosen_logps", "behavior_rejected_logps"} <= set(namespace["scored"].column_names)
    assert (tmp_path / "tiny_model" / "config.json").exists()
    # Section 5: the pairs file, the command-line scoring (same columns as section 4), and three CLI trainings
    assert len((tmp_path / "pairs.jsonl").read_text().splitlines()) == 256
    scored_cli = load_dataset("json", data_files=str(tmp_path / "pairs_scored.jsonl"), split="train")
    assert {"behavior_chosen_logps", "behavior_rejected_logps"} <= set(scored_cli.column_names)
    for name in ("toy_isdpo", "is_dpo_behavior_cli"):
        assert (tmp_path / "outputs" / name / "model.safetensors").is_file()


@pytest.mark.usefixtures("docs_env")
def test_method_page_config_example_runs(tmp_path):
    namespace = run_docs_page("methods/is_dpo.md", tmp_path, until=1)  # the configuration; the CLI runs are below
    args = namespace["args"]
    assert args.importance_sampling and args.importance_weight_cap == math.exp(0.5) and args.beta == 0.05
    assert args.learning_rate == 1e-6 and list(args.loss_type) == ["sigmoid"]


@pytest.mark.slow
@pytest.mark.usefixtures("docs_env")
def test_method_page_runs(tmp_path):
    namespace = run_docs_page("methods/is_dpo.md", tmp_path)  # the configuration and the offline recipe
    assert "args" in namespace
    assert (tmp_path / "outputs" / "toy_isdpo" / "model.safetensors").is_file()
