"""Trivial-policy baselines (`lab.studies.baselines`, the policies in `lab.studies.trivial_policies`):
each guess by hand, graded by the task's own reward, the records' schema, and the committed
``docs/evidence/data/trivial.jsonl`` against the studies' evaluation sets."""

import itertools
import json
import random
from pathlib import Path

import pytest

from lab.studies import baselines, trivial_policies
from trl_rlvr_ext.data import load_named_dataset
from trl_rlvr_ext.evaluation.estimators import pass_at_k_curve
from trl_rlvr_ext.rewards import get_reward_func


pytest.importorskip("reasoning_gym", reason="needs the [gym] extra (installed by the dev extra)")

DATA = Path(__file__).resolve().parents[1] / "docs" / "evidence" / "data"
SORTING = "reasoning_gym:number_sorting?min_numbers=3&max_numbers=3&max_decimals=0&min_value=0&max_value=99&size=20"
CHAIN = "reasoning_gym:chain_sum?min_terms=3&max_terms=3&max_digits=1&size=20&test_size=10&strip_template=true"


def _reward(row, answers):
    reward = get_reward_func("reasoning_gym")
    completions = [f"<answer>{a}</answer>" for a in answers]
    return reward(completions, task=[row["task"]] * len(answers), entry=[row["entry"]] * len(answers))


def test_number_sorting_every_accepted_format_and_the_shuffles():
    rows = load_named_dataset(SORTING + "&test_size=10")["test"]
    row = next(r for r in rows if "ascending" in r["prompt"] and len(set(baselines.prompt_numbers(r))) == 3)
    numbers = baselines.prompt_numbers(row)
    in_order = sorted(numbers, key=float)
    # the verifier accepts each format the shuffled copies write (and rejects the wrong order in each)
    for write in trivial_policies._SORTING_FORMATS.values():
        assert _reward(row, [write(in_order), write(in_order[::-1])]) == [1.0, 0.0], write(in_order)
    for policy in baselines.POLICIES["number_sorting"][:4]:
        rng = random.Random(0)
        guesses = [policy.guess(row, rng) for _ in range(600)]
        # every guess is one of the 6 orders of the prompt's numbers; about one in six is right
        orders = {
            trivial_policies._SORTING_FORMATS[policy.name.removeprefix("shuffled_copy")](list(p))
            for p in itertools.permutations(numbers)
        }
        assert set(guesses) == orders
        assert 70 < sum(_reward(row, guesses)) < 130
    prompt_order = baselines.POLICIES["number_sorting"][4]
    assert prompt_order.guess(row, random.Random(0)) == str(numbers)


def test_chain_sum_guesses_by_hand():
    row = load_named_dataset(CHAIN)["test"][0]
    first, second, third = baselines.prompt_terms(row)
    assert row["prompt"].startswith(str(first)) and int(row["answer"]) == first + second + third
    rng = random.Random(0)
    guesses = {trivial_policies._random_signs(row, rng) for _ in range(200)}
    assert guesses == {str(first + a * abs(second) + b * abs(third)) for a in (1, -1) for b in (1, -1)}
    low, high = trivial_policies._chain_sum_support(row)
    assert (low, high) == (0 - 2 * 9, 3 * 9)
    assert {int(trivial_policies._uniform_chain_sum(row, rng)) for _ in range(3000)} == set(range(low, high + 1))
    assert {trivial_policies._copy_term(row, rng) for _ in range(100)} == {str(first), str(second), str(third)}


def test_toy_guesses_by_hand():
    row = {"prompt": "740+580=", "answer": "2310"}  # 47 + 85 = 132, little-endian, 3 digits wide
    rng = random.Random(0)
    guesses = {trivial_policies._random_carries(row, rng) for _ in range(400)}
    assert len(guesses) == 8 and "2310" in guesses  # 2**3 carry patterns, one of them right
    assert trivial_policies._no_carries(row, rng) == "2200"  # 7+5 -> 2, 4+8 -> 2, 0+0 -> 0, no carry out
    assert all(len(trivial_policies._uniform_toy(row, rng)) == 4 for _ in range(50))


def test_records_schema_determinism_and_the_mixture_per_task():
    records = baselines.baseline_records("sorting", SORTING + "&test_size=6", "reasoning_gym", 5, 8, seeds=(0, 1))
    arms = [r["arm"] for r in records]
    assert arms == [f"trivial_{p.name}" for p in baselines.POLICIES["number_sorting"] for _ in (0, 1)]
    for record in records:
        assert record["study"] == "trivial" and record["num_samples"] == 8 and len(record["num_correct"]) == 5
        assert record["pass_at_k"] == {str(k): v for k, v in pass_at_k_curve([8] * 5, record["num_correct"]).items()}
        assert record["sizes"] == {"eval_problems": 5, "eval_samples": 8}
    by_arm = {(r["arm"], r["seed"]): r["num_correct"] for r in records}
    # the four formats draw the same permutations: equal counts show the verifier takes each format
    for seed in (0, 1):
        assert len({tuple(by_arm[(f"trivial_shuffled_copy{s}", seed)]) for s in ("", "_json", "_bare", "_int")}) == 1
    again = baselines.baseline_records("sorting", SORTING + "&test_size=6", "reasoning_gym", 5, 8, seeds=(0, 1))
    assert [r["num_correct"] for r in again] == [r["num_correct"] for r in records]

    mixture = "reasoning_gym:chain_sum+number_sorting?size=40&test_size=12&chain_sum.max_digits=1&strip_template=true"
    records = baselines.baseline_records("mixture", mixture, "reasoning_gym", 12, 4, seeds=(0,))
    assert (
        records[0]["arm"] == "trivial_shuffled_copy+random_signs"
        or records[0]["arm"] == "trivial_random_signs+shuffled_copy"
    )
    assert len({tuple(sorted(r["policies"].items())) for r in records}) == len(records)  # no arm twice
    for record in records:
        parts = record["per_task"]
        assert sum(p["problems"] for p in parts.values()) == 12 and set(parts) == {"chain_sum", "number_sorting"}
    toy = baselines.baseline_records("toy", "toy:arithmetic", "toy_accuracy", 4, 4, seeds=(0,))
    assert [r["arm"] for r in toy] == ["trivial_random_carries", "trivial_no_carries", "trivial_uniform_support"]
    assert (
        baselines.baseline_records("bits", "reasoning_gym:count_bits?size=10&test_size=3", "reasoning_gym", 3, 2) == []
    )


def test_committed_trivial_records_cover_every_evaluation_set_and_reproduce():
    from lab.scripts.study_baselines import STUDIES, read_records

    # every records file the CLI reads (gzip-compressed ones included), the trivial records themselves left out as the
    # CLI leaves them out; records of other kinds (the screening's, the demo's) carry no arm and are not study runs
    records = [r for r in read_records([str(DATA)]) if r.get("study") != "trivial"]
    trivial = [json.loads(line) for line in (DATA / "trivial.jsonl").read_text().splitlines()]
    sets = baselines.study_evaluation_sets(records, studies=set(STUDIES))
    assert {s["task"] for s in sets} == {
        "toy",
        "toy9",
        "chain_sum",
        "number_sorting",
        "mixture",
        "countdown",
        "countdown_compact",
        "products",  # the real model's task (the pretrained study, and the is_dpo study's setting 'pretrained')
    }
    assert {(s["task"], s["num_samples"]) for s in sets} >= {
        ("products", 32),
        ("toy", 64),
        ("toy", 256),
        ("chain_sum", 64),
        ("countdown", 64),
        ("countdown", 256),
        ("countdown_compact", 64),
        ("countdown_compact", 256),
    }
    for evaluation_set in sets:
        mine = [
            r
            for r in trivial
            if (r["task"], r["dataset"], r["sizes"]["eval_problems"], r["num_samples"])
            == tuple(evaluation_set[k] for k in ("task", "dataset", "eval_problems", "num_samples"))
        ]
        assert sorted({r["seed"] for r in mine}) == [0, 1, 2] and len(mine) % 3 == 0, evaluation_set["task"]
        assert all(r["evaluates"]["studies"] == sorted(evaluation_set["studies"]) for r in mine)
        assert all(len(r["num_correct"]) == evaluation_set["eval_problems"] for r in mine)
    # one record recomputed from scratch: the same guesses, the same grades
    kept = next(r for r in trivial if r["task"] == "number_sorting" and r["num_samples"] == 64 and r["seed"] == 1)
    [again] = [
        r
        for r in baselines.baseline_records("number_sorting", kept["dataset"], "reasoning_gym", 100, 64, seeds=(1,))
        if r["arm"] == kept["arm"]
    ]
    assert again["num_correct"] == kept["num_correct"]


def test_cli_writes_the_records_of_each_evaluation_set(tmp_path):
    from lab.cli import main

    dataset = CHAIN
    run = {"study": "self", "task": "mine", "arm": "base", "seed": 0, "quick": False, "dataset": dataset}
    run.update(reward="reasoning_gym", num_correct=[1, 0, 2], num_samples=4, sizes={"eval_problems": 3})
    records = tmp_path / "runs" / "mine" / "base" / "seed0"
    records.mkdir(parents=True)
    (records / "result.json").write_text(json.dumps(run))
    (tmp_path / "runs" / "other.jsonl").write_text(json.dumps({**run, "arm": "grpo", "quick": True}) + "\n")
    out = tmp_path / "trivial.jsonl"
    assert main(["baselines", "--records", str(tmp_path / "runs"), "--seeds", "0,1", "--out", str(out)]) == 0
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["arm"], r["seed"]) for r in written] == [
        (f"trivial_{name}", seed) for name in ("random_signs", "uniform_support", "copy_term") for seed in (0, 1)
    ]
    assert all(r["evaluates"]["studies"] == ["self"] and len(r["num_correct"]) == 3 for r in written)
    assert written[0]["command"].startswith("python -m lab baselines --records ")


def test_runs_measured_on_the_validation_problems_make_no_evaluation_set():
    """The baselines are graded on the first test problems: a sweep's or a calibration's runs, measured on the
    validation problems, must not ask for baselines (they would be graded on problems those runs never saw)."""

    def record(study, evaluated_on=None):
        r = {
            "study": study,
            "task": "number_sorting",
            "dataset": "reasoning_gym:x",
            "reward": "reasoning_gym",
            "sizes": {"eval_problems": 2},
            "num_samples": 32,
            "num_correct": [1, 2],
        }
        return {**r, "evaluated_on": evaluated_on} if evaluated_on else r

    validation = {"name": "validation", "split": "test", "rows": [100, 102], "problems": 2}
    assert baselines.study_evaluation_sets([record("lora_init", validation)]) == []
    (only,) = baselines.study_evaluation_sets([record("lora_init", validation), record("self")])
    assert only["studies"] == ["self"] and only["num_samples"] == 32


PRODUCTS = "reasoning_gym:products?min_digits=1&max_digits=1&size=20&test_size=10&dedup=near&format=chat"


def test_products_guesses_by_hand_and_graded_under_the_lenient_format():
    rows = load_named_dataset(PRODUCTS + "&answer=last_number")["test"]
    row = rows[0]
    a, b = baselines.prompt_factors(row)
    assert int(row["answer"]) == a * b and row["answer_format"] == "last_number"
    rng = random.Random(0)
    # random_product: a uniform pair of one-digit factors; each of the 100 pairs is drawn
    pairs = [(x, y) for x in range(10) for y in range(10)]
    assert {trivial_policies._random_product(row, rng) for _ in range(3000)} == {str(x * y) for x, y in pairs}
    assert {trivial_policies._copy_factor(row, rng) for _ in range(100)} == {str(a), str(b)}
    assert {int(trivial_policies._uniform_product(row, rng)) for _ in range(3000)} == set(range(82))
    # the completion of a lenient format is the bare number, which the reward grades; tags stay tags
    assert baselines.completion_of("12", PRODUCTS, row["prompt"], "last_number") == [
        {"role": "assistant", "content": "12"}
    ]
    assert baselines.completion_of("12", PRODUCTS, "q", None) == "<answer>12</answer>"
    reward = get_reward_func("reasoning_gym")
    num_correct, used = baselines.evaluate_trivial_policy([row], PRODUCTS, reward, "copy_factor", 400, seed=0)
    assert used == {"products": "copy_factor"}
    # copy_factor is right when the copied factor is the product: each factor is copied about half the time
    right = sum(factor == a * b for factor in (a, b))
    assert abs(num_correct[0] - 200 * right) < 50
    num_correct, _ = baselines.evaluate_trivial_policy([row], PRODUCTS, reward, "random_product", 4000, seed=0)
    share = sum(x * y == a * b for x, y in pairs) / 100
    assert abs(num_correct[0] / 4000 - share) < 0.02, (a, b, share)
