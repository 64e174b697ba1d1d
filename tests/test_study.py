"""The study runner: ``python -m lab study self --quick`` end to end, and its resume."""

import json

import pytest

from lab.cli import main


def test_quick_study_end_to_end_then_resume(tmp_path, monkeypatch, capsys):
    out = tmp_path / "study"
    argv = ["study", "self", "--quick", "--tasks", "toy", "--seeds", "0,1", "--out_dir", str(out)]
    assert main(argv) == 0
    table = (out / "results.md").read_text()
    for arm in ("base", "grpo", "self", "pass_rate", "grpo_same_budget", "grpo_same_prompts"):
        assert f"| {arm} | 0,1 |" in table
        for seed in (0, 1):
            result = json.loads((out / "toy" / arm / f"seed{seed}" / "result.json").read_text())
            assert result["command"] == "python -m lab study " + " ".join(argv[1:])
            assert result["rerun_command"].endswith(f"--tasks toy --arms {arm} --seeds {seed} --quick")
            assert result["wall_seconds"] >= result["train_seconds"] >= 0
            assert set(result["pass_at_k"]) == {"1", "2", "4"} and len(result["num_correct"]) == 3
            assert bool(result["boundary"]) == (arm != "base")
    assert "mean nothing" in table and "pass@4" in table and "| chance (guess from the train answers) | - |" in table
    assert "| trivial_random_carries (guess from the prompt's structure) | 0,1,2 |" in table
    grpo = json.loads((out / "toy" / "self" / "seed0" / "result.json").read_text())
    assert [b["step"] for b in grpo["boundary"]] == [0, 1, 2] and grpo["grpo_config"]["curation"] == "self"
    for png in ("toy_pass_at_k.png", "toy_boundary.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    # the same-budget arm trained for exactly the updates the same-seed SELF run made
    from lab.studies.runner import updates_made

    for seed in (0, 1):
        self_run, matched = (
            json.loads((out / "toy" / arm / f"seed{seed}" / "result.json").read_text())
            for arm in ("self", "grpo_same_budget")
        )
        assert matched["budget"] == {"same_updates_as": "self", "updates": updates_made(self_run)}
        assert matched["grpo_config"]["max_steps"] == updates_made(self_run) == updates_made(matched)
        # ... and the same-prompts arm for as many whole batches as the prompts SELF trained on (at least one)
        from lab.studies.runner import prompts_trained

        prompts = json.loads((out / "toy" / "grpo_same_prompts" / f"seed{seed}" / "result.json").read_text())
        per_batch = self_run["sizes"]["num_prompts"]
        batches = max(1, round(prompts_trained(self_run) / per_batch))
        assert prompts["budget"]["same_prompts_as"] == "self"
        assert prompts["budget"]["prompts"] == round(prompts_trained(self_run), 3)
        assert prompts["grpo_config"]["max_steps"] == batches * self_run["sizes"]["steps_per_generation"]
        assert prompts_trained(prompts) == per_batch * batches
    # Resume: nothing is trained or evaluated again ...
    from trl_rlvr_ext.grpo.grpo_trainer import RLVRGRPOTrainer

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was redone")

    monkeypatch.setattr(RLVRGRPOTrainer, "train", no_training)
    monkeypatch.setattr("trl_rlvr_ext.evaluation.evaluate_pass_at_k", no_training)
    capsys.readouterr()
    assert main(argv) == 0
    assert capsys.readouterr().out.count("done, loading") == 12
    # ... except a run whose result is missing (an interrupted run): exactly that one is redone
    (out / "toy" / "grpo" / "seed1" / "result.json").unlink()
    with pytest.raises(AssertionError, match="redone"):
        main(argv)


def test_bad_selections_fail_naming_the_choices(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_RLVR_EXT_DEBUG", "1")  # the CLI re-raises its clear errors instead of one line
    with pytest.raises(ValueError, match="choose from"):
        main(["study", "self", "--quick", "--tasks", "toyy", "--out_dir", str(tmp_path)])
    with pytest.raises(SystemExit):
        main(["study", "self", "--seeds", "a,b", "--out_dir", str(tmp_path)])


def test_chance_pass_at_k_hand_computed(monkeypatch):
    from datasets import Dataset, DatasetDict

    from lab.studies import runner

    splits = DatasetDict(
        train=Dataset.from_dict({"answer": ["1", "1", "2", "3"]}), test=Dataset.from_dict({"answer": ["1", "4"]})
    )
    monkeypatch.setattr("trl_rlvr_ext.data.load_named_dataset", lambda name: splits)
    # guess "1" w.p. 0.5 (problem 1) and never "4" (problem 2): pass@1 = 0.25, pass@2 = (1 - 0.25) / 2
    assert runner.chance_pass_at_k("x", 2, [1, 2]) == {1: 0.25, 2: 0.375}


def test_self_study_covers_every_preset_with_its_own_base(monkeypatch):
    from lab.studies import get_study
    from lab.studies.self_study import GYM_BASE_STEPS, TOY9
    from trl_rlvr_ext.gym_bases import PRESETS

    study = get_study("self")
    assert set(GYM_BASE_STEPS) == set(PRESETS)
    assert {t.dataset for t in study.tasks.values()} == {"toy:arithmetic", TOY9, *PRESETS.values()}
    assert list(study.arms) == ["base", "grpo", "self", "pass_rate", "grpo_same_budget", "grpo_same_prompts"]
    # toy9's base is warm-started on its own digit range (the name is resolved, not built, here)
    monkeypatch.setattr("trl_rlvr_ext.data.resolve_model_name_or_path", lambda name: name)
    assert study.tasks["toy9"].base_model(False) == "toy:base?min_digits=9&max_digits=9"
    assert study.arms["self"].config["curation"] == "self" and not study.arms["base"].train


def test_log_column_reduces_the_training_log_by_hand():
    from lab.studies import Column, log_column, train_log_series

    result = {
        "train_log": [{"step": 1, "x": 0.5}, {"step": 2, "loss": 1.0}, {"step": 3, "x": 2.0}, {"step": 4, "x": 1.0}]
    }
    assert train_log_series(result, "x") == [(1, 0.5), (3, 2.0), (4, 1.0)]
    assert log_column("x", "x").value(result) == (0.5 + 2.0 + 1.0) / 3
    assert log_column("x", "x", "max").value(result) == 2.0
    assert log_column("x", "x", "last").value(result) == 1.0
    assert log_column("y", "y").value(result) is None  # never logged: an empty cell, not a zero
    assert isinstance(log_column("x", "x"), Column)
    with pytest.raises(ValueError, match="choose one of"):
        log_column("x", "x", "median")


def test_study_default_sizes_and_the_rerun_flags_follow_the_study():
    import dataclasses

    from lab.studies import QUICK, Study, StudySizes
    from lab.studies.runner import size_flags

    own = StudySizes(max_steps=40, eval_samples=64)
    study = Study("s", "claim", {}, {}, sizes=own)
    assert study.default_sizes(False) is own and study.default_sizes(True) is QUICK
    assert size_flags(study, own, quick=False) == ""
    assert size_flags(study, dataclasses.replace(own, max_steps=10), quick=False) == " --max_steps 10"
    assert size_flags(Study("t", "claim", {}, {}), own, quick=False) == " --max_steps 40 --eval_samples 64"


def test_a_run_named_twice_is_refused(tmp_path):
    from lab.studies import get_study, run_study

    study = get_study("self")
    for kwargs, word in (
        ({"arms": ["base", "base"]}, "Arm"),
        ({"seeds": [0, 0]}, "Seed"),
        ({"tasks": ["toy", "toy"]}, "Task"),
    ):
        with pytest.raises(ValueError, match=f"{word}\\(s\\) .* given more than once"):
            run_study(study, tmp_path, quick=True, **kwargs)


def test_updates_made_and_the_same_budget_arm_by_hand(tmp_path):
    from lab.studies.runner import Arm, StudySizes, StudyTask, same_budget_arm, updates_made

    # 100 steps, the last log's cumulative skip count is 37: 63 updates; without curation logs, every step
    log = [{"step": 20, "curation/skipped_steps": 9.0}, {"step": 100, "curation/skipped_steps": 37.0}]
    assert updates_made({"sizes": {"max_steps": 100}, "train_log": log}) == 63
    assert updates_made({"sizes": {"max_steps": 100}, "grpo_config": {"max_steps": 63}, "train_log": []}) == 63
    task = StudyTask("t", "toy:arithmetic", "toy_accuracy", None, None, 7)
    arm = Arm("matched", config={"beta": 0.0}, same_updates_as="self")
    with pytest.raises(ValueError, match="run --arms self first"):
        same_budget_arm(tmp_path, task, arm, 3, StudySizes())
    run = tmp_path / "t" / "self" / "seed3"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({"sizes": {"max_steps": 100}, "train_log": log}))
    matched, budget = same_budget_arm(tmp_path, task, arm, 3, StudySizes())
    assert matched.config == {"beta": 0.0, "max_steps": 63} and budget == {"same_updates_as": "self", "updates": 63}


def test_prompts_trained_and_the_same_prompts_arm_by_hand(tmp_path):
    from lab.studies.runner import Arm, StudySizes, StudyTask, prompts_trained, same_budget_arm

    sizes = StudySizes(max_steps=100, num_prompts=32, steps_per_generation=2)
    # windows of 20, 20 and 60 steps (10, 10 and 30 batches of 2 steps) keeping 10.5, 8 and 4 prompts a batch on
    # average
    log = [
        {"step": 20, "curation/kept_prompts": 10.5},
        {"step": 40, "curation/kept_prompts": 8.0},
        {"step": 100, "curation/kept_prompts": 4.0},
    ]
    result = {"sizes": {"max_steps": 100, "num_prompts": 32, "steps_per_generation": 2}, "train_log": log}
    assert prompts_trained(result) == 10.5 * 10 + 8.0 * 10 + 4.0 * 30 == 305.0
    # without curation every prompt of every batch: 32 x 50; the run's own config wins over the study's sizes
    assert prompts_trained({**result, "train_log": []}) == 1600.0
    assert prompts_trained({**result, "train_log": [], "grpo_config": {"max_steps": 28}}) == 32 * 14
    # the page's "prompts trained per batch": the same total over the run's 50 generation batches (window-weighted)
    from lab.studies.self_study import _kept_prompts

    assert _kept_prompts(result) == 305.0 / 50 and _kept_prompts({**result, "train_log": []}) is None
    task = StudyTask("t", "toy:arithmetic", "toy_accuracy", None, None, 7)
    arm = Arm("matched", same_prompts_as="self")
    with pytest.raises(ValueError, match="as many prompts as 'self'.*run --arms self first"):
        same_budget_arm(tmp_path, task, arm, 3, sizes)
    run = tmp_path / "t" / "self" / "seed3"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps(result))
    # 305 prompts = 9.53 batches of 32: 10 whole batches, 20 steps
    matched, budget = same_budget_arm(tmp_path, task, arm, 3, sizes)
    assert matched.config == {"max_steps": 20}
    assert budget == {"same_prompts_as": "self", "prompts": 305.0, "updates": 20}
    (run / "result.json").write_text(
        json.dumps({**result, "train_log": [{"step": 100, "curation/kept_prompts": 0.0}]})
    )
    with pytest.raises(ValueError, match="trained on no prompt"):
        same_budget_arm(tmp_path, task, arm, 3, sizes)
    with pytest.raises(ValueError, match="one budget"):
        Arm("both", same_updates_as="self", same_prompts_as="self")


def test_a_same_budget_arm_before_its_source_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_RLVR_EXT_DEBUG", "1")
    with pytest.raises(ValueError, match="list 'self' before it"):
        main(
            [
                "study",
                "self",
                "--quick",
                "--tasks",
                "toy",
                "--arms",
                "grpo_same_budget,self",
                "--out_dir",
                str(tmp_path),
            ]
        )


def test_the_prompts_matched_runs_are_declared_for_known_tasks_and_judged_by_claim_3c():
    import shlex

    from lab.studies import get_study
    from lab.studies.self_study import CLAIMS, PROMPTS_MATCHED_COMMANDS

    study = get_study("self")
    for command in PROMPTS_MATCHED_COMMANDS:
        words = shlex.split(command)
        options = dict(zip(words[3::2], words[4::2]))
        assert words[:3] == ["trl-rlvr-ext", "study", "self"] and options["--out_dir"] == "<dir>"
        assert options["--tasks"] in study.tasks and options["--arms"] == "grpo_same_prompts"
        assert options["--seeds"] == "0,1,2,3,4" and options["--max_steps"] == "100"
    (claim,) = [c for c in CLAIMS if c.baseline == "grpo_same_prompts"]
    assert (claim.arm, claim.metric, claim.smallest_effect) == ("self", "pass@256", 0.03)
    assert study.arms["grpo_same_prompts"].same_prompts_as == "self" and not study.arms["grpo_same_prompts"].config


@pytest.mark.parametrize("precision", ["trainer", "fp32"])
def test_a_setting_chooses_the_precision_trained_arms_are_evaluated_at(tmp_path, monkeypatch, precision):
    """``Setting(evaluate_precision="fp32")`` evaluates the trained weights without the trainer's bf16 autocast, as a
    base arm (loaded fresh) is evaluated; the default keeps the trainer's forward (autocast on), as every design so
    far."""
    import dataclasses

    import torch

    from lab.studies import get_study, runner
    from lab.studies.runner import Setting

    with pytest.raises(ValueError, match="evaluate_precision='bf16'"):
        Setting("x", evaluate_precision="bf16")
    study = get_study("self")
    study = dataclasses.replace(
        # bf16 on: a quick run trains in fp32 (the golden copies' precision), so the trainer's autocast is asked for
        study,
        settings={**study.settings, "one": Setting("one", config={"bf16": True}, evaluate_precision=precision)},
    )
    seen = {}
    evaluate = runner.evaluate_and_record

    def spy(run, model, *args, **kwargs):
        if run.arm.train:

            def hook(module, inputs):
                seen["autocast"] = torch.is_autocast_enabled("cpu")

            # on an inner module: the autocast wraps the model's forward, inside its own pre-hooks
            handle = list(model.modules())[-1].register_forward_pre_hook(hook)
            model(input_ids=torch.tensor([[1, 2, 3]]))
            handle.remove()
        return evaluate(run, model, *args, **kwargs)

    monkeypatch.setattr(runner, "evaluate_and_record", spy)
    (result,) = runner.run_study(study, tmp_path, tasks=["toy"], arms=["grpo"], seeds=[0], quick=True, setting="one")
    assert seen["autocast"] is (precision == "trainer")
    assert result.get("evaluated_precision") == (None if precision == "trainer" else "fp32")


def test_the_boundary_plot_takes_seeds_probed_at_different_steps(tmp_path, monkeypatch):
    """A same-budget arm's seeds stop at different steps (each matches its own seed's SELF run), so one seed has a
    probe the other lacks; the plot aligns them on the union of the steps (NaN where a seed has none)."""
    import matplotlib.axes

    from lab.studies.summary import _plot

    def run(seed, steps):
        boundary = [{"step": s, "boundary/interference_frac": s / 100} for s in steps]
        return {"arm": "matched", "seed": seed, "pass_at_k": {"1": 0.5, "2": 0.7}, "boundary": boundary}

    plotted = []
    original = matplotlib.axes.Axes.plot

    def spy(self, x, y, *args, **kwargs):
        plotted.append((self.get_title(), list(x), list(y)))
        return original(self, x, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    _plot("t", [run(0, [0, 20, 40]), run(1, [0, 20])], tmp_path)
    assert (tmp_path / "t_boundary.png").read_bytes()[:4] == b"\x89PNG"
    # the interference panel (the others' metric is absent: all NaN): step 40 is seed 0's alone
    assert ([0, 20, 40], [0.0, 0.2, 0.4]) in [(steps, mean) for _, steps, mean in plotted]


def test_no_study_is_named_like_a_subcommand_of_study():
    """`python -m lab study <name>` stands for `study run <name>`: a study named like a subcommand would be shadowed."""
    from lab.scripts.study import SUBCOMMANDS
    from lab.studies import STUDIES

    assert not set(STUDIES) & set(SUBCOMMANDS)


def test_study_run_is_the_explicit_spelling_of_study_name(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_RLVR_EXT_DEBUG", "1")  # the CLI re-raises its clear errors instead of one line
    with pytest.raises(ValueError, match="choose from"):
        main(["study", "run", "self", "--quick", "--tasks", "toyy", "--out_dir", str(tmp_path)])


def test_study_help_stays_light():
    """`python -m lab study --help` answers at once: the studies' engine imports no numpy, torch or TRL at import (the
    registry imports a study's package only when it is asked for)."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys\nfrom lab.cli import main\n"
        "try:\n    main(['study', '--help'])\nexcept SystemExit:\n    pass\n"
        "print('HEAVY', [m for m in ('numpy', 'torch', 'trl', 'transformers') if m in sys.modules])\n"
    )
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "HEAVY []" in result.stdout and "Subcommands:" in result.stdout
