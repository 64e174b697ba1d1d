"""The ``nsr`` study: ``python -m lab study nsr --quick`` end to end, and its table columns by hand."""

import gzip
import json
import math
from pathlib import Path

import pytest

from lab.studies.nsr_study import clipped_share, collapsed, rescued_share, signal_clipped_share


def _log(**series):
    """A result whose training log has ``series[key][i]`` at step ``i + 1`` (``None`` entries are left out)."""
    steps = max(len(values) for values in series.values())
    entries = [{"step": i + 1} for i in range(steps)]
    for key, values in series.items():
        for entry, value in zip(entries, values):
            if value is not None:
                entry[key] = value
    return {"train_log": entries}


def test_collapse_rule_by_hand():
    # last reward 0.24 < 0.5 * first reward 0.5 = 0.25: collapsed
    assert collapsed(_log(reward=[0.5, None, 0.3, None, 0.24], entropy=[0.07] * 5)) == 1.0
    # 0.26 >= 0.25 and entropy 0.05 >= 0.01: not collapsed
    assert collapsed(_log(reward=[0.5, 0.26], entropy=[0.07, 0.05])) == 0.0
    # the reward holds but the entropy is gone (0.009 < 0.01): collapsed
    assert collapsed(_log(reward=[0.5, 0.6], entropy=[0.07, 0.009])) == 1.0
    # a first reward of 0 cannot halve; NaN and None entries are skipped (the last finite entropy is 0.02)
    assert collapsed(_log(reward=[0.0, 0.0], entropy=[0.07, 0.02, math.nan])) == 0.0
    # no training log (an untrained arm): an empty cell, not a zero
    assert collapsed({"train_log": []}) is None


def test_clipped_and_rescued_shares_by_hand():
    hard = _log(**{"clip_ratio/region_mean": [0.0, 0.02, 0.04], "cispo_clip_ratio": [None, None, None]})
    assert clipped_share(hard) == pytest.approx(0.02)
    assert clipped_share(_log(cispo_clip_ratio=[0.1, 0.3])) == pytest.approx(0.2)
    assert clipped_share(_log(entropy=[1.0])) is None  # sapo: no hard clip logged
    # ACPO: its own bounds' shares (low + high per step), not TRL's region_mean against the fixed epsilon
    acpo = _log(
        **{
            "clip_ratio/region_mean": [0.05, 0.05],
            "adaptive_clip/clip_ratio_low": [0.001, 0.003],
            "adaptive_clip/clip_ratio_high": [0.0, 0.002],
        }
    )
    assert clipped_share(acpo) == pytest.approx((0.001 + 0.0 + 0.003 + 0.002) / 2)
    nsr = _log(**{"clip_recovery/low_frac": [0.01, 0.03], "clip_recovery/high_frac": [0.0, 0.02]})
    assert rescued_share(nsr) == pytest.approx((0.01 + 0.0 + 0.03 + 0.02) / 2)
    assert rescued_share(hard) is None
    # one side logged at fewer steps than the other: a malformed record, refused rather than read
    with pytest.raises(ValueError, match="different steps"):
        rescued_share(_log(**{"clip_recovery/low_frac": [0.01, 0.03], "clip_recovery/high_frac": [0.0, None]}))


def test_signal_clipped_share_by_hand():
    # update index 0 (the fresh batch, ratio 1) is left out; 0.01 + 0.03 and 0.0 + 0.02 over the replayed steps
    log = _log(
        **{
            "off_policy/update_index": [0.0, 1.0, 2.0],
            "off_policy/clipped_low_frac": [0.5, 0.01, 0.0],
            "off_policy/clipped_high_frac": [0.5, 0.03, 0.02],
        }
    )
    assert signal_clipped_share(log) == pytest.approx((0.04 + 0.02) / 2)
    assert signal_clipped_share(_log(**{"clip_ratio/region_mean": [0.1]})) is None  # no diagnostics logged


def test_settings_are_acpos_two_regimes():
    from lab.studies import get_study

    study = get_study("nsr")
    for name, updates in (("updates2", 2), ("updates16", 16)):
        sizes = study.default_sizes(False, name)
        reuse = study.arm_in_setting(study.arms["acpo"], name).config["num_iterations"]
        assert sizes.steps_per_generation * reuse == updates
        # the same completions per update and the same number of updates in both regimes
        assert sizes.num_prompts * sizes.num_generations // sizes.steps_per_generation == 32
        assert sizes.max_steps == 49
    with pytest.raises(ValueError, match=r"Unknown setting 'updates4'.*updates16"):
        study.default_sizes(False, "updates4")


def test_study_sizes_reuse_rollouts():
    from lab.studies import get_study

    study = get_study("nsr")
    assert list(study.arms) == ["none", "nsr", "nsr_expected", "cispo", "sapo", "acpo", "acpo_nsr", "delta"]
    for sizes in (study.default_sizes(False), study.default_sizes(True)):
        # the runner uses gradient_accumulation_steps=1: more than one step per generation reuses the rollouts
        assert sizes.steps_per_generation > 1
    assert study.default_sizes(False).eval_samples == 64
    # the self study's tasks (and so its cached bases), the toy included (the one task where >= 5 % is clipped when
    # this was written) and countdown (many solutions per problem, built for a second)
    self_tasks = get_study("self").tasks
    assert list(study.tasks) == ["chain_sum", "number_sorting", "toy", "countdown", "countdown_compact"]
    for name, task in study.tasks.items():
        twin = self_tasks[name]
        assert (task.dataset, task.reward, task.max_completion_length) == (
            twin.dataset,
            twin.reward,
            twin.max_completion_length,
        )
        assert task.base_model.__qualname__ == twin.base_model.__qualname__  # the same base builder


def test_quick_nsr_study_end_to_end(tmp_path):
    pytest.importorskip("reasoning_gym", reason="needs the [gym] extra (installed by the dev extra)")
    from lab.cli import main

    out = tmp_path / "nsr"
    arms = "none,nsr,nsr_expected,cispo,sapo"
    assert (
        main(
            ["study", "nsr", "--quick", "--tasks", "chain_sum", "--arms", arms, "--seeds", "0", "--out_dir", str(out)]
        )
        == 0
    )
    results = {}
    for arm in ("none", "nsr", "nsr_expected", "cispo", "sapo"):
        results[arm] = json.loads((out / "chain_sum" / arm / "seed0" / "result.json").read_text())
        config = results[arm]["grpo_config"]
        # the rollouts are reused, so the importance ratio is not identically 1 and the clip can bind
        assert config["steps_per_generation"] > config["gradient_accumulation_steps"] or config["num_iterations"] > 1
        assert set(results[arm]["pass_at_k"]) == {"1", "2", "4"}
    keys = {arm: set().union(*(entry for entry in r["train_log"])) for arm, r in results.items()}
    # the arms really differ: their losses log different metrics
    assert {"clip_recovery/low_frac", "clip_recovery/high_frac", "clip_ratio/region_mean"} <= keys["nsr"]
    assert {"clip_recovery/low_frac", "clip_ratio/region_mean"} <= keys["nsr_expected"]
    assert "clip_ratio/region_mean" in keys["none"] and not any(k.startswith("clip_recovery/") for k in keys["none"])
    assert "cispo_clip_ratio" in keys["cispo"] and "clip_ratio/region_mean" not in keys["cispo"]
    assert not {"cispo_clip_ratio", "clip_ratio/region_mean"} & keys["sapo"]
    assert [results[a]["grpo_config"]["clip_recovery"] for a in ("none", "nsr", "nsr_expected")] == [
        "none",
        "nsr",
        "nsr_expected",
    ]
    assert (
        results["cispo"]["grpo_config"]["loss_type"] == "cispo"
        and results["sapo"]["grpo_config"]["loss_type"] == "sapo"
    )
    table = (out / "results.md").read_text()
    for header in ("clipped share", "rescued share", "final reward", "final entropy", "max grad_norm", "collapsed"):
        assert f"| {header} |" in table
    for arm in results:
        assert f"| {arm} | 0 |" in table
    assert (out / "chain_sum_training.png").read_bytes()[:4] == b"\x89PNG"


def test_quick_extension_arms_in_the_near_on_policy_setting(tmp_path):
    from lab.cli import main

    out = tmp_path / "nsr"
    argv = [
        "study",
        "nsr",
        "--quick",
        "--tasks",
        "toy",
        "--setting",
        "updates2",
        "--seeds",
        "0",
        "--out_dir",
        str(out),
    ]
    assert main([*argv, "--arms", "none,acpo,acpo_nsr,delta"]) == 0
    results = {
        a: json.loads((out / "toy" / a / "seed0" / "result.json").read_text())
        for a in ("none", "acpo", "acpo_nsr", "delta")
    }
    keys = {arm: set().union(*(entry for entry in r["train_log"])) for arm, r in results.items()}
    for arm, result in results.items():
        config = result["grpo_config"]
        assert (config["num_iterations"], config["steps_per_generation"]) == (1, 2)  # the setting's config and sizes
        assert result["setting"] == "updates2" and "--setting updates2" in result["rerun_command"]
        # the diagnostics are on (the untrained quick model earns no reward, so no token has an advantage and the
        # per-token shares have nothing to count: only the update index is logged)
        assert result["grpo_config"]["off_policy_diagnostics"] and "off_policy/update_index" in keys[arm]
    assert any(k.startswith("adaptive_clip/bound_bin") for k in keys["acpo"] & keys["acpo_nsr"])
    assert "clip_recovery/low_frac" in keys["acpo_nsr"] and "clip_recovery/low_frac" not in keys["acpo"]
    assert any(k.startswith("token_credit/") for k in keys["delta"]) and not any(
        k.startswith("adaptive_clip/") for k in keys["delta"]
    )
    assert "| clipped share (signal tokens, replayed steps) |" in (out / "results.md").read_text()


def _calibration_record(name, share, rewards=(0.2, 0.25), seed=100, task="countdown_compact"):
    log = [{"step": 1, "reward": rewards[0], "entropy": 0.2, "off_policy/update_index": 0}]
    log += [
        {
            "step": 2,
            "off_policy/update_index": 1,
            "off_policy/clipped_low_frac": share / 2,
            "off_policy/clipped_high_frac": share / 2,
        },
        {"step": 3, "reward": rewards[1], "entropy": 0.2, "off_policy/update_index": 0},
    ]
    return {"task": task, "arm": "none", "seed": seed, "setting": f"calibrate_{name}", "train_log": log}


def test_the_clip_regime_rule_takes_the_first_candidate_that_clips_enough_without_collapsing():
    from lab.studies.nsr_study import CLIP_CANDIDATES, CLIP_TARGET, choose_clip_regime

    names = list(CLIP_CANDIDATES)
    assert names == ["updates32", "updates16_lr6e-4", "updates32_lr6e-4"] and CLIP_TARGET == 0.05
    enough, short = CLIP_TARGET + 0.001, CLIP_TARGET - 0.001
    # the first candidate that clips enough wins, even when a later one clips more
    records = [
        _calibration_record(names[0], short),
        _calibration_record(names[1], enough),
        _calibration_record(names[2], 0.2),
    ]
    assert choose_clip_regime(records) == names[1]
    # a candidate that clips enough but collapsed (last reward below half the first) is passed over
    records[1] = _calibration_record(names[1], enough, rewards=(0.2, 0.09))
    assert choose_clip_regime(records) == names[2]
    # none qualifies: no regime
    records[2] = _calibration_record(names[2], short)
    assert choose_clip_regime(records) is None
    # records of other tasks, arms or seeds are not read; a missing candidate or a repeated one is refused
    with pytest.raises(ValueError, match="No calibration record"):
        choose_clip_regime(records[:2] + [_calibration_record(names[2], 0.2, seed=20)])
    with pytest.raises(ValueError, match="Two calibration records"):
        choose_clip_regime(records + [_calibration_record(names[0], enough)])


def test_calibration_settings_evaluate_on_validation_and_mirror_their_candidates():
    from lab.studies.nsr_study import CALIBRATION_COMMANDS, CLIP_CANDIDATES, SETTINGS

    for name, candidate in CLIP_CANDIDATES.items():
        twin = SETTINGS[f"calibrate_{name}"]
        assert (twin.sizes, twin.config) == (candidate.sizes, candidate.config)
        assert (twin.evaluate_on, candidate.evaluate_on) == ("validation", "test")
        assert SETTINGS[name] is candidate
    assert [c.split("--setting ")[1].split()[0] for c in CALIBRATION_COMMANDS] == [
        f"calibrate_{n}" for n in CLIP_CANDIDATES
    ]
    assert all("--arms none --seeds 100 " in c for c in CALIBRATION_COMMANDS)


def test_the_calibration_block_renders_each_candidate_and_the_rules_choice(tmp_path):
    from lab.studies.nsr_study import CLIP_CANDIDATES
    from lab.studies.nsr_study.pages import CLIP_CALIBRATION_RECORDS, clip_calibration_block

    assert "Declared, not run yet" in clip_calibration_block(None, {}, tmp_path)["clip_calibration"]
    names = list(CLIP_CANDIDATES)
    records = []
    for name, share in zip(names, (0.03, 0.06, 0.07)):
        record = _calibration_record(name, share)
        record.update(num_correct=[1], num_samples=64, pass_at_k={"1": 0.25}, wall_seconds=70.0, command=f"cmd {name}")
        records.append(record)
    path = tmp_path / CLIP_CALIBRATION_RECORDS
    path.parent.mkdir(parents=True)
    text = "".join(json.dumps(r) + "\n" for r in records)
    path.write_bytes(gzip.compress(text.encode()) if path.suffix == ".gz" else text.encode())
    block = clip_calibration_block(None, {}, tmp_path)["clip_calibration"]
    assert f"| updates32 | {CLIP_CANDIDATES['updates32'].description} | 0.0300 | 0 | 1.250 | 0.250 |" in block
    assert "| **updates16_lr6e-4** |" in block and "The rule's choice: **updates16_lr6e-4**" in block
    assert "- `cmd updates32_lr6e-4` (70 s)" in block


def test_the_chosen_regime_is_the_rules_choice_on_the_committed_calibration_records():
    from lab.studies.nsr_study import (
        CALIBRATION_COMMANDS,
        CLIP_REGIME,
        CONFIRM_ARMS,
        CONFIRM_COMMANDS,
        CONFIRM_SEEDS,
        choose_clip_regime,
    )
    from lab.studies.nsr_study.pages import CLIP_CALIBRATION_RECORDS
    from lab.studies.report import load_records

    records = load_records(Path(__file__).parent.parent / CLIP_CALIBRATION_RECORDS)
    assert choose_clip_regime(records) == CLIP_REGIME
    # every calibration record ran its declared command, on the validation problems
    assert sorted(r["command"].rsplit(" --out_dir", 1)[0] for r in records) == sorted(
        c.rsplit(" --out_dir", 1)[0] for c in CALIBRATION_COMMANDS
    )
    assert all(r["evaluated_on"]["name"] == "validation" and r["evaluated_on"]["rows"] == [100, 200] for r in records)
    seeds = [int(s) for c in CONFIRM_COMMANDS for s in c.split("--seeds ")[1].split()[0].split(",")]
    assert tuple(seeds) == CONFIRM_SEEDS and all(f"--setting {CLIP_REGIME} " in c for c in CONFIRM_COMMANDS)
    assert all("--arms " + ",".join(CONFIRM_ARMS) + " " in c for c in CONFIRM_COMMANDS)
