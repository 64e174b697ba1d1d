"""The verifiable reward of reasoning-gym tasks (`trl_rlvr_ext.tasks.reasoning_gym`): each task's own verifier.

Answer convention (reasoning-gym's own, so scores compare with its published ones): the completion ends with exactly
one ``<answer>...</answer>`` block. Free text before it (reasoning) is allowed; after it only whitespace. The block's
content, extracted by ``reasoning_gym.utils.extract_answer``, is graded by the task's ``score_answer(answer, entry)``.

Lenient answer formats, an explicit option of the dataset name and never a fallback (``answer=first_number`` or
``answer=last_number``, see `trl_rlvr_ext.tasks.reasoning_gym`): for tasks whose gold answer is one number, the
answer is the first (last) number written in the completion (`NUMBER`: an optional minus sign, digits, an optional
decimal part; ``"3 * 4 = 12."`` gives ``"3"`` / ``"12"``). Small instruction-tuned models do not write ``<answer>``
tags (with the strict format they score 0 and GRPO gets no signal); these formats let them be graded on what they
write. A lenient format rewards a number anywhere in the text, so a guess among several numbers can score:
compare results only under the same format, and against the task's trivial policies graded the same way. The dataset
carries the format in its ``answer_format`` column, which this reward reads.
"""

import functools
import json
import re

from ..tasks.reasoning_gym import ANSWER_FORMATS, NUMBER


# Exactly one answer block, at the end: "... <answer>42</answer>" (trailing whitespace allowed).
_FINAL_ANSWER_BLOCK = re.compile(r"(?s)(?:(?!<answer>).)*<answer>((?:(?!</?answer>).)*)</answer>\s*")


def extract_reasoning_gym_answer(text) -> str | None:
    """The answer of a completion under the convention above, or ``None`` when the completion does not follow it.

    ``"<answer>3</answer>"`` and ``"1+2 is 3. <answer> 3 </answer>\\n"`` give ``"3"``; ``"3"`` (no block),
    ``"<answer>3</answer> so 3"`` (text after), ``"<answer>2</answer><answer>3</answer>"`` (two blocks) and
    ``"<answer>3"`` (unclosed) give ``None``. Strict on purpose: a reward that searched free text for an answer
    would reward lucky guesses among several candidates.
    """
    if not isinstance(text, str) or _FINAL_ANSWER_BLOCK.fullmatch(text) is None:
        return None
    from ..tasks.reasoning_gym import import_reasoning_gym

    return import_reasoning_gym().utils.extract_answer(text)


def extract_answer(text, answer_format: str = "tags") -> str | None:
    """The answer of a completion under ``answer_format``: ``"tags"`` (`extract_reasoning_gym_answer`, strict),
    ``"first_number"`` / ``"last_number"`` (the first / last `NUMBER` in the text; ``None`` when it has none).

    ``extract_answer("3 * 4 = 12.", "last_number") == "12"``; ``extract_answer("3 * 4 = 12.", "first_number") == "3"``.
    """
    if answer_format == "tags":
        return extract_reasoning_gym_answer(text)
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"Unknown answer format {answer_format!r}: use one of {list(ANSWER_FORMATS)}.")
    if not isinstance(text, str):
        return None
    numbers = NUMBER.findall(text)
    if not numbers:
        return None
    return numbers[0] if answer_format == "first_number" else numbers[-1]


@functools.lru_cache(maxsize=256)
def _score_answer_fn(task: str, task_options: str):
    """The ``score_answer`` of ``task`` built with the options the row was generated with (some verifiers read their
    config)."""
    from ..tasks.reasoning_gym import import_reasoning_gym

    rg = import_reasoning_gym()
    return rg.create_dataset(task, size=1, seed=0, **json.loads(task_options)).score_answer


def _completion_text(completion):
    if isinstance(completion, str):  # standard format
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):  # conversational format
        return completion[-1].get("content")
    raise TypeError(
        "reasoning_gym_reward expects each completion to be a string (standard format) or a list of messages "
        f"(conversational format), got {completion!r}."
    )


def reasoning_gym_reward(
    completions: list, task: list[str], entry: list[str], task_options=None, answer_format=None, **kwargs
):
    r"""
    Reward of reasoning-gym tasks: the task's ``score_answer`` of the answer in the completion's final
    ``<answer>...</answer>`` block (or, where the dataset asks for a lenient format, its first or last number, see the
    module docstring); 0.0 when the completion has no answer in that format (never an exception).

    Args:
        completions (`list[str]` or `list[list[dict[str, str]]]`):
            The completions, standard or conversational (the last message's ``content`` is graded).
        task (`list[str]`):
            The dataset's ``task`` column: the reasoning-gym task of each row.
        entry (`list[str]`):
            The dataset's ``entry`` column: the reasoning-gym entry (question, answer, metadata) as JSON.
        task_options (`list[str]`, *optional*):
            The dataset's ``task_options`` column: the generator options as JSON (default: none).
        answer_format (`list[str]`, *optional*):
            The dataset's ``answer_format`` column (``answer=`` of the name): ``"tags"``, ``"first_number"`` or
            ``"last_number"`` per row (default: ``"tags"``, reasoning-gym's convention).
        **kwargs:
            The other dataset columns and trainer arguments; unused.

    Returns:
        `list[float]` in [0, 1]. Some verifiers give partial credit (for example 0.5 for ``"13"`` when the answer is
        ``"3"``); evaluation counts a sample correct only at 1.0.
    """
    for column_name, column in (("task", task), ("entry", entry)):
        if column is None or len(column) != len(completions):
            raise ValueError(
                f"reasoning_gym_reward needs the dataset's {column_name!r} column, one value per completion (got "
                f"{None if column is None else len(column)} for {len(completions)} completions). Use a dataset made by "
                "a reasoning_gym:<task> name (trl_rlvr_ext.tasks.reasoning_gym)."
            )
    if task_options is None:
        task_options = ["{}"] * len(completions)
    if answer_format is None:
        answer_format = ["tags"] * len(completions)
    rewards = []
    for completion, row_task, row_entry, options, row_format in zip(
        completions, task, entry, task_options, answer_format
    ):
        answer = extract_answer(_completion_text(completion), row_format)
        if answer is None:
            rewards.append(0.0)
            continue
        score_answer = _score_answer_fn(row_task, options if isinstance(options, str) else json.dumps(options))
        row_entry = json.loads(row_entry) if isinstance(row_entry, str) else row_entry
        try:
            score = float(score_answer(answer, row_entry))
        except Exception:  # noqa: BLE001 -- a verifier choking on a malformed answer: that answer is wrong, not the training run
            score = 0.0
        rewards.append(min(max(score, 0.0), 1.0))
    return rewards
