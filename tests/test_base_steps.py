"""The base-steps calibration (`lab.studies.base_steps`): its ladder, settings and rule by hand, and the
runner's warm-start overrides (`Setting.base`) that its runs use."""

import dataclasses
import json

import pytest

from lab.studies import base_steps
from trl_rlvr_ext.gym_bases import pass_rate_spread


def test_pass_rate_spread_by_hand():
    # rates 0, 1/8, 4/8, 7/8, 8/8 over 8 samples: never 1/5, mid (0.1 < r < 0.9) 3/5, always 1/5
    assert pass_rate_spread([0, 1, 4, 7, 8], 8) == {"never": 0.2, "mid": 0.6, "always": 0.2}
    # the bounds are strict: 0.1 and 0.9 exactly are not in the middle
    assert pass_rate_spread([1, 9], 10)["mid"] == 0.0
    with pytest.raises(ValueError, match="non-empty"):
        pass_rate_spread([], 8)


def test_ladders_first_grids_and_settings():
    assert base_steps.ladder("chain_sum") == (50, 100, 200, 400, 800, 1600, 3200)
    assert base_steps.ladder("mixture") == (125, 250, 500, 1000, 2000, 4000, 8000)
    assert base_steps.first_grid("number_sorting") == (200, 400, 800)
    assert base_steps.first_grid("mixture") == (500, 1000, 2000)
    with pytest.raises(ValueError, match="No base-steps calibration is declared for task 'toy'"):
        base_steps.ladder("toy")
    for task in base_steps.STEPS_IN_USE:
        for steps in base_steps.ladder(task):
            setting = base_steps.SETTINGS[f"base_steps{steps}"]
            assert setting.base == {"num_steps": steps, "seed": base_steps.SEED}
            assert setting.evaluate_on == "validation" and setting.sizes == {"eval_samples": base_steps.SAMPLES}
    assert base_steps.SEED == 100 and len(base_steps.COMMANDS) == 9
    assert base_steps.COMMANDS[0] == (
        "trl-rlvr-ext study self --tasks chain_sum --arms base --seeds 100 --setting base_steps200 "
        "--out_dir <dir>/base_steps200"
    )
    # the self study runs them (an unknown setting would fail before anything ran)
    from lab.studies import get_study

    assert set(base_steps.SETTINGS) <= set(get_study("self").settings)


def _record(steps, num_correct, task="chain_sum", seed=base_steps.SEED, arm="base", samples=10):
    return {
        "task": task,
        "arm": arm,
        "seed": seed,
        "setting": f"base_steps{steps}",
        "base_overrides": {"num_steps": steps, "seed": seed},
        "num_correct": num_correct,
        "num_samples": samples,
    }


# spreads over 4 problems at 10 samples: 0/4, 1/4, 2/4, 3/4, 4/4 in the middle
SPREAD = {0: [0, 0, 0, 0], 1: [5, 0, 0, 0], 2: [5, 5, 0, 10], 3: [5, 5, 5, 0], 4: [5, 5, 5, 5]}


def test_the_rule_runs_the_first_grid_then_takes_the_widest_spread_inside_it():
    choose = base_steps.choose
    # the first grid is run first, in order
    assert choose([], "chain_sum") == base_steps.Calibration("chain_sum", {}, None, 200)
    records = [_record(200, SPREAD[1]), _record(800, SPREAD[2])]
    assert choose(records, "chain_sum").next_run == 400
    # the middle is the widest: chosen, nothing more to run
    records.append(_record(400, SPREAD[3]))
    calibration = choose(records, "chain_sum")
    assert (calibration.chosen, calibration.next_run) == (400, None)
    assert calibration.spreads == {200: 0.25, 400: 0.75, 800: 0.5}
    # a tie goes to fewer steps
    tie = [_record(200, SPREAD[1]), _record(400, SPREAD[3]), _record(800, SPREAD[3])]
    assert choose(tie, "chain_sum").chosen == 400
    # records of other tasks, arms, seeds and settings are not read
    other = [
        _record(400, SPREAD[4], task="mixture"),
        _record(400, SPREAD[4], seed=0),
        _record(400, SPREAD[4], arm="x"),
    ]
    other.append({**_record(400, SPREAD[4]), "setting": "main"})
    assert choose(records + other, "chain_sum").chosen == 400


def test_a_best_candidate_at_an_edge_extends_the_grid_until_it_is_inside():
    choose = base_steps.choose
    records = [_record(200, SPREAD[1]), _record(400, SPREAD[2]), _record(800, SPREAD[3])]
    assert choose(records, "chain_sum").next_run == 1600
    records.append(_record(1600, SPREAD[4]))
    assert choose(records, "chain_sum").next_run == 3200
    records.append(_record(3200, SPREAD[0]))
    assert choose(records, "chain_sum").chosen == 1600
    # the low edge the same way
    low = [_record(200, SPREAD[3]), _record(400, SPREAD[2]), _record(800, SPREAD[1])]
    assert choose(low, "chain_sum").next_run == 100
    low.append(_record(100, SPREAD[2]))
    assert choose(low, "chain_sum").chosen == 200
    # a best candidate at the ladder's end cannot be extended: a declared change is needed
    end = [_record(50, SPREAD[4]), _record(100, SPREAD[3])] + [_record(n, SPREAD[1]) for n in (200, 400, 800)]
    with pytest.raises(ValueError, match="end of its ladder"):
        choose(end, "chain_sum")


def test_the_rule_refuses_repeated_wrong_and_off_ladder_records():
    choose = base_steps.choose
    with pytest.raises(ValueError, match="Two calibration records of chain_sum at 200"):
        choose([_record(200, SPREAD[1]), _record(200, SPREAD[2])], "chain_sum")
    mislabelled = {**_record(200, SPREAD[1]), "base_overrides": {"num_steps": 400, "seed": 100}}
    with pytest.raises(ValueError, match="warm-started"):
        choose([mislabelled], "chain_sum")
    with pytest.raises(ValueError, match="not on its ladder"):
        choose([_record(300, SPREAD[1])], "chain_sum")


def test_a_setting_overrides_the_warm_start_of_a_task_that_takes_it(tmp_path, monkeypatch):
    """`Setting.base` reaches the task's ``base_model`` as keyword arguments and is recorded; a task whose base takes
    none is refused with the fix."""
    from lab.studies import get_study, runner
    from lab.studies.runner import Setting

    study = get_study("self")
    study = dataclasses.replace(study, settings={"longer": Setting("longer", base={"num_steps": 7, "seed": 100})})
    seen = []
    toy = study.tasks["toy"]

    def base_model(quick, **overrides):
        seen.append(overrides)
        return toy.base_model(quick)

    study.tasks["mine"] = dataclasses.replace(toy, name="mine", base_model=base_model)
    (result,) = runner.run_study(
        study, tmp_path, tasks=["mine"], arms=["base"], seeds=[100], quick=True, setting="longer"
    )
    assert seen == [{"num_steps": 7, "seed": 100}] and result["base_overrides"] == {"num_steps": 7, "seed": 100}
    with pytest.raises(ValueError, match="builds no base whose warm start can change"):
        runner.run_study(
            study, tmp_path / "toy", tasks=["toy"], arms=["base"], seeds=[0], quick=True, setting="longer"
        )
    # without a setting the base is the task's own, and the record has no overrides
    (plain,) = runner.run_study(study, tmp_path / "plain", tasks=["mine"], arms=["base"], seeds=[0], quick=True)
    assert seen[-1] == {} and "base_overrides" not in plain


def test_a_preset_base_takes_the_overrides_over_its_own_settings(monkeypatch):
    from lab.studies import get_study

    calls = []
    monkeypatch.setattr(
        "trl_rlvr_ext.gym_bases.get_gym_base_model_path", lambda **settings: calls.append(settings) or "path"
    )
    study = get_study("self")
    assert study.tasks["number_sorting"].base_model(False, num_steps=800, seed=100) == "path"
    assert study.tasks["countdown"].base_model(False) == "path"
    assert calls == [
        {"dataset": "number_sorting", "num_steps": 800, "seed": 100},
        {"dataset": "countdown", "num_steps": 1000, "demonstrations": "varied"},
    ]


def test_export_takes_several_out_dirs_and_orders_settings(tmp_path):
    from lab.studies.records import export_records

    for setting in ("base_steps800", "base_steps200"):
        run = tmp_path / setting / "chain_sum" / "base" / "seed100"
        run.mkdir(parents=True)
        (run / "result.json").write_text(
            json.dumps({"task": "chain_sum", "arm": "base", "seed": 100, "setting": setting})
        )
    out = tmp_path / "records.jsonl"
    assert export_records([tmp_path / "base_steps800", tmp_path / "base_steps200"], out, ["base"]) == 2
    assert [json.loads(line)["setting"] for line in out.read_text().splitlines()] == ["base_steps200", "base_steps800"]


def test_the_calibration_block_renders_the_candidates_and_the_rules_choice(tmp_path):
    from study_records import write_records

    from lab.studies.self_study.pages import BASE_STEPS_RECORDS, base_steps_block

    declared = base_steps_block(None, {}, tmp_path)["base_steps"]
    assert declared.startswith("Declared, not run yet") and f"`{base_steps.COMMANDS[-1]}`" in declared
    records = [_record(200, SPREAD[1]), _record(400, SPREAD[3]), _record(800, SPREAD[2])]
    records.append(_record(1000, SPREAD[2], task="mixture"))
    for record, pass1 in zip(records, (0.1, 0.2, 0.3, 0.4)):
        record.update(pass_at_k={"1": pass1, "64": 0.9}, wall_seconds=61.4, command=f"cmd {record['setting']}")
    write_records(tmp_path, BASE_STEPS_RECORDS, records)
    block = base_steps_block(None, {}, tmp_path)["base_steps"]
    # 400 steps: 3 of 4 problems in the middle, 1 never solved, none always
    assert "| **400** | 0.200 | 0.900 | 0.25 | 0.75 | 0.00 | 61 |" in block
    assert "| 200 | 0.100 | 0.900 | 0.75 | 0.25 | 0.00 | 61 |" in block
    assert "**chain_sum** (steps in use: 400):" in block and "The rule's choice: **400** steps." in block
    # the mixture has one of its three first candidates: the rule asks for the first missing one
    assert f"the rule asks for 500 steps next (`{base_steps.command('mixture', 500)}`)" in block
    assert "- `cmd base_steps800` (61 s)" in block


def test_the_chosen_steps_are_the_rules_choice_on_the_committed_records():
    from pathlib import Path

    from lab.studies.report import load_records
    from lab.studies.self_study.pages import BASE_STEPS_RECORDS

    records = load_records(Path(__file__).parent.parent / BASE_STEPS_RECORDS)
    for task in base_steps.STEPS_IN_USE:
        calibration = base_steps.choose(records, task)
        assert calibration.chosen == base_steps.CHOSEN[task] and calibration.next_run is None
    # every record ran its declared command on the validation problems, with the calibration seed
    declared = {base_steps.command(r["task"], int(r["setting"][len("base_steps") :])) for r in records}
    assert {r["command"].rsplit(" --out_dir", 1)[0] for r in records} == {
        c.rsplit(" --out_dir", 1)[0] for c in declared
    }
    assert all(r["evaluated_on"]["rows"] == [100, 200] and r["seed"] == base_steps.SEED for r in records)
    assert base_steps.VALIDATED_TASKS == ("number_sorting",)


def test_the_bases_in_use_are_named_by_their_digest_and_the_unvalidated_one_is_marked():
    from trl_rlvr_ext.gym_bases import GymWarmStartSettings

    for task, digest in base_steps.DIGEST_IN_USE.items():
        preset = base_steps.PRESET_OF[task]
        assert GymWarmStartSettings(dataset=preset, num_steps=base_steps.STEPS_IN_USE[task]).digest() == digest
    reason = base_steps.unvalidated_reason("/cache/reasoning_gym/" + base_steps.DIGEST_IN_USE["number_sorting"])
    assert reason.startswith("base chosen on the test set: number_sorting's base was warm-started 400 steps")
    assert base_steps.unvalidated_reason("/cache/reasoning_gym/" + base_steps.DIGEST_IN_USE["chain_sum"]) == ""
    assert base_steps.unvalidated_reason(None) == "" and base_steps.unvalidated_reason("toy:base") == ""


def test_the_validated_settings_run_only_their_task_on_the_chosen_base(tmp_path):
    from lab.studies import get_study, is_dpo_study, runner, self_study

    name = base_steps.validated_setting("number_sorting")
    for study_name in ("self", "is_dpo"):
        setting = get_study(study_name).settings[name]
        assert setting.base == {"num_steps": 800} and setting.tasks == ("number_sorting",)
    assert get_study("is_dpo").settings[name].dense_every == is_dpo_study.SETTINGS["dense"].dense_every
    assert get_study("self").default_sizes(False, name).max_steps == 100
    command = (
        f"trl-rlvr-ext study self --setting {name} --tasks number_sorting --arms base,grpo --seeds 20,21,22,23,24"
    )
    assert self_study.VALIDATED_COMMANDS == (f"{command} --out_dir <dir>",)
    with pytest.raises(ValueError, match="is declared for task\\(s\\) \\['number_sorting'\\] only"):
        runner.run_study(get_study("self"), tmp_path, tasks=["chain_sum"], arms=["base"], seeds=[0], setting=name)


def test_the_preference_data_of_another_base_have_their_own_key(monkeypatch):
    from lab.studies import get_study, is_dpo_study

    monkeypatch.setattr("trl_rlvr_ext.gym_bases.get_gym_base_model_path", lambda **s: f"bases/{s['num_steps']}")
    task, sizes = get_study("is_dpo").tasks["number_sorting"], is_dpo_study.IS_DPO_SIZES
    assert is_dpo_study.data._data_settings(task, sizes, False)["base_model"] == "bases/400"
    assert is_dpo_study.data._data_settings(task, sizes, False, {"num_steps": 800})["base_model"] == "bases/800"


def test_the_chosen_base_records_ran_their_declared_commands_on_that_base():
    from pathlib import Path

    from lab.studies import is_dpo_study, self_study
    from lab.studies.report import load_records
    from trl_rlvr_ext.gym_bases import GymWarmStartSettings

    digest = GymWarmStartSettings(dataset="number_sorting", num_steps=base_steps.CHOSEN["number_sorting"]).digest()
    data = Path(__file__).parent.parent / "docs/evidence/data"
    confirm = next(iter(is_dpo_study.CONFIRM_RATE_SETTINGS))
    for path, commands, runs, seeds, setting in (
        ("self_validated.jsonl", self_study.VALIDATED_COMMANDS, 10, range(20, 25), "validated_number_sorting"),
        ("is_dpo_validated.jsonl", is_dpo_study.VALIDATED_COMMANDS, 25, range(20, 25), "validated_number_sorting"),
        # the same design at the rate chosen on this base: fresh seeds, 1e-4 in every trained run's sizes
        (
            "is_dpo_validated_lr.jsonl",
            is_dpo_study.CONFIRM_RATE_COMMANDS,
            25,
            is_dpo_study.CONFIRM_RATE_SEEDS,
            confirm,
        ),
    ):
        records = load_records(data / path)
        assert len(records) == runs
        declared = {c.rsplit(" --out_dir", 1)[0] for c in commands}
        assert {r["command"].rsplit(" --out_dir", 1)[0] for r in records} == declared
        assert {r["base_model"].rsplit("/", 1)[-1] for r in records} == {digest}
        assert {r["seed"] for r in records} == set(seeds)
        assert all(r["setting"] == setting for r in records)
    trained = [r for r in load_records(data / "is_dpo_validated_lr.jsonl") if r["arm"] != "base"]
    assert len(trained) == 20 and {r["sizes"]["learning_rate"] for r in trained} == {1e-4}
