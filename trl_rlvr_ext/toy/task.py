"""The embedded default's synthetic verifiable task: fixed-width, little-endian multi-digit addition.

A problem is ``a + b`` with operands of ``min_digits`` to ``max_digits`` digits. Every number is written with a fixed
width (operands ``max_digits`` digits, the answer ``max_digits + 1``), zero-padded, **least-significant digit first**
("little-endian"), so that a tiny transformer writes the sum in the order a person computes it, column by column with
the carry, and finds the digits of each column at fixed offsets (the reversed format of Lee et al., "Teaching
Arithmetic to Small Transformers", https://huggingface.co/papers/2307.03381). With ``max_digits=3``, 47 + 85 = 132
reads::

    prompt:      "740+580="
    completion:  "[2310]"      (the answer, marked by square brackets)

The difficulty of a problem is its number of carries (0 to ``max_digits``); the digit range is the dial that sets how
many problems have many carries. Problems are split into train and held-out by a fixed hash of the (unordered)
operand pair, so the held-out problems are never trained on (by RL or by the warm start), whatever the seeds and sizes.
"""

import random

from datasets import Dataset, DatasetDict

from .size import default_task_sizes


ANSWER_OPEN = "["
ANSWER_CLOSE = "]"
HELD_OUT_MODULUS = 10  # one problem in ten (by the hash below) is held out


def to_little_endian(n: int, width: int | None = None) -> str:
    """``132 -> "231"``: the decimal digits of a non-negative integer, least significant first, zero-padded to
    ``width`` digits if given (``to_little_endian(47, 3) == "740"``)."""
    if n < 0:
        raise ValueError(f"The toy task only has non-negative numbers, got {n}.")
    digits = str(n)
    if width is not None:
        if len(digits) > width:
            raise ValueError(f"{n} has more than width={width} digits.")
        digits = digits.zfill(width)
    return digits[::-1]


def from_little_endian(digits: str) -> int:
    """``"231" -> 132``: inverse of `to_little_endian`."""
    return int(digits[::-1])


def format_prompt(a: int, b: int, width: int) -> str:
    """The prompt of ``a + b`` with ``width``-digit operands, e.g. ``format_prompt(47, 85, 3) == "740+580="``."""
    return f"{to_little_endian(a, width)}+{to_little_endian(b, width)}="


def format_answer(total: int, width: int) -> str:
    """The answer string of a sum of two ``width``-digit operands: ``width + 1`` digits, e.g. ``"2310"`` for 132."""
    return to_little_endian(total, width + 1)


def format_completion(answer: str) -> str:
    """A well-formed completion: the answer string between the markers, e.g. ``"[231]"``."""
    return f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"


def count_carries(a: int, b: int) -> int:
    """Number of columns of ``a + b`` that produce a carry (the difficulty of the problem)."""
    carries, carry = 0, 0
    while a or b or carry:
        carry = (a % 10 + b % 10 + carry) // 10
        carries += carry
        a, b = a // 10, b // 10
    return carries


def forgetful_sum(a: int, b: int, forget_prob: float, rng: random.Random) -> int:
    """``a + b`` computed column by column, where each carry is dropped independently with probability ``forget_prob``.

    With ``forget_prob=0`` this is the exact sum. A dropped carry is really dropped: it does not reach the next column.
    A problem with ``k`` carries therefore comes out right with probability ``(1 - forget_prob) ** k``.
    """
    result, place, carry = 0, 1, 0
    while a or b or carry:
        column = a % 10 + b % 10 + carry
        result += (column % 10) * place
        carry = column // 10
        if carry and rng.random() < forget_prob:
            carry = 0
        a, b, place = a // 10, b // 10, place * 10
    return result


def is_held_out(a: int, b: int) -> bool:
    """Whether ``a + b`` (or ``b + a``) belongs to the held-out partition: a fixed hash, independent of any seed."""
    lo, hi = min(a, b), max(a, b)
    h = (lo * 1_000_003 + hi * 7_919 + 12_345) * 2_654_435_761 % 2**32
    return (h >> 7) % HELD_OUT_MODULUS == 0


def _check_digits(min_digits: int, max_digits: int):
    if not 1 <= min_digits <= max_digits:
        raise ValueError(
            f"Need 1 <= min_digits <= max_digits, got min_digits={min_digits}, max_digits={max_digits}. "
            "Set min_digits to at least 1 and max_digits to at least min_digits."
        )
    if max_digits > 9:
        raise ValueError(f"max_digits={max_digits} is too large for a toy task; use at most 9.")


def sample_operands(rng: random.Random, min_digits: int = 2, max_digits: int = 3, held_out: bool = False):
    """Draw ``(a, b)`` from the task distribution (digit counts uniform in the range), in the requested partition."""
    _check_digits(min_digits, max_digits)
    while True:
        a, b = (
            rng.randint(10 ** (d - 1) if d > 1 else 0, 10**d - 1)
            for d in (rng.randint(min_digits, max_digits), rng.randint(min_digits, max_digits))
        )
        if is_held_out(a, b) == held_out:
            return a, b


def _make_split(num: int, rng: random.Random, min_digits: int, max_digits: int, held_out: bool) -> Dataset:
    seen, rows = set(), []
    max_tries = 200 * num + 10_000
    for _ in range(max_tries):
        if len(rows) == num:
            break
        a, b = sample_operands(rng, min_digits, max_digits, held_out=held_out)
        if (a, b) in seen:  # each split holds distinct prompts
            continue
        seen.add((a, b))
        rows.append((a, b))
    else:
        raise ValueError(
            f"Could not draw {num} distinct {'held-out' if held_out else 'train'} problems with "
            f"min_digits={min_digits}, max_digits={max_digits}: there are too few. Ask for fewer problems or "
            "raise max_digits."
        )
    return Dataset.from_dict(
        {
            "prompt": [format_prompt(a, b, max_digits) for a, b in rows],
            "answer": [format_answer(a + b, max_digits) for a, b in rows],
            "num_carries": [count_carries(a, b) for a, b in rows],
            "idx": list(range(len(rows))),
        }
    )


def make_task_datasets(
    num_train: int | None = None,
    num_test: int | None = None,
    seed: int = 0,
    min_digits: int = 2,
    max_digits: int = 3,
) -> DatasetDict:
    """The toy task as a `DatasetDict` with splits ``"train"`` and ``"test"`` in TRL's prompt-only standard format.

    Columns: ``prompt`` (e.g. ``"740+580="``), ``answer`` (the gold answer string, e.g. ``"2310"``),
    ``num_carries`` (the difficulty) and ``idx`` (the row's position in its split: a unique id per problem, used by
    curation samplers). Each split has distinct problems, and no problem (nor its commuted twin) is in both splits.
    Deterministic given its arguments.

    Args:
        num_train: number of training problems; default 2000 (64 with ``TRL_RLVR_EXT_TOY_SIZE=smoke``, see
            `trl_rlvr_ext.toy.size`).
        num_test: number of held-out problems; default 200 (50 with ``TRL_RLVR_EXT_TOY_SIZE=smoke``). A smaller
            split holds the first rows of a larger one.
        seed: seed of the draw.
        min_digits, max_digits: the difficulty dial: each operand has a number of digits drawn uniformly in this
            range (more digits, more carries per problem); all numbers are written ``max_digits`` wide.
    """
    _check_digits(min_digits, max_digits)
    defaults = default_task_sizes()
    num_train = defaults["num_train"] if num_train is None else num_train
    num_test = defaults["num_test"] if num_test is None else num_test
    if num_train < 1 or num_test < 1:
        raise ValueError(f"num_train and num_test must be positive, got {num_train} and {num_test}.")
    return DatasetDict(
        {
            "train": _make_split(num_train, random.Random(f"train-{seed}"), min_digits, max_digits, held_out=False),
            "test": _make_split(num_test, random.Random(f"test-{seed}"), min_digits, max_digits, held_out=True),
        }
    )
