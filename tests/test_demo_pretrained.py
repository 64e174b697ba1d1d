"""``trl-rlvr-ext demo --model NAME``: the dispatch from the toy demo, the option checks, the crossed interval over
seeds and problems by hand, and the committed page against its records (``python -m lab real-model-demo``)."""

import json
from pathlib import Path

import numpy as np
import pytest

from lab.scripts import real_model_demo
from trl_rlvr_ext.evaluation.paired import crossed_percentile_interval
from trl_rlvr_ext.scripts import demo, demo_pretrained


ROOT = Path(__file__).resolve().parents[1]


def test_model_option_dispatches_to_the_real_model_demo(monkeypatch):
    seen = {}
    monkeypatch.setattr(demo_pretrained, "run_pretrained_demo", lambda args: seen.setdefault("args", args))
    assert demo.cli_main(["--model", "smollm2-135m-instruct", "--method", "nsr", "--max-steps", "3"]) == 0
    args = seen["args"]
    assert (args.model, args.method, args.max_steps, args.steps_per_generation) == (
        "smollm2-135m-instruct",
        "nsr",
        3,
        2,
    )
    assert args.command.startswith("trl-rlvr-ext demo --model smollm2-135m-instruct")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--method", "nsr", "--steps-per-generation", "1"], "only binds when a generation batch is reused"),
        (["--num-prompts", "3", "--steps-per-generation", "5"], "must be divisible"),
        (["--lora-layers", "0"], "at least 1"),
        (["--method", "grpo"], "invalid choice"),
    ],
)
def test_bad_options_fail_naming_the_fix(argv, message, capsys):
    with pytest.raises(SystemExit):
        demo_pretrained.cli_main(["--model", "m", *argv])
    assert message in capsys.readouterr().err


def test_method_options_are_real_config_fields():
    from trl_rlvr_ext import RLVRGRPOConfig

    fields = RLVRGRPOConfig.__dataclass_fields__
    for options in demo_pretrained.METHODS.values():
        assert all(name in fields for name in options)


def test_crossed_interval_by_hand():
    # one seed, every problem gains the same: the interval is that gain exactly
    assert crossed_percentile_interval(np.full((1, 5), 0.25)) == (0.25, 0.25)
    # seeds that disagree: resampling seeds must widen the interval past the problems' spread alone
    gains = np.array([[0.1, 0.1, 0.1, 0.1], [0.5, 0.5, 0.5, 0.5]])
    low, high = crossed_percentile_interval(gains, num_resamples=4000)
    assert low == pytest.approx(0.1) and high == pytest.approx(0.5)
    # one shared problem draw: a problem that gains on every seed moves all seeds together
    rng = np.random.default_rng(0)
    problem_effect = rng.normal(0, 0.3, size=40)
    shared = np.stack([problem_effect, problem_effect])
    low, high = crossed_percentile_interval(shared, num_resamples=4000)
    se = problem_effect.std(ddof=1) / np.sqrt(40)
    assert high - low == pytest.approx(2 * 1.96 * se, rel=0.15)  # not shrunk by the seed count


def _record(seed, before, after, quick=False):
    settings = {"eval_problems": len(before), "eval_samples": 4, "quick": quick, "temperature": 0.7}
    return {
        "model": "m",
        "dataset": "d",
        "method": "none",
        "seed": seed,
        "settings": settings,
        "before_num_correct": before,
        "after_num_correct": after,
        "train_reward": [0.1, 0.2],
        "train_seconds": 60.0,
        "total_seconds": 90.0,
        "command": "trl-rlvr-ext demo --model m",
        "provenance": {"num_threads": 1, "commit": "abc", "time": "t"},
    }


def test_page_verdict_follows_the_interval_and_quick_runs_are_left_out():
    rises = [_record(0, [0, 1, 2, 1], [4, 3, 4, 4]), _record(1, [1, 0, 1, 2], [3, 4, 4, 3])]
    page = real_model_demo.render_page(rises + [_record(2, [0] * 4, [0] * 4, quick=True)])
    row = next(line for line in page.splitlines() if line.startswith("| m |"))
    # before: 4 of 16 correct on each seed (0.250); after: 15 and 14 of 16 (mean 0.906); mean gain 0.656
    assert "| 0, 1 |" in row and "**rises**" in row and "| 0.250 | 0.906 | +0.656 [" in row
    flat = [_record(0, [1, 2, 1, 2], [2, 1, 2, 1]), _record(1, [2, 1, 2, 1], [1, 2, 1, 2])]
    assert "**inconclusive**" in real_model_demo.render_page(flat)


def test_render_reproduces_the_committed_page(tmp_path):
    records = ROOT / real_model_demo.RECORDS
    if not records.is_file():
        pytest.fail(f"{real_model_demo.RECORDS} is missing: run the commands on {real_model_demo.PAGE}.")
    page = tmp_path / "page.md"
    assert real_model_demo.cli_main(["--records", str(records), "--page", str(page)]) == 0
    assert page.read_text() == (ROOT / real_model_demo.PAGE).read_text()
    for line in records.read_text().splitlines():
        record = json.loads(line)
        assert record["command"].startswith("trl-rlvr-ext demo --model") and record["provenance"]["commit"]
