"""A synthetic preference dataset for offline DPO / IS-DPO runs: small arithmetic with a right and a wrong answer.

Each row is a standard (plain-text) preference pair, the format TRL's `DPOTrainer` reads::

    {"prompt": "12+7=", "chosen": "19", "rejected": "18"}

The rejected answer is a plausible mistake (off by one or two, a dropped or extra carry, the operation confused), so
that the pairs are close, as preference pairs sampled from one model usually are. Rows are a deterministic function of
the seed. The script `trl_rlvr_ext.scripts.dpo` resolves ``dataset_name: toy:preference`` to
`make_toy_preference_dataset` (a train and a test split), so recipes run without any hub access.
"""

import random

from datasets import Dataset, DatasetDict


TOY_DATASET_PREFIX = "toy:"
TOY_PREFERENCE_NAME = "toy:preference"


def _wrong_answer(a: int, b: int, op: str, answer: int, rng: random.Random) -> int:
    """A plausible wrong answer to ``a op b`` (never the right one, never negative)."""
    candidates = {answer - 2, answer - 1, answer + 1, answer + 2, answer + 10, answer - 10}
    candidates.add(a - b if op == "+" else a + b)  # the operation confused
    candidates = sorted(c for c in candidates if c >= 0 and c != answer)
    return rng.choice(candidates)


def make_toy_preference_dataset(
    num_examples: int = 512, seed: int = 0, max_operand: int = 99, operations: str = "+-"
) -> Dataset:
    """``num_examples`` arithmetic preference pairs: columns ``prompt`` ("12+7="), ``chosen`` ("19"), ``rejected``.

    Args:
        num_examples (`int`): Number of rows.
        seed (`int`): Seed of the generator (the rows are a deterministic function of it).
        max_operand (`int`): Operands are drawn uniformly from ``0..max_operand``.
        operations (`str`): Operations to draw from, a subset of ``"+-"``; subtraction keeps the result ≥ 0.
    """
    if num_examples < 1:
        raise ValueError(f"num_examples must be at least 1, got {num_examples}.")
    if max_operand < 1:
        raise ValueError(f"max_operand must be at least 1, got {max_operand}.")
    if not operations or set(operations) - {"+", "-"}:
        raise ValueError(f"operations must be a non-empty subset of '+-', got {operations!r}.")
    rng = random.Random(seed)
    rows = {"prompt": [], "chosen": [], "rejected": []}
    for _ in range(num_examples):
        op = rng.choice(operations)
        a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
        if op == "-" and b > a:
            a, b = b, a
        answer = a + b if op == "+" else a - b
        rows["prompt"].append(f"{a}{op}{b}=")
        rows["chosen"].append(str(answer))
        rows["rejected"].append(str(_wrong_answer(a, b, op, answer, rng)))
    return Dataset.from_dict(rows)


def load_toy_dataset(name: str, num_train: int = 512, num_test: int = 64, seed: int = 0) -> DatasetDict:
    """Resolve a ``toy:<name>`` dataset name to a `DatasetDict` with ``train`` and ``test`` splits.

    Only ``toy:preference`` exists; train and test rows are drawn with different seeds.
    """
    if name != TOY_PREFERENCE_NAME:
        raise ValueError(
            f"Unknown toy dataset {name!r}. The offline toy datasets are: [{TOY_PREFERENCE_NAME!r}] (arithmetic "
            "preference pairs for DPO)."
        )
    return DatasetDict(
        train=make_toy_preference_dataset(num_train, seed=seed),
        test=make_toy_preference_dataset(num_test, seed=seed + 1_000_003),
    )
