"""The ``is_dpo`` study: ``trl-rlvr-ext study is_dpo --quick`` end to end, its shared data cache, resume, and the KL
estimator by hand."""

import json
import math

import pytest

from trl_rlvr_ext.cli import main
from trl_rlvr_ext.studies.is_dpo_study import sampled_kl


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
        assert result["command"] == "trl-rlvr-ext study " + " ".join(argv[1:])
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
    from trl_rlvr_ext.studies import get_study, gym_bases

    calls = []
    monkeypatch.setattr(gym_bases, "get_gym_base_model_path", lambda **kwargs: calls.append(kwargs) or "base")
    is_dpo, self_study = get_study("is_dpo"), get_study("self")
    assert list(is_dpo.tasks) == ["number_sorting", "chain_sum"]
    for name, task in is_dpo.tasks.items():
        twin = self_study.tasks[name]
        assert (task.dataset, task.reward, task.max_completion_length) == (
            twin.dataset,
            twin.reward,
            twin.max_completion_length,
        )
        assert task.base_model(False) == twin.base_model(False) == "base"
        assert calls[-2] == calls[-1]  # the same warm-start settings, so the same cache entry
    assert list(is_dpo.arms) == ["base", "dpo_b0.01", "isdpo_b0.01", "dpo_b0.1", "isdpo_b0.1"]
    for name, arm in is_dpo.arms.items():
        if name != "base":
            assert arm.config == {"beta": float(name.split("_b")[1]), "importance_sampling": name.startswith("is")}


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
