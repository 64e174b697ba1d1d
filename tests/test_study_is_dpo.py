"""The ``is_dpo`` study: ``python -m lab study is_dpo --quick`` end to end, its shared data cache, resume, and the KL
estimator by hand."""

import dataclasses
import json
import math
from pathlib import Path

import pytest

from lab.cli import main
from lab.studies.is_dpo_study import sampled_kl


pytest.importorskip("reasoning_gym")

ARMS = ("base", "dpo_b0.01", "isdpo_b0.01", "dpo_b0.1", "isdpo_b0.1")


def test_sampled_kl_hand_computed():
    # Three samples: log π_θ − log π_ref = 0.5, −1.0, 2.0 -> mean 0.5
    assert sampled_kl([-1.0, -2.0, -0.5], [-1.5, -1.0, -2.5]) == pytest.approx(0.5, abs=1e-12)
    # Samples in exact proportion to π_θ = (1/2, 1/4, 1/4) over three outcomes, π_ref = (1/4, 1/4, 1/2): the estimate
    # is the exact KL = 1/2 log 2 + 1/4 log 1 + 1/4 log 1/2 = 1/4 log 2.
    policy, ref = [0.5, 0.25, 0.25], [0.25, 0.25, 0.5]
    samples = [0, 0, 1, 2]
    estimate = sampled_kl([math.log(policy[y]) for y in samples], [math.log(ref[y]) for y in samples])
    assert estimate == pytest.approx(math.log(2) / 4, abs=1e-12)
    with pytest.raises(ValueError, match="one policy and one reference"):
        sampled_kl([-1.0], [])


def test_processes_side_by_side_build_the_shared_data_once(tmp_path, monkeypatch):
    """Two builders of one key at the same time (two `study --workers` processes; threads here): one builds under
    the lock, the other waits and loads that build."""
    import threading
    import time

    from datasets import Dataset

    from lab.studies import get_study
    from lab.studies.is_dpo_study import data
    from lab.studies.is_dpo_study.design import IS_DPO_QUICK

    builds = []

    def slow_build(task, settings, quick, data_dir, log):
        builds.append(threading.get_ident())
        time.sleep(0.5)  # long enough for the other thread to reach the lock
        data_dir.mkdir(parents=True)
        Dataset.from_list([{"prompt": "p", "chosen": "c", "rejected": "r"}]).save_to_disk(str(data_dir / "pairs"))
        (data_dir / "meta.json").write_text(json.dumps({"num_pairs": 1}))
        return data._load(data_dir)

    monkeypatch.setattr(data, "_build", slow_build)
    monkeypatch.setattr(data, "base_model_path", lambda task, quick, base: "base")  # no model is built here
    task = get_study("is_dpo").tasks["number_sorting"]
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(data.build_preference_data(task, IS_DPO_QUICK, True, tmp_path)))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and len(results) == 2
    assert all(meta == {"num_pairs": 1} and pairs.num_rows == 1 for pairs, meta in results)


def test_quick_is_dpo_study_end_to_end_shared_data_then_resume(tmp_path, monkeypatch, capsys):
    from trl_rlvr_ext.dpo import behavior

    builds = []  # one entry per scoring of the preference data, i.e. per data build

    real_scorer = behavior.score_behavior_logps

    def counting_scorer(*args, **kwargs):
        builds.append(1)
        return real_scorer(*args, **kwargs)

    monkeypatch.setattr(behavior, "score_behavior_logps", counting_scorer)
    out = tmp_path / "study"
    argv = ["study", "is_dpo", "--quick", "--tasks", "number_sorting", "--seeds", "0", "--out_dir", str(out)]
    assert main(argv) == 0
    assert len(builds) == 1, "the preference data are built once per task and shared by every arm"
    (data_dir,) = (out / "number_sorting" / "_data").iterdir()
    meta = json.loads((data_dir / "meta.json").read_text())
    assert meta["num_pairs"] > 0 and meta["settings"]["num_samples"] == 2

    table = (out / "results.md").read_text()
    for arm in ARMS:
        assert f"| {arm} | 0 |" in table
        result = json.loads((out / "number_sorting" / arm / "seed0" / "result.json").read_text())
        assert result["command"] == "python -m lab study " + " ".join(argv[1:])
        assert result["rerun_command"].endswith(f"--tasks number_sorting --arms {arm} --seeds 0 --quick")
        assert result["wall_seconds"] >= result["train_seconds"] >= 0
        assert set(result["pass_at_k"]) == {"1", "2", "4"} and len(result["num_correct"]) == 3
        assert result["boundary"] == []
        # the frontier: step 0 (the base) and every step of the quick run
        assert [entry["step"] for entry in result["frontier"]] == ([0] if arm == "base" else [0, 1, 2])
        for entry in result["frontier"]:
            assert set(entry) == {"step", "kl", "greedy_acc", "pass1"} and math.isfinite(entry["kl"])
        assert result["frontier"][0]["kl"] == pytest.approx(0.0, abs=1e-4)  # the policy is the reference at step 0
        if arm == "base":
            assert result["preference_data"] is None and result["train_log"] == [] and result["train_seconds"] == 0
            continue
        assert result["preference_data"]["num_pairs"] == meta["num_pairs"]
        beta = float(arm.split("_b")[1])
        assert result["dpo_config"]["beta"] == beta
        weights = [entry["is/weight_mean"] for entry in result["train_log"] if "is/weight_mean" in entry]
        if arm.startswith("isdpo"):
            assert result["dpo_config"]["importance_sampling"] is True
            assert len(weights) == 2 and abs(weights[-1] - 1.0) > 1e-3  # after one update the weights move off 1
        else:
            assert result["dpo_config"]["importance_sampling"] is False and weights == []
    assert "IS w mean" in table and "greedy (best)" in table and "Preference pairs" in table
    for png in ("number_sorting_pass_at_k.png", "number_sorting_frontier.png", "number_sorting_training.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"

    # Resume: nothing is built, trained or evaluated again ...
    from trl_rlvr_ext.dpo.dpo_trainer import ISDPOTrainer

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was redone")

    monkeypatch.setattr(ISDPOTrainer, "train", no_training)
    monkeypatch.setattr("trl_rlvr_ext.evaluation.evaluate_pass_at_k", no_training)
    capsys.readouterr()
    assert main(argv) == 0
    assert capsys.readouterr().out.count("done, loading") == len(ARMS)
    # ... and a missing result reruns that arm on the cached data (no second build)
    monkeypatch.undo()
    monkeypatch.setattr(behavior, "score_behavior_logps", counting_scorer)
    (out / "number_sorting" / "isdpo_b0.1" / "seed0" / "result.json").unlink()
    capsys.readouterr()
    assert main(argv) == 0
    assert "building the preference data" not in capsys.readouterr().out and len(builds) == 1
    assert (out / "number_sorting" / "isdpo_b0.1" / "seed0" / "result.json").is_file()


def test_is_dpo_tasks_are_the_self_studys_with_the_same_cached_bases(monkeypatch):
    from lab.studies import get_study
    from trl_rlvr_ext import gym_bases

    calls = []
    monkeypatch.setattr(gym_bases, "get_gym_base_model_path", lambda **kwargs: calls.append(kwargs) or "base")
    is_dpo, self_study = get_study("is_dpo"), get_study("self")
    # the defaults' tasks; the real model's task belongs to its own setting only
    assert is_dpo.default_tasks(None) == ["number_sorting", "chain_sum"]
    assert is_dpo.default_tasks("dense") == ["number_sorting", "chain_sum"]
    assert is_dpo.default_tasks("pretrained") == ["products"]  # the tasks the setting is declared for
    for name in is_dpo.default_tasks(None):
        task = is_dpo.tasks[name]
        twin = self_study.tasks[name]
        assert (task.dataset, task.reward, task.max_completion_length) == (
            twin.dataset,
            twin.reward,
            twin.max_completion_length,
        )
        assert task.base_model(False) == twin.base_model(False) == "base"
        assert calls[-2] == calls[-1]  # the same warm-start settings, so the same cache entry
    # the records' five arms are the defaults; the dense setting adds two better-tuned DPO baselines there only
    assert is_dpo.default_arms(None) == list(ARMS) and list(is_dpo.arms)[:5] == list(ARMS)
    assert is_dpo.default_arms("dense") == [*ARMS, "dpo_b0.01_lr1e-5", "dpo_b0.01_es"]
    for name in ARMS[1:]:
        # the IS-DPO arms pin the authors' weight (no floor), which every recorded run used
        floor = {"importance_weight_floor": 0.0} if name.startswith("is") else {}
        assert is_dpo.arms[name].config == {
            "beta": float(name.split("_b")[1]),
            "importance_sampling": name.startswith("is"),
            **floor,
        }
        assert is_dpo.arms[name].settings == ()
    dpo = {"beta": 0.01, "importance_sampling": False}
    assert is_dpo.arms["dpo_b0.01_lr1e-5"].config == {**dpo, "learning_rate": 1e-5}
    assert is_dpo.arms["dpo_b0.01_es"].config == {**dpo, "early_stopping": True}
    assert {is_dpo.arms[name].settings for name in ("dpo_b0.01_lr1e-5", "dpo_b0.01_es")} == {("dense",)}


def test_is_dpo_refuses_a_size_it_does_not_use(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_RLVR_EXT_DEBUG", "1")  # the CLI re-raises its clear errors instead of one line
    with pytest.raises(ValueError, match="steps_per_generation=2 means nothing"):
        main(
            [
                "study",
                "is_dpo",
                "--quick",
                "--arms",
                "dpo_b0.1",
                "--steps_per_generation",
                "2",
                "--seeds",
                "0",
                "--out_dir",
                str(tmp_path),
            ]
        )


# ---------------------------------------------------------------- the dense setting
def test_dense_runs_and_claims_are_declared_on_fresh_seeds():
    from lab.scripts.study import make_parser
    from lab.studies import get_study
    from lab.studies.is_dpo_study import (
        DENSE_ARMS,
        DENSE_B01_ARMS,
        DENSE_B01_COMMAND,
        DENSE_COMMAND,
        DENSE_SEEDS,
        MATCHED_KL_CLAIMS,
        MATCHED_KL_GRID,
    )

    study = get_study("is_dpo")
    records = Path(__file__).resolve().parents[1] / "docs" / "evidence" / "data" / "is_dpo.jsonl"
    recorded = {json.loads(line)["seed"] for line in records.read_text().splitlines()}
    assert recorded == {0, 1, 2} and not recorded & set(DENSE_SEEDS) and len(DENSE_SEEDS) == 5
    for command, arms in ((DENSE_COMMAND, DENSE_ARMS), (DENSE_B01_COMMAND, DENSE_B01_ARMS)):
        args = make_parser().parse_args(command.split()[2:])
        assert (args.name, args.setting, args.tasks) == ("is_dpo", "dense", "number_sorting")
        assert args.arms.split(",") == list(arms) and args.seeds == ",".join(map(str, DENSE_SEEDS))
        assert set(arms) <= set(study.default_arms("dense"))
    dense_claims = [c for c in study.claims if c.settings == ("dense",)]
    assert {(c.arm, c.baseline) for c in dense_claims} == {
        ("dpo_b0.01_es", "dpo_b0.01"),
        ("dpo_b0.01_lr1e-5", "dpo_b0.01"),
        ("isdpo_b0.01", "dpo_b0.01_es"),
        ("isdpo_b0.01", "dpo_b0.01_lr1e-5"),
    }
    ran = set(DENSE_ARMS) | set(DENSE_B01_ARMS)
    assert all({c.arm, c.baseline} <= ran for c in [*dense_claims, *MATCHED_KL_CLAIMS])
    assert list(MATCHED_KL_GRID) == sorted(MATCHED_KL_GRID) and MATCHED_KL_GRID[0] > 0


def test_probe_schedule_dense_start_then_every_probe_every():
    from lab.studies.is_dpo_study import RECORDS_FRONTIER, SETTINGS, FrontierSetting, probe_schedule

    dense = SETTINGS["dense"]
    assert (dense.dense_every, dense.dense_until, dense.validation_problems) == (2, 20, 100)
    assert dense.probe_steps(120, 20) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 40, 60, 80, 100, 120]
    # the records' schedule is the old callback's rule: step 0, every probe_every steps, and the last step
    for max_steps, every in ((120, 20), (50, 20), (7, 3)):
        rule = [0] + [s for s in range(1, max_steps + 1) if s % every == 0 or s == max_steps]
        assert RECORDS_FRONTIER.probe_steps(max_steps, every) == rule
    assert probe_schedule(50, 20, 2, 20) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 40, 50]
    assert probe_schedule(5, 20, 2, 20) == [0, 2, 4, 5]  # the dense start stops at the last step
    assert dense.probe_steps(2, 1) == [0, 1, 2]  # --quick
    with pytest.raises(ValueError, match="set both"):
        FrontierSetting("half a dense start", dense_every=2)
    with pytest.raises(ValueError, match="together"):
        FrontierSetting("validation without its quick size", validation_problems=10)
    with pytest.raises(ValueError, match="probe_every=0"):
        probe_schedule(10, 0)


def test_validation_split_is_disjoint_from_the_test_problems_and_every_train_prompt():
    from datasets import Dataset

    from lab.studies import get_study
    from lab.studies.is_dpo_study import DATA_PROMPTS, IS_DPO_SIZES
    from lab.studies.runner import validation_split
    from trl_rlvr_ext.data import load_named_dataset

    task = get_study("is_dpo").tasks["number_sorting"]
    splits = load_named_dataset(task.dataset)
    rows, where = validation_split(splits, IS_DPO_SIZES, 100, DATA_PROMPTS)
    assert where == {"split": "test", "rows": [100, 200], "problems": 100} and len(rows) == 100
    validation = {row["prompt"] for row in rows}
    assert len(validation) == 100
    assert not validation & set(splits["test"]["prompt"][: IS_DPO_SIZES.eval_problems])  # the test problems
    assert not validation & set(splits["train"]["prompt"][:DATA_PROMPTS])  # the preference-data prompts
    assert not validation & set(splits["train"]["prompt"])  # nor any prompt of the base's warm start
    assert rows[0] == splits["test"][100]

    # the check is real: a planted copy of a test problem, or of a preference prompt, fails naming which
    def fake(test_prompts, train_prompts):
        return {
            "test": Dataset.from_list([{"prompt": p} for p in test_prompts]),
            "train": Dataset.from_list([{"prompt": p} for p in train_prompts]),
        }

    sizes = dataclasses.replace(IS_DPO_SIZES, eval_problems=2, probe_problems=2)
    with pytest.raises(ValueError, match="also test problems"):
        validation_split(fake(["a", "b", "a"], ["x", "y"]), sizes, 1, 1)
    with pytest.raises(ValueError, match=r"also preference-data prompts \(train rows 0-0\)"):
        validation_split(fake(["a", "b", "x"], ["x", "y"]), sizes, 1, 1)
    with pytest.raises(ValueError, match="also other train prompts"):
        validation_split(fake(["a", "b", "y"], ["x", "y"]), sizes, 1, 1)
    with pytest.raises(ValueError, match="need 4 held-out rows; the split has 3"):
        validation_split(fake(["a", "b", "c"], ["x"]), sizes, 2, 1)


def test_best_checkpoint_keeps_the_earliest_best_step_and_restores_its_weights():
    import torch

    from lab.studies.is_dpo_study import BestCheckpoint, state_fingerprint

    model = torch.nn.Linear(3, 2)
    best, states = BestCheckpoint(), {}
    for step, score in ((0, 0.1), (2, 0.3), (4, 0.3), (6, 0.2)):  # steps 2 and 4 tie: the earlier one is kept
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.fill_(float(step))
        states[step] = state_fingerprint(model.state_dict())
        best.observe(step, score, model)
    record = best.restore(model)
    assert record["chosen_step"] == 2 and record["validation_greedy_acc"] == 0.3
    assert record["steps_considered"] == [0, 2, 4, 6]
    assert all(torch.equal(p, torch.full_like(p, 2.0)) for p in model.parameters())  # step 2's weights are back
    assert record["checkpoint_fingerprint"] == states[2] == state_fingerprint(model.state_dict())
    assert record["last_step_fingerprint"] == states[6] != states[2]
    with pytest.raises(RuntimeError, match="no validation score"):
        BestCheckpoint().restore(model)


def test_quick_dense_setting_end_to_end(tmp_path, monkeypatch):
    """The dense setting through the CLI: both frontiers and the schedule in every record, the smaller-lr arm's rate,
    and the early-stopped arm's final Pass@k evaluated on its chosen step's weights (scripted validation scores, so
    that the choice is a tie between two trained steps, not the base)."""
    from lab.studies import is_dpo_study
    from trl_rlvr_ext import evaluation

    scripted = {0: 0.1, 1: 0.5, 2: 0.5}  # steps 1 and 2 tie: step 1 is chosen
    real_observe, real_evaluate, evaluated = is_dpo_study.BestCheckpoint.observe, evaluation.evaluate_pass_at_k, {}

    def scripted_observe(self, step, score, model):
        return real_observe(self, step, scripted[step], model)

    def recording_evaluate(model, *args, label="", **kwargs):
        evaluated[label.split("/")[1]] = is_dpo_study.state_fingerprint(model.state_dict())
        return real_evaluate(model, *args, label=label, **kwargs)

    monkeypatch.setattr(is_dpo_study.BestCheckpoint, "observe", scripted_observe)
    monkeypatch.setattr(evaluation, "evaluate_pass_at_k", recording_evaluate)
    out = tmp_path / "dense"
    arms = ("base", "dpo_b0.01", "isdpo_b0.01", "dpo_b0.01_lr1e-5", "dpo_b0.01_es")
    argv = ["study", "is_dpo", "--quick", "--setting", "dense", "--tasks", "number_sorting", "--arms", ",".join(arms)]
    assert main([*argv, "--seeds", "0", "--out_dir", str(out)]) == 0
    results = {a: json.loads((out / "number_sorting" / a / "seed0" / "result.json").read_text()) for a in arms}
    for arm, result in results.items():
        assert result["setting"] == "dense" and result["rerun_command"].endswith("--setting dense --quick")
        steps = [0] if arm == "base" else [0, 1, 2]
        assert result["probe_steps"] == steps
        assert [e["step"] for e in result["frontier"]] == [e["step"] for e in result["frontier_validation"]] == steps
        assert result["validation"] == {"split": "test", "rows": [3, 6], "problems": 3}
        for entry in result["frontier"] + result["frontier_validation"]:
            assert set(entry) == {"step", "kl", "greedy_acc", "pass1"} and math.isfinite(entry["kl"])
        assert ("early_stopping" in result) == (arm == "dpo_b0.01_es")
    assert results["dpo_b0.01_lr1e-5"]["dpo_config"]["learning_rate"] == 1e-5
    assert {e["learning_rate"] for e in results["dpo_b0.01_lr1e-5"]["train_log"] if "learning_rate" in e} == {1e-5}
    assert results["dpo_b0.01"]["dpo_config"]["learning_rate"] == results["dpo_b0.01"]["sizes"]["learning_rate"]
    # early stopping trains exactly what DPO trains (measuring never moves the training RNG), then picks step 1
    stopped = results["dpo_b0.01_es"]
    assert stopped["frontier"] == results["dpo_b0.01"]["frontier"]
    assert "early_stopping" not in stopped["dpo_config"]
    es = stopped["early_stopping"]
    assert es["chosen_step"] == 1 and es["validation_greedy_acc"] == 0.5 and es["steps_considered"] == [0, 1, 2]
    # the model Pass@k evaluated is step 1's, not the last step's, and not the base's
    assert evaluated["dpo_b0.01_es"] == es["evaluated_fingerprint"] == es["checkpoint_fingerprint"]
    assert es["checkpoint_fingerprint"] != es["last_step_fingerprint"] == evaluated["dpo_b0.01"]
    assert evaluated["dpo_b0.01_es"] != evaluated["base"]
    table = (out / "results.md").read_text()
    assert "Matched KL" in table and "| (isdpo_b0.01 − dpo_b0.01) | greedy_acc | 0.25 |" in table
    assert "dpo_b0.01_es seed 0: stopped at step 1" in table

    # an arm of the dense setting only fails elsewhere, naming the setting
    monkeypatch.setenv("TRL_RLVR_EXT_DEBUG", "1")
    with pytest.raises(ValueError, match=r"runs only in setting\(s\) \['dense'\], not without a setting"):
        main(
            ["study", "is_dpo", "--quick", "--arms", "dpo_b0.01_es", "--seeds", "0", "--out_dir", str(tmp_path / "x")]
        )


def _rate_record(rate, ratio, setting="rate_calibration", seed=100):
    """A calibration record whose validation greedy accuracy at step 20 is ``ratio`` of the base's 0.8."""
    frontier = [{"step": 0, "greedy_acc": 0.8}, {"step": 20, "greedy_acc": 0.8 * ratio}]
    return {
        "task": "number_sorting",
        "arm": f"dpo_b0.01@{rate}",
        "seed": seed,
        "setting": setting,
        "frontier": frontier,
    }


def test_the_rate_rule_takes_the_largest_rate_that_does_not_collapse_once_bracketed():
    from lab.studies.is_dpo_study import RATE_COLLAPSE, RATE_GRID, RateCalibration, choose_rate

    assert RATE_GRID == ("1e-5", "3e-5", "1e-4", "3e-4") and RATE_COLLAPSE == 0.5
    assert choose_rate([], "rate_calibration") == RateCalibration("rate_calibration", {}, None, "1e-5")
    grid = [_rate_record("1e-5", 1.0), _rate_record("3e-5", 0.9), _rate_record("1e-4", 0.4), _rate_record("3e-4", 0.0)]
    calibration = choose_rate(grid, "rate_calibration")
    assert (calibration.chosen, calibration.next_run) == ("3e-5", None)
    assert calibration.ratios == pytest.approx({"1e-5": 1.0, "3e-5": 0.9, "1e-4": 0.4, "3e-4": 0.0})
    # at the threshold a rate has not collapsed; a collapsed rate between stable ones does not stop the largest stable
    edge = [_rate_record("1e-5", 1.0), _rate_record("3e-5", 0.2), _rate_record("1e-4", 0.5), _rate_record("3e-4", 0.1)]
    assert choose_rate(edge, "rate_calibration").chosen == "1e-4"
    # nothing collapses: the next larger rate runs; everything collapses: the next smaller
    calm = [_rate_record(rate, 0.9) for rate in RATE_GRID]
    assert choose_rate(calm, "rate_calibration").next_run == "1e-3"
    wild = [_rate_record(rate, 0.1) for rate in RATE_GRID]
    assert choose_rate(wild, "rate_calibration").next_run == "3e-6"
    assert choose_rate(wild + [_rate_record("3e-6", 0.7)], "rate_calibration").chosen == "3e-6"
    with pytest.raises(ValueError, match="extend RATE_LADDER"):
        choose_rate(calm + [_rate_record("1e-3", 0.9)], "rate_calibration")
    # other settings and seeds are not read; a repeated rate is refused
    others = [_rate_record("1e-3", 0.0, setting="other"), _rate_record("1e-3", 0.0, seed=0)]
    assert choose_rate(calm + others, "rate_calibration").next_run == "1e-3"
    with pytest.raises(ValueError, match="Two calibration records"):
        choose_rate(grid + [_rate_record("1e-5", 1.0)], "rate_calibration")


def test_the_rate_calibration_runs_on_validation_problems_only_for_its_arms():
    from lab.studies import get_study
    from lab.studies.is_dpo_study import RATE_COMMANDS, RATE_SETTINGS

    study = get_study("is_dpo")
    assert set(RATE_SETTINGS) == {"rate_calibration", "rate_calibration_validated_number_sorting"}
    for name, setting in RATE_SETTINGS.items():
        assert setting.evaluate_on == "validation" and setting.validation_problems == 0
        assert study.default_sizes(False, name).max_steps == 20 and study.settings[name] is setting
    assert RATE_SETTINGS["rate_calibration_validated_number_sorting"].base == {"num_steps": 800}
    assert study.arms["dpo_b0.01@3e-4"].config == {"beta": 0.01, "importance_sampling": False, "learning_rate": 3e-4}
    assert "dpo_b0.01@3e-4" not in study.default_arms("dense") and len(RATE_COMMANDS) == 2


def test_the_chosen_rates_are_the_rules_choice_on_the_committed_records_and_their_design_is_declared():
    from pathlib import Path

    from lab.studies.is_dpo_study import (
        CHOSEN_RATES,
        CONFIRM_RATE_COMMANDS,
        CONFIRM_RATE_SETTINGS,
        MATCHED_KL_CLAIMS,
        RATE_COMMANDS,
        RATE_SETTINGS,
        choose_rate,
    )
    from lab.studies.report import load_records

    records = load_records(Path(__file__).parent.parent / "docs/evidence/data/is_dpo_rate_calibration.jsonl")
    assert set(CHOSEN_RATES) == set(RATE_SETTINGS)
    for setting, rate in CHOSEN_RATES.items():
        assert choose_rate(records, setting).chosen == rate
    assert all(r["evaluated_on"]["rows"] == [100, 200] and r["seed"] == 100 for r in records)
    grid = {c.rsplit(" --out_dir", 1)[0] for c in RATE_COMMANDS}
    assert {r["command"].rsplit(" --out_dir", 1)[0] for r in records} == grid  # no extension was needed
    # the chosen base's rate differs from the 3e-5 its first design ran at: that design runs again at it
    (name,) = CONFIRM_RATE_SETTINGS
    assert name == "validated_number_sorting_lr1e-4" and CONFIRM_RATE_SETTINGS[name].sizes == {"learning_rate": 1e-4}
    assert all(name in claim.settings for claim in MATCHED_KL_CLAIMS)
    assert "--seeds 30,31,32,33,34 " in CONFIRM_RATE_COMMANDS[0]


def test_the_rate_calibration_block_renders_each_rate_and_the_rules_choice(tmp_path):
    from study_records import write_records

    from lab.studies.is_dpo_study.pages import RATE_CALIBRATION_RECORDS, rate_calibration_block

    records = []
    for setting in ("rate_calibration", "rate_calibration_validated_number_sorting"):
        for rate, ratio in (("1e-5", 1.0), ("3e-5", 0.75), ("1e-4", 0.25), ("3e-4", 0.0)):
            record = _rate_record(rate, ratio, setting=setting)
            for point in record["frontier"]:
                point["kl"] = 0.0 if point["step"] == 0 else float(rate) * 1e4
            record.update(num_correct=[1], num_samples=64, pass_at_k={"1": 0.5}, wall_seconds=42.4, command=setting)
            records.append(record)
    write_records(tmp_path, RATE_CALIBRATION_RECORDS, records)
    block = rate_calibration_block(None, {}, tmp_path)["rate_calibration"]
    # 3e-5 keeps 0.75 of the base's 0.8 (0.60 at step 20): the largest rate above the collapse line
    assert "| **3e-5** | 0.80 | 0.60 | 0.75 | 0.30 | 0.500 | 42 |" in block
    assert "| 1e-4 | 0.80 | 0.20 | 0.25 | 1.00 | 0.500 | 42 |" in block
    assert block.count("The rule's choice: **3e-5**.") == 2 and "- `rate_calibration`" in block


def test_the_real_models_design_is_declared_with_its_own_claims_task_and_page_setting(tmp_path):
    from lab.scripts.study import make_parser
    from lab.studies import get_study
    from lab.studies.is_dpo_study import (
        PRETRAINED_ARMS,
        PRETRAINED_COMMAND,
        PRETRAINED_RECORDS,
        PRETRAINED_SEEDS,
        PRETRAINED_SETTING,
    )
    from lab.studies.is_dpo_study.pages import PAGE
    from lab.studies.runner import plan_study
    from lab.studies.tasks import REAL_MODEL_DATASET, REAL_MODEL_TEMPERATURE

    study = get_study("is_dpo")
    args = make_parser().parse_args(PRETRAINED_COMMAND.split()[2:])
    assert (args.name, args.setting, args.tasks, args.records) == (
        "is_dpo",
        PRETRAINED_SETTING,
        "products",
        PRETRAINED_RECORDS,
    )
    assert args.arms.split(",") == list(PRETRAINED_ARMS) and args.seeds == ",".join(map(str, PRETRAINED_SEEDS))
    task = study.tasks["products"]
    assert (task.dataset, task.temperature, task.settings) == (
        REAL_MODEL_DATASET,
        REAL_MODEL_TEMPERATURE,
        (PRETRAINED_SETTING,),
    )
    sizes = study.default_sizes(False, PRETRAINED_SETTING)
    assert (sizes.max_steps, sizes.learning_rate, sizes.num_prompts, sizes.eval_problems, sizes.eval_samples) == (
        24,
        1e-5,
        8,
        32,
        32,
    )
    # the real model's claims are its own; the toy bases' claims 1 and 2 never take a part from its setting
    own = [c for c in study.claims if PRETRAINED_SETTING in c.settings]
    assert [(c.arm, c.baseline, c.direction) for c in own] == [
        ("dpo_b0.01", "base", -1),
        ("isdpo_b0.01", "dpo_b0.01", 1),
    ]
    assert all(c.settings == (PRETRAINED_SETTING,) for c in own)
    assert all(c.settings and PRETRAINED_SETTING not in c.settings for c in study.claims if c not in own)
    assert {c.arm for c in own} | {c.baseline for c in own} == set(PRETRAINED_ARMS)
    setting = next(s for s in PAGE.settings if s.name == PRETRAINED_SETTING)
    assert (setting.records, setting.seeds) == ((PRETRAINED_RECORDS,), PRETRAINED_SEEDS)
    # the task belongs to its setting: without it, or in another, naming it fails; no --tasks there picks it
    for setting_name in (None, "dense"):
        with pytest.raises(ValueError, match=r"Task 'products' runs only in setting\(s\) \['pretrained'\]"):
            plan_study(study, tmp_path, tasks=["products"], setting=setting_name)
    assert plan_study(study, tmp_path, setting=PRETRAINED_SETTING).tasks == ["products"]
    assert plan_study(study, tmp_path).tasks == ["number_sorting", "chain_sum"]


def test_quick_pretrained_setting_pairs_chat_prompts_with_assistant_messages(tmp_path, monkeypatch):
    """The real model's task has chat prompts: every chosen and rejected of its pairs is an assistant message (a
    gold chosen of the tiny model's smoke run too), so TRL's DPO tokenises them with the chat template."""
    from datasets import load_from_disk

    from lab.studies.tasks import REAL_MODEL_DATASET

    monkeypatch.setenv("TRL_RLVR_EXT_DEBUG", "1")
    out = tmp_path / "study"
    arms = "base,dpo_b0.01,isdpo_b0.01"
    main(
        [
            "study",
            "is_dpo",
            "--quick",
            "--setting",
            "pretrained",
            "--arms",
            arms,
            "--seeds",
            "0",
            "--out_dir",
            str(out),
        ]
    )
    (data,) = (out / "products" / "_data").iterdir()
    pairs = load_from_disk(str(data / "pairs"))
    assert pairs.num_rows > 0
    for row in pairs:
        assert isinstance(row["prompt"], list) and row["prompt"][-1]["role"] == "user"
        for column in ("chosen", "rejected"):
            assert [m["role"] for m in row[column]] == ["assistant"]
    for arm in arms.split(","):
        result = json.loads((out / "products" / arm / "seed0" / "result.json").read_text())
        assert (result["setting"], result["dataset"]) == ("pretrained", REAL_MODEL_DATASET)
