"""Answer extractors for maj@k: the answer a completion gives, as a key that equal answers share.

An extractor is a callable ``text -> str | None`` on the completion text (the last message's content for
conversational completions); ``None`` means no answer could be extracted (the sample casts no vote). Two are built in:

- ``"toy"``: the toy task's strictly marked answer (`trl_rlvr_ext.rewards.toy.extract_toy_answer`);
- ``"math"``: the first ``\\boxed{}`` (or other LaTeX) answer, parsed by math-verify as
  `trl_rlvr_ext.rewards.math.math_accuracy_reward` parses predictions, keyed by its sympy form (decimals as exact
  rationals), so ``\\boxed{0.5}`` and ``\\boxed{\\frac{1}{2}}`` vote together, as do ``x+1`` and ``1+x``.

``"auto"`` picks the extractor that matches the grading reward functions (the toy reward, our math reward or TRL's
``accuracy_reward``) and none for other rewards: maj@k is then not reported.
"""

import logging
import threading
from collections.abc import Callable, Sequence


AnswerExtractor = Callable[[str], str | None]


def completion_text(completion) -> str:
    """The text of a completion in TRL's standard (string) or conversational (list of messages) format."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return completion[-1].get("content") or ""
    raise TypeError(f"Expected a string or a list of messages as completion, got {type(completion).__name__}.")


def toy_answer(text: str) -> str | None:
    """The toy task's answer (``"[231]"`` gives ``"231"``), ``None`` if the completion is not one marked answer."""
    from ..rewards.toy import extract_toy_answer

    return extract_toy_answer(text)


def math_answer(text: str) -> str | None:
    """The first LaTeX answer of ``text`` (``\\boxed{}`` first), normalised by math-verify; ``None`` if there is none."""
    try:
        from latex2sympy2_extended import NormalizationConfig
        from math_verify import LatexExtractionConfig, parse
    except ImportError as error:
        raise ImportError(
            "The 'math' answer extractor needs math-verify: install it with `pip install 'math-verify>=0.8'` (from a "
            "clone of trl-rlvr-ext: `pip install -e '.[math]'`), or pass your own answer_extractor (a callable text -> "
            "answer string or None)."
        ) from error
    # math-verify's timeouts use signal.alarm, which only works in the main thread
    in_main_thread = threading.current_thread() is threading.main_thread()
    if not in_main_thread:
        logging.getLogger("math_verify.parser").setLevel(logging.ERROR)
    parsed = parse(
        text,
        extraction_config=[
            LatexExtractionConfig(
                normalization_config=NormalizationConfig(units=True, malformed_operators=False, basic_latex=True),
                boxed_match_priority=0,
                try_extract_without_anchor=False,
            )
        ],
        extraction_mode="first_match",
        parsing_timeout=10 if in_main_thread else None,
    )
    if not parsed:
        return None
    answer = parsed[0]
    if getattr(answer, "is_Float", False):  # 0.5 and 1/2 must vote together: decimals become exact rationals
        import sympy

        answer = sympy.nsimplify(answer, rational=True)
    return str(answer)


ANSWER_EXTRACTORS: dict[str, AnswerExtractor] = {"toy": toy_answer, "math": math_answer}


def _auto_extractor(reward_funcs: Sequence[Callable]) -> AnswerExtractor | None:
    from ..rewards.math import math_accuracy_reward
    from ..rewards.toy import toy_accuracy_reward

    by_reward = {toy_accuracy_reward: toy_answer, math_accuracy_reward: math_answer}
    try:
        from trl.rewards import accuracy_reward

        by_reward[accuracy_reward] = math_answer
    except ImportError:  # an older TRL without it: nothing to match
        pass
    for func in reward_funcs:
        if func in by_reward:
            return by_reward[func]
    return None


def resolve_answer_extractor(spec, reward_funcs: Sequence[Callable] = ()) -> AnswerExtractor | None:
    """The extractor for ``spec``: `None` (no maj@k), ``"auto"`` (from ``reward_funcs``), a name in
    `ANSWER_EXTRACTORS`, or a callable ``text -> str | None``."""
    if spec is None:
        return None
    if callable(spec):
        return spec
    if spec == "auto":
        return _auto_extractor(reward_funcs)
    if spec in ANSWER_EXTRACTORS:
        return ANSWER_EXTRACTORS[spec]
    raise ValueError(
        f"Unknown answer_extractor {spec!r}: use 'auto', one of {sorted(ANSWER_EXTRACTORS)}, None, or a callable "
        "text -> answer string (or None when the completion has no answer)."
    )


def extract_answers(extractor: AnswerExtractor, completions: Sequence) -> list[str | None]:
    """``extractor`` on the text of each completion; checks that it returns a hashable key or ``None``."""
    answers = []
    for completion in completions:
        answer = extractor(completion_text(completion))
        if answer is not None:
            try:
                hash(answer)
            except TypeError as error:
                raise TypeError(
                    f"The answer extractor returned {answer!r}, which is not hashable; return a string key (or None)."
                ) from error
        answers.append(answer)
    return answers
