"""A verifiable math-answer reward built on math-verify (``pip install "math-verify>=0.8"``)."""

import logging
import threading


def _completion_text(completion) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return completion[-1].get("content") or ""
    raise TypeError(f"Expected a string or a list of messages as completion, got {type(completion).__name__}.")


def math_accuracy_reward(
    completions: list, answer: list[str] | None = None, solution: list[str] | None = None, **kwargs
) -> list[float | None]:
    r"""
    1.0 if the completion's final answer is mathematically equal to the gold answer (math-verify), else 0.0; ``None``
    (the row is skipped by GRPOTrainer) when the gold answer itself cannot be parsed.

    The gold answer comes from the dataset column ``answer`` (e.g. GSM8K, DeepScaleR) or, if absent, ``solution``
    (e.g. MATH); a bare answer such as ``"72"`` is wrapped in ``$...$`` before parsing. The prediction is extracted
    from the completion as TRL's `accuracy_reward` does: LaTeX with ``\boxed{}`` first, no anchor-free guessing, the
    first match. Gold is the first argument of ``verify`` (it is asymmetric).
    """
    try:
        from latex2sympy2_extended import NormalizationConfig
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    except ImportError as error:
        raise ImportError(
            "math_accuracy_reward needs math-verify: install it with `pip install 'math-verify>=0.8'` (from a clone "
            "of trl-rlvr-ext: `pip install -e '.[math]'`)."
        ) from error

    gold_column = answer if answer is not None else solution
    if gold_column is None:
        raise ValueError(
            "math_accuracy_reward needs the gold answers in a dataset column named 'answer' or 'solution'; the "
            "dataset has neither. Rename the column that holds the reference answer."
        )
    if len(gold_column) != len(completions):
        raise ValueError(f"Got {len(completions)} completions but {len(gold_column)} gold answers.")

    # math-verify's timeouts use signal.alarm, which only works in the main thread (TRL runs async rewards elsewhere)
    in_main_thread = threading.current_thread() is threading.main_thread()
    parsing_timeout, verify_timeout = (10, 5) if in_main_thread else (None, None)
    if not in_main_thread:
        logging.getLogger("math_verify.parser").setLevel(logging.ERROR)
    prediction_config = [
        LatexExtractionConfig(
            normalization_config=NormalizationConfig(units=True, malformed_operators=False, basic_latex=True),
            boxed_match_priority=0,
            try_extract_without_anchor=False,
        )
    ]
    rewards = []
    for completion, gold in zip(completions, gold_column, strict=True):
        gold = str(gold)
        if "$" not in gold and "\\boxed" not in gold:
            gold = f"${gold}$"
        gold_parsed = parse(
            gold,
            extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()],
            parsing_timeout=parsing_timeout,
        )
        if not gold_parsed:
            rewards.append(None)
            continue
        predicted = parse(
            _completion_text(completion),
            extraction_config=prediction_config,
            extraction_mode="first_match",
            parsing_timeout=parsing_timeout,
        )
        rewards.append(float(verify(gold_parsed, predicted, timeout_seconds=verify_timeout)))
    return rewards
