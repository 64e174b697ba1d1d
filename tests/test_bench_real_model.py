"""bench/real_model.py runs every part end to end (here on the tiny model, at the smallest sizes: the code paths, not
measurements) and refuses bad options naming the fix."""

import sys
from pathlib import Path

import pytest


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import real_model


def test_every_part_runs_and_prints_its_ratios(tiny_model_path, capsys):
    argv = ["--model", tiny_model_path, "--repeats", "1", "--stock-steps", "2", "--dpo-steps", "2"]
    argv += ["--curation-steps", "4", "--curation-rounds", "1"]
    assert real_model.main([*argv, "--lora-repeats", "1", "--rank", "2", "--precision-rounds", "1"]) == 0
    out = capsys.readouterr().out
    for arm in (*real_model.GRPO_ARMS[1:], "delta", *real_model.DPO_ARMS[1:]):
        assert any(line.startswith(arm + " ") for line in out.splitlines()), arm
    for layer in real_model.LORA_LAYERS:
        assert layer in out
    assert "PEFT pissa (full SVD)" in out and "rlpo (randomized)" in out
    assert "step ratio bf16 / fp32:" in out
    for arm in ("self", "pass_rate", "dynamic_sampling"):
        assert f"{arm} step ratio: " in out, arm


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--parts", "grpo,sft"], "unknown ['sft']"),
        (["--stock-steps", "1"], "at least 2"),
        (["--curation-steps", "5"], "must be a multiple of 2 (a generation cycle) and at least 4"),
    ],
)
def test_bad_options_name_the_fix(argv, message, capsys):
    with pytest.raises(SystemExit):
        real_model.main(argv)
    assert message in capsys.readouterr().err
