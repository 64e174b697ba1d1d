"""The NSR docs run as printed: the offline GRPO+NSR tutorial (smoke-sized toy) and the method page's configuration."""

from pathlib import Path

import pytest
from docs_helpers import docs_env, docs_toy_cache, run_docs_page  # noqa: F401 -- fixtures


@pytest.mark.slow
@pytest.mark.usefixtures("docs_env")
def test_grpo_nsr_tutorial_runs(tmp_path):
    namespace = run_docs_page("tutorials/grpo_nsr.md", tmp_path)
    trainer, args = namespace["trainer"], namespace["args"]
    logs = trainer.state.log_history
    assert trainer.state.global_step == args.max_steps == 60  # as printed
    assert "train_loss" in logs[-1]
    assert all("clip_recovery/high_frac" in log for log in logs if "loss" in log)
    assert args.clip_recovery == "nsr" and args.steps_per_generation == 4
    assert 0.0 <= namespace["after"]["pass@1"] <= 1.0
    # section 4: the recipe through the CLI, trained and saved
    assert (tmp_path / "outputs" / "toy_nsr" / "model.safetensors").is_file()
    assert not (tmp_path / "recipes").exists()  # the clone layout is removed after its block


@pytest.mark.usefixtures("docs_env")
def test_nsr_method_page_config_example(tmp_path):
    namespace = run_docs_page("methods/nsr.md", tmp_path)
    args = namespace["args"]
    assert args.clip_recovery == "nsr" and (args.epsilon, args.epsilon_high) == (0.2, 0.28)
    assert args.num_iterations == 2 and Path(args.output_dir).name == "out"
