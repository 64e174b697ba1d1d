"""The real-model tutorial (docs/tutorials/real_model.md): its blocks run as printed (the demo's smoke run and one
GRPO step with NSR on SmolLM2-135M-Instruct), its printed output is the record's, and its recipe trains one step."""

import json
import os
from pathlib import Path

import pytest
from docs_helpers import code_blocks, run_docs_page

from lab.scripts.real_model_demo import RECORDS
from trl_rlvr_ext.scripts import demo_pretrained


ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "tutorials" / "real_model.md"


def test_the_printed_output_is_the_records():
    record = json.loads((ROOT / RECORDS).read_text().splitlines()[0])
    assert record["seed"] == 0 and record["method"] == "none"
    printed = next(block.code for block in code_blocks(PAGE) if block.language == "text")
    default_dir = f"outputs/demo_{record['model']}_{record['method']}_seed{record['seed']}"
    assert printed.strip("\n") == demo_pretrained.summary_text(record, default_dir).strip("\n")


@pytest.fixture
def real_model_env(monkeypatch):
    """docs_env's variables but the package cache: the converted model is cached where every run finds it (the
    pretrained-model tests fill it), not in a session folder that would convert it again."""
    for name, value in {
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TRL_EXPERIMENTAL_SILENCE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "WANDB_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS") or "1")


@pytest.mark.slow
@pytest.mark.usefixtures("real_model_env")
def test_real_model_tutorial_runs(tmp_path):
    pytest.importorskip("reasoning_gym", reason="needs the [gym] extra (installed by the dev extra)")
    namespace = run_docs_page("tutorials/real_model.md", tmp_path)
    quick = json.loads((tmp_path / "outputs" / "real_model_quick" / "record.json").read_text())
    assert quick["settings"]["quick"] and quick["settings"]["max_steps"] == 2
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 1 and trainer.args.clip_recovery == "nsr"
    assert any("clip_recovery/high_frac" in log for log in trainer.state.log_history)


@pytest.mark.slow
@pytest.mark.usefixtures("real_model_env")
def test_the_real_model_recipe_trains_one_step(tmp_path):
    from trl_rlvr_ext import cli

    argv = ["grpo", "--config", "smollm2_products", "--output_dir", str(tmp_path), "--max_steps", "1"]
    argv += ["--save_strategy", "steps", "--save_steps", "1"]
    assert cli.main(argv) == 0
    adapter = json.loads((tmp_path / "adapter_config.json").read_text())
    assert adapter["r"] == 16
    logs = json.loads((tmp_path / "checkpoint-1" / "trainer_state.json").read_text())["log_history"]
    assert logs[0]["step"] == 1 and "reward" in logs[0]
