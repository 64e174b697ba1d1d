"""The rows of a reasoning-gym name's splits (prompt format, template stripping, compact prompts) as TRL datasets."""

import json

from .names import COMPACT_QUESTIONS, NUMBER, ReasoningGymSpec, parse_name
from .splits import _entry_task, draw_splits


def _common_affixes(questions: list[str]) -> tuple[str, str]:
    """The longest common prefix ending in whitespace and the longest common suffix starting with whitespace."""
    if len(set(questions)) < 2:
        return "", ""
    first, last = min(questions), max(questions)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    prefix = first[:n]
    prefix = prefix[: max(prefix.rfind(c) for c in " \n\t") + 1]
    reversed_questions = [q[::-1] for q in questions]
    first, last = min(reversed_questions), max(reversed_questions)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    suffix = first[:n][::-1]
    cut = min((suffix.find(c) for c in " \n\t" if c in suffix), default=-1)
    suffix = suffix[cut:] if cut >= 0 else ""
    return prefix, suffix


def _strip(question: str, prefix: str, suffix: str) -> str:
    if prefix and question.startswith(prefix) and len(question) > len(prefix) + len(suffix):
        question = question[len(prefix) :]
    if suffix and question.endswith(suffix) and len(question) > len(suffix):
        question = question[: -len(suffix)]
    return question.strip()


def _prompt(question: str, spec: ReasoningGymSpec):
    if spec.format == "standard":
        return question
    if spec.format == "chat":
        return [{"role": "user", "content": question}]
    from reasoning_gym.utils import SYSTEM_PROMPTS

    return [{"role": "system", "content": SYSTEM_PROMPTS["default"]}, {"role": "user", "content": question}]


def _rows(entries: list[dict], spec: ReasoningGymSpec, affixes: dict) -> dict:
    columns = {"prompt": [], "answer": [], "task": [], "entry": [], "task_options": [], "idx": []}
    lenient = spec.answer != "tags"
    if lenient:
        # Only then: a name without answer= keeps the columns (and the dataset's fingerprint) it always had.
        columns["answer_format"] = []
    for i, entry in enumerate(entries):
        task = _entry_task(entry, spec)
        if lenient and NUMBER.fullmatch(str(entry["answer"]).strip()) is None:
            raise ValueError(
                f"answer={spec.answer} reads a number, but the gold answer {entry['answer']!r} of a {task} problem is "
                "not one number: use answer=tags for this task (the lenient formats are for numeric answers)."
            )
        question = entry["question"]
        if spec.strip_template:
            question = _strip(question, *affixes.get(task, ("", "")))
        if spec.compact:
            question = COMPACT_QUESTIONS[task](entry)
        columns["prompt"].append(_prompt(question, spec))
        columns["answer"].append(str(entry["answer"]))
        columns["task"].append(task)
        columns["entry"].append(json.dumps(entry, default=str, sort_keys=True))
        columns["task_options"].append(json.dumps(spec.options[task], sort_keys=True))
        columns["idx"].append(i)
        if lenient:
            columns["answer_format"].append(spec.answer)
    return columns


def make_reasoning_gym_datasets(name_or_spec: "str | ReasoningGymSpec"):
    """A `DatasetDict` with ``train`` and ``test`` splits (TRL prompt-only format) for a ``reasoning_gym:`` name.

    The ``test`` split shares no question with ``train`` (see the module docstring for how). Deterministic given the
    name.
    """
    from datasets import Dataset, DatasetDict

    spec = parse_name(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec
    drawn = draw_splits(spec)
    affixes = {}
    if spec.strip_template:
        by_task: dict[str, list[str]] = {}
        for entry in drawn.train:
            by_task.setdefault(_entry_task(entry, spec), []).append(entry["question"])
        affixes = {task: _common_affixes(questions) for task, questions in by_task.items()}
    return DatasetDict(
        {
            "train": Dataset.from_dict(_rows(drawn.train, spec, affixes)),
            "test": Dataset.from_dict(_rows(drawn.test, spec, affixes)),
        }
    )


def load_reasoning_gym(name: str):
    """`make_reasoning_gym_datasets` for a ``reasoning_gym:`` name (the hook of `trl_rlvr_ext.data`)."""
    return make_reasoning_gym_datasets(name)
