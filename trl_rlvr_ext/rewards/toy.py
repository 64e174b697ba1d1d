"""The verifiable reward of the toy task (`trl_rlvr_ext.toy.task`): exact match of a strictly marked answer."""

import re


# The whole completion must be one marked answer, e.g. "[231]"; only surrounding whitespace is tolerated.
_MARKED_ANSWER = re.compile(r"\s*\[([0-9]+)\]\s*")


def extract_toy_answer(text: str) -> str | None:
    """The answer string of a completion, or ``None`` if the completion is not exactly one marked answer.

    Strict on purpose: ``"[231]"`` gives ``"231"``; ``"231"`` (unmarked), ``"[231] because..."`` (extra text),
    ``"[2 31]"`` and ``"[231]]"`` give ``None``. A reward that forgave extra text would let the policy pad its answers,
    and one that searched for the answer inside free text would reward lucky guesses among several candidates.
    """
    match = _MARKED_ANSWER.fullmatch(text)
    return match.group(1) if match else None


def _completion_text(completion) -> str:
    if isinstance(completion, str):  # standard format
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):  # conversational format
        content = completion[-1].get("content")
        if isinstance(content, str):
            return content
    raise TypeError(
        "toy_accuracy_reward expects each completion to be a string (standard format) or a list of messages whose "
        f"last message has a string 'content' (conversational format), got {completion!r}."
    )


def toy_accuracy_reward(completions: list, answer: list[str], **kwargs) -> list[float]:
    r"""
    Reward of the toy task: 1.0 if the completion is exactly one marked answer (``"[<digits>]"``, surrounding
    whitespace allowed) whose digits equal the gold answer string, else 0.0.

    Args:
        completions (`list[str]` or `list[list[dict[str, str]]]`):
            The completions, in standard (strings) or conversational (lists of messages; the last message's
            ``content`` is checked) format.
        answer (`list[str]`):
            The gold answers: the dataset's ``answer`` column (digit strings, compared character for character, so
            ``"0231"`` does not match ``"231"``).
        **kwargs:
            The other dataset columns and trainer arguments; unused.

    Example:
    ```python
    >>> from trl_rlvr_ext.rewards.toy import toy_accuracy_reward
    >>> toy_accuracy_reward(["[231]", "231", "[231] done", "[232]"], ["231"] * 4)
    [1.0, 0.0, 0.0, 0.0]
    ```
    """
    if len(completions) != len(answer):
        raise ValueError(
            f"toy_accuracy_reward got {len(completions)} completions but {len(answer)} answers; pass one gold answer "
            "per completion (GRPOTrainer repeats the dataset's 'answer' column for each generation)."
        )
    rewards = []
    for completion, gold in zip(completions, answer):
        parsed = extract_toy_answer(_completion_text(completion))
        rewards.append(1.0 if parsed is not None and parsed == str(gold).strip() else 0.0)
    return rewards
