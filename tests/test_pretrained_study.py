"""The ``pretrained`` study (the seed claims on the real model): its declared design, the pilot's sizing, the page's
"pending" until every declared seed has run, the task temperature and ``study --workers`` on the tiny model."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from lab.cli import main
from lab.studies import StudyTask, get_study
from lab.studies.judging import judge_parts
from lab.studies.pages import PageSetting
from lab.studies.pretrained_study import pilot_mde
from lab.studies.pretrained_study.design import CLAIMS, COMMANDS, GROUPS, SEEDS, SELF_CLAIMS, SIZES
from lab.studies.verdicts import Claim, minimum_detectable_effect


def test_design_declares_every_claim_arm_and_five_fresh_seeds():
    study = get_study("pretrained")
    arms = [arm for group in GROUPS.values() for arm in group]
    assert list(study.arms) == arms
    assert len(SEEDS) >= 5 and not {0, 1} & set(SEEDS)  # the pilot's seeds are not reused
    # every claim against stock GRPO + LoRA, but RELEX's against the steps it is fit on and SELF's boundary claims
    # (group b): the base against the trivial policy, GRPO against the base, SELF against GRPO at as many prompts
    baselines = {"8.": "lora_8steps", "10.": "trivial*", "11.": "base", "12c.": "lora_same_prompts"}
    for claim in CLAIMS:
        assert claim.arm in arms and claim.baseline == baselines.get(claim.name.split()[0], "lora")
    # the boundary claims read pass@k at the design's largest k and need the base above the trivial policy there;
    # those that read only arms seen on the page before group b's declaration say so
    boundary = [c for c in CLAIMS if c.metric != "pass@1"]
    assert [c.name.split()[0] for c in boundary] == ["10.", "11.", "12.", "12c."] and tuple(boundary) == SELF_CLAIMS
    assert {c.metric for c in boundary} == {f"pass@{SIZES.eval_samples}"}
    assert all(c.requires == boundary[0].name for c in boundary[1:])
    assert [bool(c.exploratory) for c in boundary] == [True, True, False, False]
    assert study.arms["self"].config == {"curation": "self", "curation_id_column": "idx"}
    assert study.arms["lora_same_prompts"].same_prompts_as == "self"
    assert study.arms["self"].peft == study.arms["lora_same_prompts"].peft == study.arms["lora"].peft
    assert [c.margin for c in CLAIMS if c.margin is not None] == [0.03]  # one non-inferiority claim: RELEX's 9
    assert study.tasks["products"].temperature == 0.7
    assert SIZES.steps_per_generation > 1  # rollouts are reused, so the clip rules act
    # the next methods train with their own option on and nothing else changed; what is not run says so
    from lab.studies.pretrained_study import NEXT_METHODS, NOT_RUN

    assert study.arms["rsi_s"].config == {
        "rsi_selection": "quantile",
        "rsi_quantile_low": 0.1,
        "rsi_quantile_high": 0.9,
    }
    assert study.arms["popo"].config == {"objective": "popo"} and study.arms["popo"].peft == study.arms["lora"].peft
    assert set(NEXT_METHODS) == set(GROUPS["e. next methods"])
    assert "POISE" in NOT_RUN and "RELEX" not in NOT_RUN and any(k.startswith("b.") for k in NOT_RUN)
    # the commands run every arm, group by group, on every declared seed
    assert [c.split("--arms ")[1].split()[0].split(",") for c in COMMANDS] == [list(g) for g in GROUPS.values()]
    assert all(
        f"--seeds {','.join(map(str, SEEDS))} --records docs/evidence/data/pretrained.jsonl" in c for c in COMMANDS
    )


def _pilot(after: list[list[int]], samples: int) -> list[dict]:
    return [{"after_num_correct": a, "settings": {"eval_samples": samples}} for a in after]


def test_pilot_mde_by_hand():
    # two runs, 4 problems, 4 samples: rates (1, .5, .25, 0) and (.5, .5, .75, 0)
    pilot = _pilot([[4, 2, 1, 0], [2, 2, 3, 0]], 4)
    difference = np.array([0.5, 0.0, -0.5, 0.0])
    total = difference.var(ddof=1)  # 1/6
    assert total == pytest.approx(1 / 6)
    # binomial part: 2 x mean over runs and problems of p (1 - p) / (n - 1)
    binomial = 2 * np.mean([[0, 0.25 / 3, 0.1875 / 3, 0], [0.25 / 3, 0.25 / 3, 0.1875 / 3, 0]])
    assert binomial == pytest.approx(2 * (0.25 * 3 + 0.1875 * 2) / 3 / 8)
    for samples in (4, 8, 32):
        variance = (total - binomial) + binomial * 4 / samples
        expected = minimum_detectable_effect(math.sqrt(variance / (5 * 4)), 5 * 4 - 1)
        assert pilot_mde(pilot, samples) == pytest.approx(expected, rel=1e-12)
    assert pilot_mde(pilot, 32) < pilot_mde(pilot, 8) < pilot_mde(pilot, 4)
    # all variance binomial: the training part is floored at 0, not negative
    assert pilot_mde(_pilot([[2, 2], [2, 2]], 4), 8) == pytest.approx(
        minimum_detectable_effect(math.sqrt(2 * (0.25 / 3) * 0.5 / 10), 9)
    )
    with pytest.raises(ValueError, match="two runs"):
        pilot_mde(pilot[:1], 8)


def test_seed_spread_by_hand():
    from lab.studies.pretrained_study.pages import seed_spread

    arm = {0: np.array([1.0, 0.0]), 1: np.array([0.5, 0.5])}
    baseline = {0: np.array([0.0, 0.0]), 1: np.array([0.5, 0.5])}
    realised, sampling = seed_spread(arm, baseline, samples=3)
    # per-seed mean differences 0.5 and 0: sd (ddof 1) = sqrt(0.125)
    assert realised == pytest.approx(math.sqrt(0.125))
    # binomial: seed 0 has none (every rate 0 or 1); seed 1: (4 x 0.25) / (3 - 1) / 2² = 0.125; mean 0.0625
    assert sampling == pytest.approx(0.25)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        seed_spread(arm, {0: baseline[0]}, samples=3)


def _records(seeds, arms=("lora", "rlpo")):
    rng = np.random.default_rng(0)
    return [
        {"task": "t", "arm": arm, "seed": seed, "num_samples": 4, "num_correct": rng.integers(0, 5, 6).tolist()}
        for seed in seeds
        for arm in arms
    ]


def test_a_claim_waits_for_every_declared_seed():
    study = SimpleNamespace(
        tasks={"t": None},
        arms={},
        claims=[Claim("c", "rlpo", "lora", "pass@1", smallest_effect=0.02)],
    )
    setting = PageSetting("main", "m", (), seeds=(1, 2, 3))
    (part,) = judge_parts("s", study, setting, _records([1, 2]))
    assert part.judgement is None and part.not_judged == "pending: 2 of 3 declared seeds"
    (complete,) = judge_parts("s", study, setting, _records([1, 2, 3]))
    # a seed outside the declared ones is left out, not judged
    (extra,) = judge_parts("s", study, setting, _records([1, 2, 3, 4]))
    assert complete.judgement is not None and extra.judgement is not None
    undeclared = judge_parts("s", study, PageSetting("main", "m", ()), _records([1, 2, 3, 4]))[0]
    assert extra.judgement.effect != undeclared.judgement.effect  # seed 4 counts only without declared seeds
    assert extra.judgement.effect == complete.judgement.effect


def test_task_temperature_is_checked_and_reaches_training():
    from lab.studies.design import Arm, StudySizes
    from lab.studies.runner import _grpo_config

    with pytest.raises(ValueError, match="temperature=0 must be positive"):
        StudyTask("t", "d", "r", lambda quick: "", lambda row: "", 4, temperature=0)
    task = StudyTask("t", "d", "r", lambda quick: "", lambda row: "", 4, temperature=0.7)
    _, settings = _grpo_config(
        __import__("pathlib").Path("/tmp/x"), task, Arm("a"), StudySizes(max_steps=1, num_prompts=2), 0
    )
    assert settings["temperature"] == 0.7
    assert StudyTask("t", "d", "r", lambda quick: "", lambda row: "", 4).temperature == 1.0


def test_study_workers_split_the_seeds(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    argv = ["study", "pretrained", "--quick", "--arms", "base,lora", "--seeds", "0,1", "--out_dir", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    for unit in ("seed 0: base", "seed 0: lora", "seed 1: base", "seed 1: lora"):  # one process per unit
        assert f"[worker] {unit}: pid" in printed and f"[{unit}] [pretrained] products /" in printed
    for seed in (0, 1):
        result = json.loads((out / "products" / "lora" / f"seed{seed}" / "result.json").read_text())
        # each worker ran its own seed with one thread, and records the command that was typed, not its own
        assert result["command"] == "python -m lab study " + " ".join(argv[1:])
        assert result["provenance"]["num_threads"] == 1
        assert result["grpo_config"]["temperature"] == 0.7
    assert "| lora |" in (out / "results.md").read_text()
    # finished: a rerun starts no process, it only loads
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "[worker" not in printed and printed.count("done, loading") == 4
    # a bad choice fails once, in this process, before any worker starts
    monkeypatch.setenv("TRL_RLVR_EXT_DEBUG", "1")  # the CLI re-raises its clear errors instead of one line
    with pytest.raises(ValueError, match=r"Unknown arm\(s\) \['lorra'\]"):
        main(["study", "pretrained", "--quick", "--arms", "lorra", "--seeds", "0,1", "--out_dir", str(out)])
    assert "[worker" not in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--workers must be at least 1, got 0"):
        main(["study", "pretrained", "--quick", "--workers", "0", "--out_dir", str(out)])


def test_work_units_keep_an_arm_with_the_run_it_needs(tmp_path):
    from lab.scripts.study import work_units
    from lab.studies import plan_study

    plan = plan_study(get_study("pretrained"), tmp_path, arms=["lora", "lora_8steps", "nsr", "relex"], seeds=[10, 11])
    assert work_units(plan) == [
        (10, ["lora"]),
        (10, ["lora_8steps", "relex"]),  # relex extrapolates lora_8steps' same-seed trajectory
        (10, ["nsr"]),
        (11, ["lora"]),
        (11, ["lora_8steps", "relex"]),
        (11, ["nsr"]),
    ]
    # a budget-matched arm goes with its source too, and the source's own group follows the plan's order
    plan = plan_study(get_study("self"), tmp_path, tasks=["toy"], arms=["base", "self", "grpo_same_budget"], seeds=[0])
    assert work_units(plan) == [(0, ["base"]), (0, ["self", "grpo_same_budget"])]


def test_the_relex_block_by_hand(tmp_path):
    from lab.studies.pretrained_study.pages import PAGE, relex_block

    assert relex_block(PAGE, {"main": []}, tmp_path) == {"relex": "No RELEX run yet."}
    summary = {"relex/explained_median": 0.9876, "relex/r2_median": 0.5}
    records = [
        {"arm": "lora_8steps", "seed": 10, "pass_at_k": {"1": 0.5}},
        {"arm": "relex", "seed": 10, "pass_at_k": {"1": 0.625}, "extrapolation": {"report": {"summary": summary}}},
        {"arm": "lora", "seed": 10, "pass_at_k": {"1": 0.75}},
        {"arm": "lora", "seed": 11, "pass_at_k": {"1": 0.7}},  # no RELEX run at seed 11: no row
    ]
    block = relex_block(PAGE, {"main": records}, tmp_path)["relex"]
    assert block.splitlines()[2:] == ["| 10 | 0.500 | 0.625 | 0.750 | 0.988 | 0.500 |"]


def test_page_says_what_is_left(tmp_path):
    from lab.studies.pretrained_study.pages import PAGE, progress_block

    block = progress_block(PAGE, {"main": _records([10, 11], arms=("lora",))}, tmp_path)["progress"]
    total = sum(len(arms) for arms in GROUPS.values()) * len(SEEDS)
    assert f"Not finished: {total - 2} of {total} runs left" in block
    assert "| a. LoRA initialisers | `lora` | 10, 11 | 12, 13, 14 |" in block


def test_method_box_before_and_while_the_runs_are_pending():
    from lab.studies.pages import MethodSummary
    from lab.studies.verdict_index import method_box

    summary = MethodSummary("docs/methods/x.md", "s")
    pages = {"s": SimpleNamespace(title="S page", path="docs/evidence/s.md")}
    assert (
        method_box({"s": []}, [summary], pages)
        == "- [S page](../evidence/s.md): no runs yet (the claims are declared and wait for their runs)."
    )
    study = SimpleNamespace(
        tasks={"t": None}, arms={}, claims=[Claim("c", "rlpo", "lora", "pass@1", smallest_effect=0.02)]
    )
    parts = judge_parts("s", study, PageSetting("main", "m", (), seeds=(1, 2, 3)), _records([1, 2]))
    text = method_box({"s": parts}, [summary], pages)
    assert text == "- [S page](../evidence/s.md), not judged yet: c: **not judged (pending: 2 of 3 declared seeds)**"


def test_records_restore_finished_runs_so_a_fresh_clone_resumes(tmp_path, capsys):
    from lab.studies.records import export_records, restore_runs

    out = tmp_path / "out"
    base = ["study", "pretrained", "--quick", "--arms", "base", "--seeds", "0", "--workers", "1"]
    assert main([*base, "--out_dir", str(out)]) == 0
    result = json.loads((out / "products" / "base" / "seed0" / "result.json").read_text())
    records = tmp_path / "pretrained.jsonl"
    result["quick"] = False  # export refuses smoke runs; this one stands in for a real run
    (out / "products" / "base" / "seed0" / "result.json").write_text(json.dumps(result))
    assert export_records(out, records) == 1
    fresh = tmp_path / "fresh"
    capsys.readouterr()
    assert main([*base, "--out_dir", str(fresh), "--records", str(records)]) == 0
    printed = capsys.readouterr().out
    assert "1 finished runs restored" in printed and "base / seed 0: done, loading" in printed
    assert json.loads((fresh / "products" / "base" / "seed0" / "result.json").read_text()) == result
    assert restore_runs(records, fresh, "pretrained") == 0  # present: left alone
    with pytest.raises(ValueError, match="record of study 'pretrained', not 'nsr'"):
        restore_runs(records, tmp_path / "other", "nsr")
