"""The countdown task: its solution enumerator against reasoning-gym's own verifier, the varied demonstrations of its
warm start, its trivial baseline, and a quick ``nsr`` study on it end to end."""

import json
import math
import random
from pathlib import Path

import pytest

from trl_rlvr_ext.tasks.countdown import countdown_solutions, entry_solutions, random_expression


pytest.importorskip("reasoning_gym", reason="needs the [gym] extra (installed by the dev extra)")

from lab.studies import baselines
from trl_rlvr_ext import gym_bases
from trl_rlvr_ext.gym_bases import GymWarmStartSettings


SMALL = (
    "reasoning_gym:countdown?min_numbers=3&max_numbers=3&min_value=1&max_value=9&min_target=1&max_target=30"
    "&size=40&test_size=10&strip_template=true"
)


def _reward(row, answers):
    from trl_rlvr_ext.rewards import get_reward_func

    reward = get_reward_func("reasoning_gym")
    completions = [f"<answer>{a}</answer>" for a in answers]
    n = len(answers)
    return reward(
        completions, task=[row["task"]] * n, entry=[row["entry"]] * n, task_options=[row["task_options"]] * n
    )


@pytest.fixture(scope="module")
def small():
    from trl_rlvr_ext.data import load_named_dataset

    return load_named_dataset(SMALL)


def test_enumerator_on_hand_made_problems():
    # 2, 3, 4 -> 10: 2*3 + 4 in both factor orders and both places, and 3*4 - 2 in both factor orders
    assert countdown_solutions([2, 3, 4], 10) == ["2*3 + 4", "3*2 + 4", "3*4 - 2", "4 + 2*3", "4 + 3*2", "4*3 - 2"]
    assert countdown_solutions([1, 2], 2) == ["1*2", "2*1", "2/1"]
    assert countdown_solutions([1, 2], 3) == ["1 + 2", "2 + 1"]
    # the parentheses the precedence needs, and no others
    assert "9/(3 - 2)" in countdown_solutions([9, 3, 2], 9) and "9/3 - 2" not in countdown_solutions([9, 3, 2], 9)
    # a negative intermediate is fine (3 - (5 - 9)); 9 + (3 - 5) and (9 + 3) - 5 are one text
    expected = ["3 + 9 - 5", "3 - (5 - 9)", "3 - 5 + 9", "9 + 3 - 5", "9 - (5 - 3)", "9 - 5 + 3"]
    assert countdown_solutions([9, 5, 3], 7) == expected
    # exact arithmetic: 9/2 is not an integer but 9/2*4 is 18 (sympy, which the verifier uses, is exact too)
    assert "9/2*4" in countdown_solutions([9, 2, 4], 18)
    # a repeated number is used as often as it is listed; no solution at all is an empty list
    assert countdown_solutions([1, 1], 2) == ["1 + 1"] and countdown_solutions([1, 1], 5) == []
    with pytest.raises(ValueError, match="Unknown operators"):
        countdown_solutions([1, 2], 3, operators=("+", "^"))


def test_every_solution_and_nothing_else_is_accepted_by_the_verifier(small):
    train = small["train"]
    checked = 0
    for i in range(12):
        row = train[i]
        entry = json.loads(row["entry"])
        solutions = entry_solutions(entry)
        assert row["answer"] in solutions  # the gold is written as the enumerator writes it
        assert _reward(row, solutions) == [1.0] * len(solutions)
        # every other expression over the same numbers (random trees, operators and orders) is rejected
        rng = random.Random(i)
        others = sorted({random_expression(entry["metadata"]["numbers"], rng) for _ in range(200)} - set(solutions))
        assert others and set(_reward(row, others)) <= {0.0, 0.05, 0.01}, others
        checked += len(others)
        # whitespace does not matter to the verifier; a missing or a repeated number does
        assert _reward(row, [solutions[0].replace(" ", "")]) == [1.0]
        assert _reward(row, [solutions[0] + " + 0", solutions[0][:-1] + "0"]) != [1.0, 1.0]
    assert checked > 100


def test_gold_of_every_preset_train_problem_is_enumerated():
    from trl_rlvr_ext.data import load_named_dataset

    train = load_named_dataset(gym_bases.PRESETS["countdown"])["train"]
    counts = [len(entry_solutions(json.loads(e))) for e in train["entry"]]
    golds_found = [gold in entry_solutions(json.loads(e)) for gold, e in zip(train["answer"], train["entry"])]
    assert all(golds_found)
    # the point of the preset: most problems have several solutions (median 6 when this was written)
    assert sorted(counts)[len(counts) // 2] >= 4 and sum(c >= 2 for c in counts) / len(counts) > 0.9
    # the generation budget holds every solution a varied base was shown: <answer>...</answer> + EOS
    from lab.studies import get_study

    longest = max(len(s) for e in train["entry"] for s in entry_solutions(json.loads(e)))
    assert len("<answer></answer>") + longest + 1 <= get_study("self").tasks["countdown"].max_completion_length


def test_varied_demonstrations_differ_across_draws(small):
    train = small["train"]
    settings = GymWarmStartSettings(dataset=SMALL, demonstrations="varied")
    row = next(i for i in range(train.num_rows) if len(entry_solutions(json.loads(train[i]["entry"]))) >= 4)
    solutions = entry_solutions(json.loads(train[row]["entry"]))
    draw = gym_bases.demonstration_sampler(settings, train, random.Random(0))
    drawn = [draw(row) for _ in range(200)]
    assert set(drawn) == {gym_bases.completion_of(s) for s in solutions}  # every solution, nothing else
    assert gym_bases.demonstration_sampler(settings, train, random.Random(0))(row) == drawn[0]  # seeded
    gold = gym_bases.demonstration_sampler(GymWarmStartSettings(dataset=SMALL), train, random.Random(0))
    assert {gold(row) for _ in range(20)} == {gym_bases.completion_of(train[row]["answer"])}


def test_varied_needs_an_enumerator_and_a_known_value(tmp_path):
    from trl_rlvr_ext.data import load_named_dataset

    chain = load_named_dataset("reasoning_gym:chain_sum?size=5&test_size=2&strip_template=true")["train"]
    with pytest.raises(ValueError, match="only countdown has an enumerator"):
        gym_bases.demonstration_sampler(GymWarmStartSettings(demonstrations="varied"), chain, random.Random(0))
    with pytest.raises(ValueError, match="demonstrations='many'"):
        GymWarmStartSettings(demonstrations="many")


def test_existing_bases_keep_their_cache_hashes():
    # Computed before the demonstrations field existed (reasoning-gym 0.1.25): the cached bases must stay found.
    assert GymWarmStartSettings(dataset="chain_sum").digest() == "bd9010f27b4b90b6"
    assert GymWarmStartSettings(dataset="chain_sum", num_steps=400).digest() == "4f40804cf128e431"
    assert GymWarmStartSettings(dataset="number_sorting", num_steps=400).digest() == "3e2dc41395ce1b74"
    assert GymWarmStartSettings(dataset="chain_sum+number_sorting", num_steps=1000).digest() == "07d98083081e597e"
    varied = GymWarmStartSettings(dataset="countdown", demonstrations="varied")
    assert varied.digest() != GymWarmStartSettings(dataset="countdown").digest()


def test_a_tiny_varied_base_builds(tmp_path):
    settings = {
        "dataset": SMALL,
        "demonstrations": "varied",
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "intermediate_size": 32,
        "num_steps": 2,
        "batch_size": 4,
        "warmup_steps": 1,
    }
    path = gym_bases.get_gym_base_model_path(cache_dir=tmp_path, progress=False, **settings)
    metadata = json.loads((Path(path) / "warmstart.json").read_text())
    assert metadata["settings"]["demonstrations"] == "varied"
    # the train-only measurements of a base: a 2-step model is still near uniform over its byte-level vocabulary
    uniform = math.log(json.loads((Path(path) / "config.json").read_text())["vocab_size"])
    entropy = gym_bases.sample_entropy(path, SMALL, num_problems=2, num_samples=2, max_new_tokens=4)
    assert entropy["num_tokens"] > 0 and 0.5 * uniform < entropy["mean_token_entropy"] <= uniform + 1e-4
    stats = gym_bases.describe_base(path, SMALL, num_problems=2, num_samples=2, split="train")
    assert stats["num_problems"] == 2 and stats["frac_rate_0"] == 1.0  # a random model solves nothing


def test_near_duplicate_key_is_numbers_and_target():
    from trl_rlvr_ext.tasks.reasoning_gym import near_duplicate_key

    one = {"question": "Calculate 10 using all of these numbers: 2, 3, 4.", "metadata": {"numbers": [2, 3, 4]}}
    other = {
        "question": "Find a way to make 10 using all of these numbers: 4, 2, 3.",
        "metadata": {"numbers": [4, 2, 3]},
    }
    for entry in (one, other):
        entry["metadata"]["target"] = 10
    assert near_duplicate_key(one, "countdown") == near_duplicate_key(other, "countdown")
    other["metadata"]["target"] = 11
    assert near_duplicate_key(one, "countdown") != near_duplicate_key(other, "countdown")


def test_trivial_baseline_is_graded_by_the_reward(small):
    from trl_rlvr_ext.rewards import get_reward_func

    rows = [small["test"][i] for i in range(small["test"].num_rows)]
    policy = baselines.policy_for("countdown", "random_expression")
    assert policy.name == "random_expression"
    num_correct, used = baselines.evaluate_trivial_policy(
        rows, SMALL, get_reward_func("reasoning_gym"), "random_expression", 64, seed=0
    )
    assert used == {"countdown": "random_expression"}
    # the reward's count is the count of guesses that are solutions (the same draws, replayed)
    rng = random.Random("trivial/countdown/random_expression/0")
    expected = []
    for row in rows:
        solutions = set(entry_solutions(json.loads(row["entry"])))
        expected.append(sum(policy.guess(row, rng) in solutions for _ in range(64)))
    assert num_correct == expected and 0 < sum(num_correct) < 64 * len(rows)


@pytest.mark.slow
def test_quick_nsr_study_on_countdown(tmp_path):
    from lab.cli import main

    out = tmp_path / "nsr"
    args = ["study", "nsr", "--quick", "--tasks", "countdown", "--arms", "none", "--seeds", "0", "--out_dir", str(out)]
    assert main(args) == 0
    result = json.loads((out / "countdown" / "none" / "seed0" / "result.json").read_text())
    assert result["dataset"] == gym_bases.PRESETS["countdown"] and result["task"] == "countdown"
    assert result["grpo_config"]["max_completion_length"] == 30
    assert any("clip_ratio/region_mean" in entry for entry in result["train_log"])


COMPACT = (
    "reasoning_gym:countdown?min_numbers=3&max_numbers=3&min_value=1&max_value=9&min_target=1&max_target=30"
    "&size=40&test_size=10&compact=true&dedup=near"
)


def test_compact_prompt_is_the_problem_data_of_the_same_entries():
    from trl_rlvr_ext.data import load_named_dataset

    compact = load_named_dataset(COMPACT)
    templated = load_named_dataset(COMPACT.replace("compact=true", "strip_template=true"))
    for split in ("train", "test"):
        # the same problems, the verifier's entries untouched: only the prompt changes
        assert compact[split]["entry"] == templated[split]["entry"]
        assert compact[split]["answer"] == templated[split]["answer"]
    row = compact["train"][0]
    metadata = json.loads(row["entry"])["metadata"]
    a, b, c = metadata["numbers"]
    assert row["prompt"] == f"{metadata['target']} from {a}, {b}, {c}"
    # the hand-written case
    from trl_rlvr_ext.tasks.countdown import compact_question

    assert compact_question({"metadata": {"numbers": [6, 4, 8], "target": 8}}) == "8 from 6, 4, 8"
    # every held-out prompt is new, as a problem and so as a prompt
    assert not set(compact["test"]["prompt"]) & set(compact["train"]["prompt"])


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (COMPACT.replace("&dedup=near", ""), "needs dedup=near"),
        (COMPACT + "&strip_template=true", "Drop strip_template"),
        ("reasoning_gym:chain_sum?compact=true&dedup=near", "have no compact renderer"),
        (COMPACT.replace("compact=true", "compact=yes"), "use true or false"),
    ],
)
def test_compact_refuses_what_it_cannot_do(name, message):
    from trl_rlvr_ext.tasks.reasoning_gym import parse_name

    with pytest.raises((ValueError, TypeError), match=message):
        parse_name(name)


def test_compact_design_is_countdowns_with_the_prompt_and_steps_changed():
    from lab.studies import nsr_study, self_study

    assert gym_bases.PRESETS["countdown_compact"] == gym_bases.PRESETS["countdown"].replace(
        "strip_template=true", "compact=true"
    )
    assert nsr_study.COMPACT_COMMANDS == tuple(
        c.replace("--tasks countdown ", "--tasks countdown_compact ") for c in nsr_study.COUNTDOWN_COMMANDS
    )
    assert self_study.COMPACT_BASE_COMMAND == self_study.COUNTDOWN_BASE_COMMAND.replace(
        "--tasks countdown ", "--tasks countdown_compact "
    )
    assert self_study.GYM_BASE_DEMONSTRATIONS["countdown_compact"] == "varied"
    assert (self_study.GYM_BASE_STEPS["countdown"], self_study.GYM_BASE_STEPS["countdown_compact"]) == (1000, 3000)
    assert nsr_study.EXTENSION_RUNS["countdown_compact"] == nsr_study.EXTENSION_RUNS["countdown"]
