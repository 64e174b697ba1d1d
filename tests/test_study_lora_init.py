"""The ``lora_init`` study: ``python -m lab study lora_init --quick`` end to end, the rate choice, the extra columns."""

import json

import pytest
import torch

from lab.cli import main


QUICK_ARMS = ["base", "lora@5e-4", "rlpo@5e-4", "full@5e-5"]


def test_quick_study_end_to_end(tmp_path, capsys):
    from lab.studies.lora_init_study import LORA_R, chosen_arms

    out = tmp_path / "study"
    argv = ["study", "lora_init", "--quick", "--tasks", "number_sorting", "--seeds", "0", "--arms"]
    argv += [",".join(QUICK_ARMS), "--out_dir", str(out)]
    assert main(argv) == 0
    runs = {
        arm: json.loads((out / "number_sorting" / arm / "seed0" / "result.json").read_text()) for arm in QUICK_ARMS
    }
    assert runs["base"]["parameters"] is None and runs["base"]["lora_init"] is None

    # full fine-tuning trains every weight; a LoRA arm exactly the rank-r adapter of every decoder linear layer
    full = runs["full@5e-5"]["parameters"]
    assert full["trainable"] == full["total"] and runs["full@5e-5"]["peft"] is None
    model = _tiny_model(runs["full@5e-5"]["base_model"])
    linears = [m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and "lm_head" not in name]
    adapter = sum(LORA_R * (m.in_features + m.out_features) for m in linears)
    for arm in ("lora@5e-4", "rlpo@5e-4"):
        parameters = runs[arm]["parameters"]
        assert parameters["trainable"] == adapter < full["trainable"]
        assert parameters["total"] == full["total"] + adapter
    # the init that ran is recorded: rlpo for the rlpo arm, none of ours (PEFT's default) for default LoRA
    assert runs["rlpo@5e-4"]["lora_init"]["method"] == "rlpo" and runs["lora@5e-4"]["lora_init"] is None
    assert runs["rlpo@5e-4"]["grpo_config"]["learning_rate"] == 5e-4
    assert runs["full@5e-5"]["grpo_config"]["learning_rate"] == 5e-5
    # every step is logged (the spike count and the collapse indicator need them)
    assert [e["step"] for e in runs["rlpo@5e-4"]["train_log"] if "grad_norm" in e] == [1, 2]

    table = (out / "results.md").read_text()
    for header in ("max grad_norm", "grad-norm spikes (>5x median)", "final reward (last 10 logs)", "collapsed"):
        assert header in table
    assert "| rlpo@5e-4 | 0 |" in table and "### Learning-rate sweep" in table
    assert "| rlpo | **5e-4** |" in table and "| full | **5e-5** |" in table  # one rate each: chosen
    phase2 = f"--seeds 0,1,2 --arms base,lora@5e-4,rlpo@5e-4,full@5e-5 --out_dir {out} --quick\n"
    assert phase2 in table
    assert chosen_arms(out, "number_sorting") == QUICK_ARMS
    assert (out / "number_sorting_training.png").read_bytes()[:4] == b"\x89PNG"

    # phase 2 by the arm set's name: the same arms, every run already there (loaded, not redone)
    capsys.readouterr()
    argv = ["study", "lora_init", "--quick", "--tasks", "number_sorting", "--seeds", "0", "--arms", "chosen"]
    assert main([*argv, "--out_dir", str(out)]) == 0
    assert capsys.readouterr().out.count("done, loading") == len(QUICK_ARMS)
    assert main(["study", "lora_init", "--quick", "--arms", "chosen", "--out_dir", str(out)]) == 1  # one line
    assert "exactly one task" in capsys.readouterr().err


def _tiny_model(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path)


@pytest.mark.parametrize("method", ["rlpo", "lora"])
def test_the_arm_applies_its_init(tiny_model_path, tmp_path, method):
    """The study's arm, built into the trainer the way the runner builds it: rlpo's A has orthonormal rows (and B = 0);
    PEFT's default A (Kaiming-uniform) does not."""
    from peft import LoraConfig
    from transformers import AutoTokenizer

    from lab.studies import QUICK, get_study
    from lab.studies.runner import _grpo_config
    from trl_rlvr_ext.grpo.grpo_trainer import RLVRGRPOTrainer

    study = get_study("lora_init")
    task, arm = study.tasks["number_sorting"], study.arms[f"{method}@5e-4"]
    args, _ = _grpo_config(tmp_path, task, arm, QUICK, seed=0)
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path,
        reward_funcs=lambda completions, **kwargs: [0.0] * len(completions),
        args=args,
        train_dataset=_dataset(),
        processing_class=AutoTokenizer.from_pretrained(tiny_model_path),
        peft_config=LoraConfig(**arm.peft),
    )
    lora_a = [m.weight for name, m in trainer.model.named_modules() if name.endswith("lora_A.default")]
    lora_b = [m.weight for name, m in trainer.model.named_modules() if name.endswith("lora_B.default")]
    linears = [n for n, m in _tiny_model(tiny_model_path).named_modules() if isinstance(m, torch.nn.Linear)]
    assert len(lora_a) == len(lora_b) == len(linears) - 1  # every linear layer but the LM head
    assert all(torch.count_nonzero(b) == 0 for b in lora_b)
    orthonormal = [torch.allclose(a @ a.T, torch.eye(a.shape[0]), atol=1e-5) for a in lora_a]
    assert all(orthonormal) if method == "rlpo" else not any(orthonormal)


def _dataset():
    from datasets import Dataset

    return Dataset.from_dict({"prompt": ["1 2 3"] * 4})


def _result(arm, seed, pass_at_1):
    return {"arm": arm, "seed": seed, "pass_at_k": {"1": pass_at_1}}


def test_choose_rates_by_hand():
    from lab.studies.lora_init_study import choose_rates

    results = [
        _result("base", 0, 0.9),  # not a sweep arm
        _result("lora@5e-4", 0, 0.40),
        _result("lora@1.5e-3", 0, 0.45),  # best
        _result("lora@5e-3", 0, 0.10),
        _result("lora@5e-3", 1, 0.99),  # another seed: not part of the choice
        _result("rlpo@5e-3", 0, 0.50),
        _result("rlpo@1.5e-3", 0, 0.50),  # tie with 5e-3: the lower rate
        _result("full@5e-4", 0, 0.30),
        _result("full@5e-5", 0, 0.30),  # tie: the lower rate, whatever the order
    ]
    chosen = choose_rates(results)
    assert chosen == {"lora": "1.5e-3", "rlpo": "1.5e-3", "full": "5e-5"}
    assert list(chosen) == ["lora", "rlpo", "full"]  # the study's method order
    assert choose_rates(results, seed=1) == {"lora": "5e-3"}


def test_chosen_arms_needs_phase_one(tmp_path):
    from lab.studies.lora_init_study import chosen_arms

    with pytest.raises(ValueError, match="run phase 1 first"):
        chosen_arms(tmp_path, "number_sorting")


def _log(rewards=None, norms=None):
    log = [{"step": i + 1, "reward": r} for i, r in enumerate(rewards or [])]
    log += [{"step": i + 1, "grad_norm": g} for i, g in enumerate(norms or [])]
    return {"train_log": log}


def test_columns_by_hand():
    from lab.studies.lora_init_study import collapsed, final_reward, grad_norm_spikes, reward_change

    # median 1.0: 5.0 is not above 5x the median, 5.5 and 50 are
    assert grad_norm_spikes(_log(norms=[1.0, 1.0, 0.5, 5.0, 5.5, 50.0, 1.0])) == 2.0
    assert grad_norm_spikes(_log()) is None
    # starts at 0.5, the last 10 logs average 0.2 < 0.25: collapsed (the early dip to 0.1 does not count)
    falling = [0.5, 0.1] + [0.4] * 8 + [0.2] * 10
    assert final_reward(_log(falling)) == pytest.approx(0.2) and collapsed(_log(falling)) == 1.0
    assert reward_change(_log(falling)) == pytest.approx(-0.3)
    # a fall within the first two logs is still a collapse against the start
    assert collapsed(_log([0.5] + [0.2] * 19)) == 1.0
    holding = [0.5] + [0.3] * 19
    assert collapsed(_log(holding)) == 0.0 and reward_change(_log(holding)) == pytest.approx(-0.2)
    assert collapsed(_log([0.0] * 20)) == 0.0  # nothing to lose
    assert collapsed(_log()) is None and final_reward(_log()) is None and reward_change(_log()) is None
    # fewer logs than the window (a short run): the final reward is the mean of them all
    assert final_reward(_log([1.0, 0.0, 0.5])) == 0.5 and reward_change(_log([1.0, 0.0, 0.5])) == -0.5


def test_every_method_has_its_sweep():
    from lab.studies import get_study
    from lab.studies.lora_init_study import FULL_RATES, LORA_RATES, LORA_SETTINGS

    study = get_study("lora_init")
    # the first design's arms run by default; the validated design's ladder adds 3 rates per method, in its settings
    assert len(study.default_arms(None)) == 1 + 6 * 3 and len(study.arms) == 1 + 6 * 3 + 6 * 3
    assert study.arms["rlpo@1.5e-4"].settings == ("sweep", "confirm") and not study.arms["rlpo@5e-4"].settings
    for method in ("lora", "rlpo", "rlmo", "pissa", "milora"):
        for rate in LORA_RATES:
            arm = study.arms[f"{method}@{rate}"]
            assert arm.peft == LORA_SETTINGS and arm.config["learning_rate"] == float(rate)
            assert arm.config.get("lora_init") == (None if method == "lora" else method)
    for rate in FULL_RATES:
        assert study.arms[f"full@{rate}"].peft is None
    assert max(map(float, FULL_RATES)) <= min(map(float, LORA_RATES))


def test_extension_rates_by_hand():
    """The grid goes past its edge while a method's best validation pass@1 is at the lowest or highest rate it ran,
    one ladder step at a time; an interior best needs nothing; the ladder's end fails."""
    from lab.studies.lora_init_study import SWEEP_SEED, extension_rates

    seed = SWEEP_SEED
    results = [
        _result("base", seed, 0.9),
        *(_result(f"lora@{r}", seed, p) for r, p in (("5e-4", 0.40), ("1.5e-3", 0.45), ("5e-3", 0.10))),  # interior
        *(_result(f"rlpo@{r}", seed, p) for r, p in (("5e-4", 0.50), ("1.5e-3", 0.45), ("5e-3", 0.10))),  # low edge
        *(_result(f"pissa@{r}", seed, p) for r, p in (("5e-4", 0.30), ("1.5e-3", 0.40), ("5e-3", 0.41))),  # high
        *(_result(f"full@{r}", seed, p) for r, p in (("5e-5", 0.50), ("1.5e-4", 0.50), ("5e-4", 0.20))),  # tie: low
        _result("rlpo@5e-5", 0, 0.99),  # another seed: no part of the choice
    ]
    assert extension_rates(results) == {"rlpo": "1.5e-4", "pissa": "1.5e-2", "full": "1.5e-5"}
    # once the lower rate ran and is worse, RLPO's best is interior
    results.append(_result("rlpo@1.5e-4", seed, 0.48))
    assert "rlpo" not in extension_rates(results)
    # the ladder's end is an error, not a silent choice
    results += [_result("pissa@1.5e-2", seed, 0.42)]
    with pytest.raises(ValueError, match="pissa's best rate 1.5e-2 is the end of its ladder"):
        extension_rates(results)
    with pytest.raises(ValueError, match="ran one rate only"):
        extension_rates([_result("milora@5e-4", seed, 0.4)])
    with pytest.raises(ValueError, match="not on its ladder"):
        extension_rates([_result("milora@5e-4", seed, 0.4), _result("milora@2e-3", seed, 0.5)])


def test_sweep_setting_measures_the_validation_problems(tmp_path, capsys):
    """A sweep run is measured on the validation problems, never the test problems, and its record says which rows;
    ``--arms extend`` adds the next rate past an edge and fails before the grid has run."""
    from lab.studies import get_study
    from lab.studies.lora_init_study import SWEEP_SEED, extend_arms
    from trl_rlvr_ext.data import load_named_dataset

    out = tmp_path / "sweep"
    with pytest.raises(ValueError, match="run the grid first"):
        extend_arms(out, "number_sorting")
    argv = ["study", "lora_init", "--quick", "--tasks", "number_sorting", "--setting", "sweep"]
    argv += ["--seeds", str(SWEEP_SEED), "--arms", "base,rlpo@5e-4,rlpo@1.5e-3", "--out_dir", str(out)]
    assert main(argv) == 0
    base = json.loads((out / "number_sorting" / "base" / f"seed{SWEEP_SEED}" / "result.json").read_text())
    # quick sizes: 3 test problems, so the validation problems are held-out rows 3-5
    assert base["evaluated_on"] == {"name": "validation", "split": "test", "rows": [3, 6], "problems": 3}
    assert base["setting"] == "sweep" and "--setting sweep" in base["rerun_command"]
    task = get_study("lora_init").tasks["number_sorting"]
    held_out = load_named_dataset(task.dataset)["test"]
    assert len(base["num_correct"]) == 3
    trained = json.loads((out / "number_sorting" / "rlpo@5e-4" / f"seed{SWEEP_SEED}" / "result.json").read_text())
    assert trained["evaluated_on"]["rows"] == [3, 6]
    # the run's inputs: the evaluated problems and the probes are held-out rows 3-5, none of the test rows 0-2
    from lab.studies.runner import QUICK, load_run_inputs

    inputs = load_run_inputs(task, QUICK, quick=True, evaluate_on="validation")
    assert inputs.test["prompt"] == held_out["prompt"][3:6]
    assert [row["prompt"] for row in inputs.probe_rows] == held_out["prompt"][3:6]
    assert inputs.evaluated_on == base["evaluated_on"]  # what the records say comes from the inputs themselves
    on_test = load_run_inputs(task, QUICK, quick=True)
    assert on_test.test["prompt"] == held_out["prompt"][:3] and on_test.evaluated_on is None
    table = (out / "results.md").read_text()
    assert f"### Learning-rate sweep (seed {SWEEP_SEED}, validation problems;" in table
    assert "Grid extensions still to run (--arms extend): {'rlpo':" in table
    expected = extend_arms(out, "number_sorting")
    assert expected[0] == "base" and len(expected) == 2 and expected[1].startswith("rlpo@")


def test_study_runs_train_in_trls_default_bf16_autocast(tmp_path):
    """What the evidence pages say about precision: the studies' trainers keep TRL's default ``bf16=True`` (on CPU:
    bf16 autocast around the forward, fp32 weights), for GRPO and DPO alike; the base arm is evaluated in fp32."""
    from lab.studies import get_study
    from lab.studies.is_dpo_study import _dpo_config
    from lab.studies.runner import QUICK, _grpo_config

    study = get_study("lora_init")
    args, settings = _grpo_config(tmp_path, study.tasks["number_sorting"], study.arms["lora@5e-4"], QUICK, seed=0)
    assert args.bf16 is True and "bf16" not in settings  # TRL's default, not a study setting
    dpo = get_study("is_dpo")
    args, settings = _dpo_config(tmp_path, dpo.arms["dpo_b0.01"], QUICK, seed=0)
    assert args.bf16 is True and "bf16" not in settings


def test_validated_rates_are_the_sweeps_choice_on_validation_problems():
    """The confirmation's rates are what `choose_rates` picks from the committed sweep records, after every grid
    extension the sweep needed; every sweep record measured the validation problems (held-out rows 100-199) with the
    unreported seed."""
    from pathlib import Path

    from lab.studies.lora_init_study import (
        CONFIRM_ARMS,
        METHODS,
        SWEEP_SEED,
        VALIDATED_RATES,
        arm_name,
        choose_rates,
        extension_rates,
    )
    from lab.studies.report import load_records

    records = load_records(Path(__file__).resolve().parents[1] / "docs/evidence/data/lora_init_sweep.jsonl")
    assert {r["seed"] for r in records} == {SWEEP_SEED} and {r["setting"] for r in records} == {"sweep"}
    assert all(r["evaluated_on"]["rows"] == [100, 200] for r in records)
    assert choose_rates(records, SWEEP_SEED) == VALIDATED_RATES and list(VALIDATED_RATES) == list(METHODS)
    assert extension_rates(records) == {}  # no method's best sits at an edge of what it ran
    assert CONFIRM_ARMS == ("base", *(arm_name(m, r) for m, r in VALIDATED_RATES.items()))
