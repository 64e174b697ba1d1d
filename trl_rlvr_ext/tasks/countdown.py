"""Every solution of a reasoning-gym ``countdown`` problem: the expressions its ``score_answer`` accepts.

reasoning-gym's countdown verifier (``reasoning_gym.games.countdown.CountdownDataset.score_answer``) accepts an
answer when (1) the integer literals it contains, as a multiset, are exactly the problem's numbers (each used exactly
once, none added), and (2) ``sympy.parse_expr`` of it is within 1e-6 of the target (exact rational arithmetic:
``"9/2*4"`` is 18). Whitespace does not matter. A wrong answer scores 0.05 (right numbers, wrong value, or wrong
numbers) or 0.01 (empty or unparseable), never 1.0; the ``reasoning_gym`` reward counts only 1.0 as correct.

A problem usually has several solutions (``"2*3 + 4"``, ``"4 + 2*3"``, ``"3*2 + 4"``, ...), while the dataset's gold
answer is one of them. `countdown_solutions` lists them all, so that a warm start can demonstrate a random one each
time it draws the problem (``GymWarmStartSettings(demonstrations="varied")``): the base then spreads its probability
over the solutions, which gives RLVR tokens that are genuinely uncertain and still rewarded.

Expressions are written as reasoning-gym writes its gold (sympy's printer): spaces around ``+`` and ``-``, none
around ``*`` and ``/``, only the parentheses the precedence needs. Only the binary operators are enumerated: no
unary minus, no concatenation of digits.
"""

import itertools
from fractions import Fraction
from functools import lru_cache


OPERATORS = ("+", "-", "*", "/")
# Precedence of each operator's result: a sum or difference needs parentheses under * and /.
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, None: 3}  # None: a bare number


def _apply(operator: str, left: Fraction, right: Fraction) -> Fraction | None:
    if operator == "+":
        return left + right
    if operator == "-":
        return left - right
    if operator == "*":
        return left * right
    return None if right == 0 else left / right  # sympy would give zoo: the verifier's float() then fails


def _wrap(text: str, needed: bool) -> str:
    return f"({text})" if needed else text


def _render(operator: str, left: tuple[str, str | None], right: tuple[str, str | None]) -> str:
    """``left operator right`` with the parentheses its precedence needs. ``a - (b + c)`` and ``a / (b * c)`` keep
    theirs (the right operand of ``-`` and ``/`` binds tighter than left-to-right reading would)."""
    (left_text, left_op), (right_text, right_op) = left, right
    mine = _PRECEDENCE[operator]
    left_needs = _PRECEDENCE[left_op] < mine
    if operator in "+*":
        right_needs = _PRECEDENCE[right_op] < mine
    else:
        right_needs = _PRECEDENCE[right_op] <= mine
    separator = f" {operator} " if operator in "+-" else operator
    return _wrap(left_text, left_needs) + separator + _wrap(right_text, right_needs)


@lru_cache(maxsize=4096)
def _expressions(numbers: tuple[int, ...], operators: tuple[str, ...]) -> tuple:
    """Every ``(value, text, top operator)`` of a binary expression tree whose leaves are ``numbers`` in this order."""
    if len(numbers) == 1:
        return ((Fraction(numbers[0]), str(numbers[0]), None),)
    found = []
    for cut in range(1, len(numbers)):
        for left_value, left_text, left_op in _expressions(numbers[:cut], operators):
            for right_value, right_text, right_op in _expressions(numbers[cut:], operators):
                for operator in operators:
                    value = _apply(operator, left_value, right_value)
                    if value is not None:
                        text = _render(operator, (left_text, left_op), (right_text, right_op))
                        found.append((value, text, operator))
    return tuple(found)


def countdown_solutions(numbers, target, operators=OPERATORS) -> list[str]:
    """All distinct expressions (as strings, sorted) that use each of ``numbers`` exactly once with the binary
    ``operators`` and any bracketing, and equal ``target`` exactly.

    Distinct means distinct text: ``"2 + 3 + 4"`` and ``"3 + 2 + 4"`` are two solutions (the model writes one or the
    other, token by token), and two trees with one text (``(2 + 3) + 4`` and ``2 + (3 + 4)``) are one.

    Example: ``countdown_solutions([2, 3, 4], 10)`` is ``['2*3 + 4', '3*2 + 4', '4 + 2*3', '4 + 3*2']``.
    """
    numbers = [int(number) for number in numbers]
    if len(numbers) < 1:
        raise ValueError("countdown_solutions needs at least one number.")
    if any(number < 0 for number in numbers):
        raise ValueError(f"countdown numbers are positive integers (reasoning-gym's min_value > 0), got {numbers}.")
    unknown = [op for op in operators if op not in OPERATORS]
    if unknown:
        raise ValueError(f"Unknown operators {unknown}: countdown's operators are {OPERATORS}.")
    target = Fraction(target)
    solutions = set()
    for order in set(itertools.permutations(numbers)):
        for value, text, _ in _expressions(order, tuple(operators)):
            if value == target:
                solutions.add(text)
    return sorted(solutions)


def random_expression(numbers, rng, operators=OPERATORS) -> str:
    """An expression over ``numbers`` in a random order, with a random operator at each node and a random bracketing
    (each split point of each sub-list equally likely), written as `countdown_solutions` writes them. What a policy
    that knows the answer's form and not the arithmetic writes: countdown's trivial baseline. A division by zero is
    written as it falls (the verifier then scores it wrong)."""
    order = [int(number) for number in numbers]
    rng.shuffle(order)

    def build(part: list[int]) -> tuple[str, str | None]:
        if len(part) == 1:
            return str(part[0]), None
        cut = rng.randrange(1, len(part))
        operator = rng.choice(operators)
        return _render(operator, build(part[:cut]), build(part[cut:])), operator

    return build(order)[0]


def compact_question(entry: dict) -> str:
    """The problem's data alone, ``"<target> from <n1>, <n2>, <n3>"`` (``"8 from 6, 4, 8"``), numbers in the order the
    question lists them: the prompt of ``compact=true`` (`trl_rlvr_ext.tasks.reasoning_gym`). reasoning-gym writes the
    same problem in one of several templates of about 80-95 characters, so the numbers sit at varying positions
    behind a sentence of instructions; a tiny byte-level model must first learn to find them."""
    metadata = entry["metadata"]
    return f"{metadata['target']} from " + ", ".join(str(number) for number in metadata["numbers"])


def entry_solutions(entry: dict) -> list[str]:
    """`countdown_solutions` of a reasoning-gym countdown entry (its ``metadata`` numbers and target)."""
    metadata = entry["metadata"]
    return countdown_solutions(metadata["numbers"], metadata["target"])


__all__ = ["OPERATORS", "compact_question", "countdown_solutions", "entry_solutions", "random_expression"]
