"""README.md runs as printed: its python snippet and its shell blocks, in a fresh directory, offline, on a CPU. Blocks
marked ``<!-- docs-test: skip (why) -->`` (the set-up commands themselves, the GPU recipe) say so in the README."""

import os
from pathlib import Path

import pytest
from docs_helpers import code_blocks, docs_env, docs_toy_cache, run_markdown  # noqa: F401 -- fixtures


README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.slow
@pytest.mark.usefixtures("docs_env")
def test_readme_blocks_run_verbatim(tmp_path):
    namespace = run_markdown(README, tmp_path)  # a fresh directory: nothing from the clone is at hand
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 300
    assert trainer.args.clip_recovery == "nsr" and trainer.args.use_cpu
    logs = namespace["logs"]
    assert len(logs) >= 2 and "clip_recovery/high_frac" in logs[0]
    assert os.path.isdir(tmp_path / "toy-nsr")


def test_every_readme_block_runs_or_says_why_not():
    blocks = code_blocks(README)
    skipped = [b for b in blocks if b.mark == "skip"]
    assert {b.language for b in blocks} <= {"python", "bash", "text"}  # text: printed output, from docs/data records
    assert all(b.reason for b in skipped), "a skipped README block must say why"
    assert len(skipped) == 3 and any("GPU" in b.reason for b in skipped)
    # the real model's demo: its smoke run is tested with the tutorial's blocks
    assert any("test_docs_real_model.py" in b.reason for b in skipped)
