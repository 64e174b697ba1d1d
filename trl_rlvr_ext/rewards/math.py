"""A verifiable math-answer reward built on math-verify (``pip install "math-verify>=0.8"``)."""

import importlib.util
import logging
import threading
from collections.abc import Callable

from .timeout import TaskError, TaskTimeout, get_pool


# Seconds math-verify may spend on one completion (parse + verify) before the completion is scored 0.
DEFAULT_REWARD_TIMEOUT = 10.0
# Worker processes per training process that run math-verify (each holds its own sympy, ~100 MB).
REWARD_WORKERS = 2


def _completion_text(completion) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return completion[-1].get("content") or ""
    raise TypeError(f"Expected a string or a list of messages as completion, got {type(completion).__name__}.")


def _check_math_verify_installed():
    # find_spec, not import: with the worker pool, sympy and math-verify are only needed in the workers
    if importlib.util.find_spec("math_verify") is None or importlib.util.find_spec("latex2sympy2_extended") is None:
        raise ImportError(
            "math_accuracy_reward needs math-verify: install it with `pip install 'math-verify>=0.8'` (from a clone "
            "of trl-rlvr-ext: `pip install -e '.[math]'`)."
        )


def _import_math_verify():
    _check_math_verify_installed()
    import latex2sympy2_extended  # noqa: F401
    import math_verify  # noqa: F401


def _quiet_math_verify():
    """Worker start-up: import math-verify, and silence its warning that its own (signal) timeouts are off."""
    _import_math_verify()
    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).setLevel(logging.ERROR)


def score_math_answer(text: str, gold: str, signal_timeouts: bool = False) -> float | None:
    """1.0 / 0.0 for one completion text against one gold answer, ``None`` when the gold answer cannot be parsed.

    ``signal_timeouts`` turns on math-verify's own (``signal.alarm``) timeouts, 10 s to parse and 5 s to verify; they
    only work on the main thread, and cannot interrupt a long C-level computation.
    """
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    parsing_timeout, verify_timeout = (10, 5) if signal_timeouts else (None, None)
    if "$" not in gold and "\\boxed" not in gold:
        gold = f"${gold}$"
    gold_parsed = parse(
        gold, extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()], parsing_timeout=parsing_timeout
    )
    if not gold_parsed:
        return None
    prediction_config = [
        LatexExtractionConfig(
            normalization_config=NormalizationConfig(units=True, malformed_operators=False, basic_latex=True),
            boxed_match_priority=0,
            try_extract_without_anchor=False,
        )
    ]
    predicted = parse(
        text, extraction_config=prediction_config, extraction_mode="first_match", parsing_timeout=parsing_timeout
    )
    return float(verify(gold_parsed, predicted, timeout_seconds=verify_timeout))


def _math_pool():
    return get_pool(
        "math_accuracy",
        workers=REWARD_WORKERS,
        preload=(_quiet_math_verify,),
        warmup=(score_math_answer, ("\\boxed{1}", "1")),
    )


def math_accuracy_reward(
    completions: list,
    answer: list[str] | None = None,
    solution: list[str] | None = None,
    reward_timeout: float | None = DEFAULT_REWARD_TIMEOUT,
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs,
) -> list[float | None]:
    r"""
    1.0 if the completion's final answer is mathematically equal to the gold answer (math-verify), else 0.0; ``None``
    (the row is skipped by GRPOTrainer) when the gold answer itself cannot be parsed.

    The gold answer comes from the dataset column ``answer`` (e.g. GSM8K, DeepScaleR) or, if absent, ``solution``
    (e.g. MATH); a bare answer such as ``"72"`` is wrapped in ``$...$`` before parsing. The prediction is extracted
    from the completion as TRL's `accuracy_reward` does: LaTeX with ``\boxed{}`` first, no anchor-free guessing, the
    first match. Gold is the first argument of ``verify`` (it is asymmetric).

    Bounded time on any thread or process: each completion is verified in a persistent worker process (see
    `trl_rlvr_ext.rewards.timeout`) and scored 0.0 if it takes more than ``reward_timeout`` seconds (a power tower
    such as ``\boxed{9^{9^{9^{9^{9}}}}}`` would otherwise run for hours off the main thread). The number of such
    completions is logged as ``rewards/timeouts`` through TRL's ``log_metric`` when the trainer passes it.
    ``reward_timeout=None`` verifies in this process instead, with math-verify's own signal-based timeouts on the
    main thread only and no bound elsewhere (the behaviour before bounded rewards).
    """
    _check_math_verify_installed()
    gold_column = answer if answer is not None else solution
    if gold_column is None:
        raise ValueError(
            "math_accuracy_reward needs the gold answers in a dataset column named 'answer' or 'solution'; the "
            "dataset has neither. Rename the column that holds the reference answer."
        )
    if len(gold_column) != len(completions):
        raise ValueError(f"Got {len(completions)} completions but {len(gold_column)} gold answers.")
    rows = [(_completion_text(c), str(g)) for c, g in zip(completions, gold_column, strict=True)]

    timeouts = 0
    if reward_timeout is None:
        # math-verify's timeouts use signal.alarm, which only works in the main thread
        in_main_thread = threading.current_thread() is threading.main_thread()
        if not in_main_thread:
            logging.getLogger("math_verify.parser").setLevel(logging.ERROR)
        rewards = [score_math_answer(text, gold, signal_timeouts=in_main_thread) for text, gold in rows]
    else:
        rewards = []
        for (text, _), result in zip(rows, _math_pool().map(score_math_answer, rows, reward_timeout), strict=True):
            if isinstance(result, TaskTimeout):
                timeouts += 1
                result = 0.0
            elif isinstance(result, TaskError):
                raise RuntimeError(  # noqa: TRY004 - the failure is the verifier's, not a wrong argument type
                    f"math-verify failed on the completion {text[:200]!r}:\n{result}"
                )
            rewards.append(result)
    if log_metric is not None:
        log_metric("rewards/timeouts", float(timeouts))
    return rewards


# Checked when the trainer is built (trl_rlvr_ext.rewards.guard) and when the reward is looked up by name.
math_accuracy_reward.check_dependencies = _check_math_verify_installed
