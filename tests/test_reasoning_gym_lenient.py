"""The chat prompt format and the lenient numeric answer formats of ``reasoning_gym:`` names (an explicit option,
never a fallback), and the products task's near-duplicate key."""

import json

import pytest

from trl_rlvr_ext.data import load_named_dataset


rg = pytest.importorskip("reasoning_gym", reason="needs the [gym] extra (installed by the dev extra)")

from trl_rlvr_ext.rewards.reasoning_gym import extract_answer, reasoning_gym_reward  # noqa: E402
from trl_rlvr_ext.tasks.reasoning_gym import near_duplicate_key, parse_name  # noqa: E402


PRODUCTS = "reasoning_gym:products?min_digits=1&max_digits=1&size=12&test_size=8&dedup=near"


@pytest.mark.parametrize(
    "text, first, last",
    [
        ("3 * 4 = 12.", "3", "12"),
        ("The answer is -7", "-7", "-7"),
        ("2.5 and 10", "2.5", "10"),
        ("1,000", "1", "000"),  # thousands separators are not read: documented
        ("no number here", None, None),
        ("", None, None),
    ],
)
def test_extract_answer_reads_the_first_or_last_plain_number(text, first, last):
    assert extract_answer(text, "first_number") == first
    assert extract_answer(text, "last_number") == last


def test_extract_answer_tags_is_the_strict_convention_and_unknown_formats_fail():
    assert extract_answer("3 * 4 = 12", "tags") is None
    assert extract_answer("work <answer>12</answer>", "tags") == "12"
    assert extract_answer(None, "last_number") is None
    with pytest.raises(ValueError, match="first_number"):
        extract_answer("12", "number")


def test_chat_format_is_the_question_alone_as_the_user_message():
    standard = load_named_dataset(PRODUCTS)
    chat = load_named_dataset(PRODUCTS + "&format=chat")
    for split in ("train", "test"):
        assert chat[split]["prompt"] == [[{"role": "user", "content": q}] for q in standard[split]["prompt"]]
    assert parse_name(PRODUCTS + "&format=chat").format == "chat"


def test_default_answer_format_adds_no_column_so_existing_datasets_are_unchanged():
    tags = load_named_dataset(PRODUCTS)
    explicit = load_named_dataset(PRODUCTS + "&answer=tags")
    assert "answer_format" not in tags["train"].column_names
    assert tags["train"].to_dict() == explicit["train"].to_dict()
    lenient = load_named_dataset(PRODUCTS + "&answer=last_number")
    assert lenient["test"]["answer_format"] == ["last_number"] * lenient["test"].num_rows
    assert lenient["test"].remove_columns("answer_format").to_dict() == tags["test"].to_dict()


def test_the_reward_reads_the_rows_answer_format():
    split = load_named_dataset(PRODUCTS + "&format=chat&answer=last_number")["test"]
    row = split[0]
    gold, expression = row["answer"], json.loads(row["entry"])["metadata"]["expression"]
    wrong = str(int(gold) + 1)
    completions = [
        f"{expression} = {gold}",  # last number is the product: 1
        f"{gold} is not {wrong}",  # last number is wrong: 0
        [{"role": "assistant", "content": f"So {expression} = {gold}."}],  # conversational: 1
        "I cannot say.",  # no number: 0
        f"<answer>{gold}</answer>",  # a number in tags is still the last number: 1
    ]
    n = len(completions)
    columns = {key: [row[key]] * n for key in ("task", "entry", "task_options", "answer_format")}
    assert reasoning_gym_reward(completions, **columns) == [1.0, 0.0, 1.0, 0.0, 1.0]
    columns["answer_format"] = ["first_number"] * n
    assert reasoning_gym_reward(completions, **columns)[:2] == [float(expression.split()[0] == gold), 1.0]
    # Without the column the strict convention applies: only the tagged completion scores.
    del columns["answer_format"]
    assert reasoning_gym_reward(completions, **columns) == [0.0, 0.0, 0.0, 0.0, 1.0]


def test_a_lenient_format_on_a_task_with_non_numeric_answers_fails_naming_the_fix():
    with pytest.raises(ValueError, match="use answer=tags"):
        load_named_dataset("reasoning_gym:number_sorting?size=5&test_size=5&answer=last_number")


def test_products_near_duplicate_key_is_the_multiset_of_factors():
    entry = {"metadata": {"expression": "4 * 1"}, "question": "Solve 4 * 1."}
    swapped = {"metadata": {"expression": "1 * 4"}, "question": "Solve 1 * 4."}
    assert near_duplicate_key(entry, "products") == near_duplicate_key(swapped, "products") == ("products", (1, 4))
    splits = load_named_dataset(PRODUCTS)
    keys = [
        {near_duplicate_key(json.loads(e), "products") for e in splits[split]["entry"]} for split in ("train", "test")
    ]
    assert not keys[0] & keys[1]  # no held-out product is a train product with its factors swapped
    assert len(keys[1]) == splits["test"].num_rows
