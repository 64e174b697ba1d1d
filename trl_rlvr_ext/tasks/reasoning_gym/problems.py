"""What identifies a reasoning-gym problem: its near-duplicate key (up to reordering) and its stratum."""


def signed_terms(expression: str) -> tuple[int, ...]:
    """``"4 - 1 + -3" -> (4, -1, -3)``: the terms of a chain_sum expression with the sign each enters the sum with."""
    tokens = expression.split()
    terms = [int(tokens[0])]
    for operator, term in zip(tokens[1::2], tokens[2::2]):
        terms.append(int(term) if operator == "+" else -int(term))
    return tuple(terms)


def _chain_sum_key(entry: dict) -> tuple:
    return tuple(sorted(signed_terms(entry["metadata"]["expression"])))


def _number_sorting_key(entry: dict) -> tuple:
    return tuple(sorted(float(number) for number in entry["metadata"]["original_numbers"]))


def _products_key(entry: dict) -> tuple:
    # "4 * 1" and "1 * 4": the same factors, the same product.
    return tuple(sorted(int(factor) for factor in entry["metadata"]["expression"].split("*")))


def _countdown_key(entry: dict) -> tuple:
    # The three prompt templates and the shuffled number order change the question, not the problem.
    return (tuple(sorted(entry["metadata"]["numbers"])), entry["metadata"]["target"])


# task -> the identity of a problem up to reordering; the other tasks fall back to the normalised question.
NEAR_DUPLICATE_KEYS = {
    "chain_sum": _chain_sum_key,
    "number_sorting": _number_sorting_key,
    "countdown": _countdown_key,
    "products": _products_key,
}


def near_duplicate_key(entry: dict, task: str) -> tuple:
    """What two problems share when one is a reordering of the other: chain_sum the multiset of signed terms
    (``"4 - 1 + 3"`` and ``"3 + 4 - 1"``, same answer), number_sorting the multiset of numbers (whatever the order
    and the direction asked for), countdown the multiset of numbers and the target (whatever the prompt template and
    the order the numbers are listed in), products the multiset of factors (``"4 * 1"`` and ``"1 * 4"``), any other
    task its question lower-cased with whitespace collapsed."""
    key = NEAR_DUPLICATE_KEYS.get(task)
    return (task, key(entry) if key else " ".join(entry["question"].lower().split()))


def problem_stratum(entry: dict, task: str) -> tuple:
    """A problem's stratum over the generator's own options: its task (which sub-task of a mixture) and, for each
    option reasoning-gym lists in the entry's ``metadata["difficulty"]``, the problem's own value of it where the
    metadata records one (chain_sum: ``num_terms``, ``num_digits``; number_sorting: ``numbers``)."""
    metadata = entry.get("metadata", {})
    values = tuple(
        (key, metadata[key])
        for key in sorted(metadata.get("difficulty", {}))
        if isinstance(metadata.get(key), (int, float, str, bool))
    )
    return (task, *values)


def stratum_label(stratum: tuple) -> str:
    """``("chain_sum", ("num_digits", 1), ("num_terms", 3)) -> "chain_sum num_digits=1 num_terms=3"``."""
    return " ".join([stratum[0], *(f"{key}={value}" for key, value in stratum[1:])])
