"""reasoning-gym as a task source: ``reasoning_gym:`` dataset names (one data layer) and the ``reasoning_gym`` reward."""

import json

import pytest

from trl_rlvr_ext.data import check_dataset_name, load_named_dataset, load_split
from trl_rlvr_ext.rewards import get_reward_func


rg = pytest.importorskip("reasoning_gym", reason="needs the [gym] extra (installed by the dev extra)")

from trl_rlvr_ext.rewards.reasoning_gym import extract_reasoning_gym_answer, reasoning_gym_reward  # noqa: E402
from trl_rlvr_ext.tasks.reasoning_gym import TEST_SEED_OFFSET, parse_name  # noqa: E402


def test_name_syntax_single_task_and_mixture():
    spec = parse_name("reasoning_gym:count_bits?size=20&seed=3&max_n=255&format=conversational&strip_template=true")
    assert spec.tasks == ("count_bits",) and spec.options == {"count_bits": {"max_n": 255}}
    assert (spec.size, spec.test_size, spec.seed, spec.format, spec.strip_template) == (
        20,
        200,
        3,
        "conversational",
        True,
    )
    spec = parse_name("reasoning_gym:chain_sum+count_bits?chain_sum.max_digits=1&count_bits.weight=2&size=5")
    assert spec.tasks == ("chain_sum", "count_bits")
    assert spec.options == {"chain_sum": {"max_digits": 1}, "count_bits": {}}
    assert spec.weights == {"chain_sum": 1.0, "count_bits": 2.0}
    assert parse_name("reasoning_gym:basic_arithmetic?operators=+,-").options["basic_arithmetic"]["operators"] == (
        "+",
        "-",
    )


@pytest.mark.parametrize(
    "name, message",
    [
        ("reasoning_gym:chain_sums", "Did you mean chain_sum"),
        ("reasoning_gym:", "names no task"),
        ("reasoning_gym:count_bits?max_m=3", "Did you mean max_n"),
        ("reasoning_gym:chain_sum+count_bits?max_n=3", "write <task>.max_n"),
        ("reasoning_gym:chain_sum+count_bits?gcd.max_value=3", "not one of"),
        ("reasoning_gym:count_bits?format=chatml", "standard"),
        ("reasoning_gym:count_bits?answer=number", "first_number"),
        ("reasoning_gym:count_bits?size=-1", "non-negative integer"),
        ("reasoning_gym:count_bits?size=", "has no value"),
        ("reasoning_gym:chain_sum+chain_sum", "twice"),
    ],
)
def test_bad_names_fail_at_check_time_naming_the_fix(name, message):
    with pytest.raises(ValueError, match=message):
        check_dataset_name(name)


def test_bad_option_values_are_reasoning_gyms_own_error_with_the_fix():
    with pytest.raises(ValueError, match="Change the option values"):
        load_named_dataset("reasoning_gym:chain_sum?min_terms=0&size=5&test_size=5")


def test_seeds_close_together_share_problems_which_is_why_we_offset_and_dedup():
    # The hazard this module guards against: item i of a dataset at seed s is item i - d at seed s + d.
    train = rg.create_dataset("count_bits", size=400, seed=1)
    test = rg.create_dataset("count_bits", size=50, seed=300)
    assert {e["question"] for e in test} <= {e["question"] for e in train}


@pytest.mark.parametrize(
    "name",
    [
        "reasoning_gym:count_bits?size=1500&test_size=300&max_n=4095",
        (
            "reasoning_gym:chain_sum+count_bits?size=600&test_size=100&chain_sum.max_digits=1&chain_sum.max_terms=3"
            "&count_bits.max_n=511&strip_template=true"
        ),
    ],
)
def test_held_out_split_shares_no_problem_with_train(name):
    splits = load_named_dataset(name)
    spec = parse_name(name)
    assert splits["train"].num_rows == spec.size and splits["test"].num_rows == spec.test_size
    train_q = {json.loads(e)["question"] for e in splits["train"]["entry"]}
    test_q = [json.loads(e)["question"] for e in splits["test"]["entry"]]
    assert len(set(test_q)) == len(test_q), "held-out questions must be distinct"
    assert not train_q & set(test_q)
    # the dedup mattered: a small problem space makes the far seed draw train questions too
    far = rg.create_dataset(
        "count_bits",
        size=300,
        seed=spec.seed + TEST_SEED_OFFSET,
        max_n=spec.options.get("count_bits", {}).get("max_n", 4095),
    )
    assert {e["question"] for e in far} & train_q
    assert splits["train"]["idx"] == list(range(spec.size))
    assert load_split(name, "test")["prompt"] == splits["test"]["prompt"]  # deterministic


def test_too_small_a_problem_space_is_an_error_naming_the_fix():
    with pytest.raises(ValueError, match="lower size or test_size"):
        load_named_dataset("reasoning_gym:count_bits?size=2000&test_size=50&max_n=255")


def test_formats_and_template_stripping():
    standard = load_named_dataset("reasoning_gym:chain_sum?size=30&test_size=10&max_terms=3")
    assert standard["train"]["prompt"][0] == json.loads(standard["train"]["entry"][0])["question"]
    stripped = load_named_dataset("reasoning_gym:chain_sum?size=30&test_size=10&max_terms=3&strip_template=true")
    for split in ("train", "test"):
        for prompt, entry in zip(stripped[split]["prompt"], stripped[split]["entry"]):
            assert prompt == json.loads(entry)["metadata"]["expression"]  # "4 - 1 - 7 =" minus the constant parts
    chat = load_named_dataset("reasoning_gym:chain_sum?size=30&test_size=10&max_terms=3&format=conversational")
    prompt = chat["train"]["prompt"][0]
    assert [m["role"] for m in prompt] == ["system", "user"] and "<answer>" in prompt[0]["content"]
    assert prompt[1]["content"] == standard["train"]["prompt"][0]


TASKS = {
    "chain_sum": "min_terms=2&max_terms=3",
    "count_bits": "max_n=1023",
    "gcd": "max_value=50",
    "number_sorting": "min_numbers=3&max_numbers=3",
    "leg_counting": "max_animals=3",
}


@pytest.mark.parametrize("task", sorted(TASKS))
def test_reward_agrees_with_the_tasks_own_score_answer(task):
    split = load_split(f"reasoning_gym:{task}?size=20&test_size=10&{TASKS[task]}", "test")
    dataset = rg.create_dataset(task, size=1, seed=0, **json.loads(split["task_options"][0]))
    reward = get_reward_func("reasoning_gym")
    assert reward is reasoning_gym_reward
    candidates, expected, rows = [], [], []
    for row in split:
        entry = json.loads(row["entry"])
        for answer in (row["answer"], row["answer"] + "0", "1" + row["answer"], "0", " -" + row["answer"], "x"):
            candidates.append(f"Some reasoning.\n<answer>{answer}</answer>")
            expected.append(dataset.score_answer(answer.strip(), entry))
            rows.append(row)
    got = reward(
        candidates,
        task=[r["task"] for r in rows],
        entry=[r["entry"] for r in rows],
        task_options=[r["task_options"] for r in rows],
    )
    assert got == expected
    assert 1.0 in got and 0.0 in got  # both outcomes exercised


def test_reward_is_strict_about_format_and_never_crashes():
    split = load_split("reasoning_gym:chain_sum?size=5&test_size=5", "test")
    row = split[0]
    gold = row["answer"]
    completions = [
        f"<answer>{gold}</answer>",  # 1
        f"  work...\n<answer> {gold} </answer>\n",  # 1
        [{"role": "assistant", "content": f"<answer>{gold}</answer>"}],  # 1 (conversational)
        gold,  # no block
        f"<answer>{gold}</answer> and more",  # text after the block
        f"<answer>0</answer><answer>{gold}</answer>",  # two blocks
        f"<answer>{gold}",  # unclosed
        f"<answer><answer>{gold}</answer>",  # nested opening tag
        "",
        "<answer></answer>",
        "\x00\xff<answer>\ud800</answer>",
        [{"role": "assistant", "content": None}],
    ]
    n = len(completions)
    rewards = reasoning_gym_reward(completions, task=[row["task"]] * n, entry=[row["entry"]] * n)
    assert rewards == [1.0, 1.0, 1.0] + [0.0] * (n - 3)
    assert extract_reasoning_gym_answer("1+2 is 3. <answer> 3 </answer>\n") == "3"
    with pytest.raises(ValueError, match="'entry' column"):
        reasoning_gym_reward(["<answer>1</answer>"], task=["chain_sum"], entry=None)


def test_pass_at_k_evaluation_reads_the_columns(tiny_model_path):
    from trl_rlvr_ext.evaluation import evaluate_pass_at_k
    from trl_rlvr_ext.sampling import SamplingSettings

    problems = load_split("reasoning_gym:chain_sum?size=5&test_size=3&strip_template=true", "test")
    sampling = SamplingSettings(num_samples=2, temperature=0.6, top_p=0.95, max_new_tokens=4, seed=0)
    result = evaluate_pass_at_k(
        tiny_model_path, problems, get_reward_func("reasoning_gym"), sampling=sampling, progress=False
    )
    assert len(result.num_correct) == 3 and set(result.pass_at_k) == {1, 2}


GYM = "reasoning_gym:chain_sum?size=16&test_size=4&max_terms=2&max_digits=1&strip_template=true"


def test_every_entry_point_accepts_the_name(tiny_model_path, tmp_path):
    from trl_rlvr_ext import cli
    from trl_rlvr_ext.scripts import grpo as grpo_script

    argv = ["--model_name_or_path", tiny_model_path, "--dataset_name", GYM, "--reward_funcs", "reasoning_gym"]
    argv += ["--output_dir", str(tmp_path / "grpo"), "--max_steps", "1", "--per_device_train_batch_size", "4"]
    argv += ["--num_generations", "2", "--max_completion_length", "4", "--report_to", "none", "--use_cpu", "true"]
    parsed = grpo_script.make_parser().parse_args_and_config(args=argv, fail_with_unknown_args=True)
    trainer = grpo_script.build_trainer(*parsed)
    assert trainer.train_dataset.num_rows == 16 and "entry" in trainer.train_dataset.column_names
    common = ["--dataset", GYM, "--reward_funcs", "reasoning_gym", "--num_samples", "2", "--max_new_tokens", "4"]
    assert cli.main(["eval", "--model", tiny_model_path, *common, "--output_dir", str(tmp_path / "eval")]) == 0
    assert cli.main(["curate", "--model", tiny_model_path, *common, "--output_dir", str(tmp_path / "curate")]) == 0
