"""The trivial policies: what a policy that reads the prompt's structure, and does not do the task, guesses.

A Pass@k at large k is only evidence of a reasoning boundary where guessing cannot reach it. The ``chance`` row of a
study's table guesses from the train answers; the policies here guess from the **prompt** instead, each reading one
thing a tiny model picks up first and guessing the rest:

- ``number_sorting``: the answer is a reordering of the prompt's own numbers. ``shuffled_copy*`` copies them in a
  random order, once per answer format the verifier accepts (reasoning-gym's ``score_answer`` replaces ``'`` by ``"``,
  reads JSON and compares floats, so quoted strings, double-quoted strings, bare numbers and integers without
  ``.0`` all pass: the four formats draw the same permutations, so their counts agree exactly, which shows that the
  verifier takes each). ``prompt_order`` copies them as the prompt lists them.
- ``chain_sum``: ``random_signs`` reads the terms and adds them with a fair coin for each operator (it knows the
  terms and addition, and ignores the operators: the task's one skill beyond copying); ``uniform_support`` draws an
  integer uniformly from the range the number of terms and digits allows (it reads only the prompt's shape);
  ``copy_term`` answers one of the prompt's signed terms.
- ``toy`` (little-endian addition, `trl_rlvr_ext.toy.task`): ``random_carries`` adds each column's digits mod 10
  and guesses every carry with a fair coin (it knows digit addition, not carrying, the task's skill);
  ``no_carries`` drops every carry (right exactly on the problems without one); ``uniform_support`` draws a sum
  uniformly from the range the operand width allows.
- ``products``: ``random_product`` multiplies random factors with the prompt's digit counts (it knows
  multiplication and the answer's shape, not the factors); ``copy_factor`` answers one of the prompt's factors
  (right when another factor is 1, or the copied one 0); ``uniform_support`` draws an integer uniformly from 0 to
  the largest product the digit counts allow.
- ``countdown``: ``random_expression`` writes the prompt's numbers in a random order with a random operator at each
  node and a random bracketing (`trl_rlvr_ext.tasks.countdown.random_expression`): it knows the answer's form (each
  number once, the four operators), not the arithmetic that reaches the target.
- a mixture: each row takes its sub-task's policy of that name, or that sub-task's first (strongest) policy when it
  has none; the record also gives Pass@k per sub-task.

Their evaluation and records are `lab.studies.baselines`.
"""

import dataclasses
import json
import math
import random
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class TrivialPolicy:
    """A trivial policy of one task: ``guess(row, rng) -> answer string`` (before the reward's answer markers).

    ``family`` names the RNG stream: policies of one family (the formats of one guess) draw the same guesses.
    ``knows`` says what the policy reads and computes, for the page."""

    name: str
    task: str
    family: str
    knows: str
    guess: Callable[[dict, random.Random], str]


def _entry(row: dict) -> dict:
    return json.loads(row["entry"]) if isinstance(row["entry"], str) else row["entry"]


def _prompt_text(row: dict) -> str:
    prompt = row["prompt"]
    return prompt if isinstance(prompt, str) else "\n".join(message["content"] for message in prompt)


def prompt_numbers(row: dict) -> list[str]:
    """The numbers a number_sorting prompt lists, as written there (reasoning-gym builds the question from them)."""
    numbers = _entry(row)["metadata"]["original_numbers"]
    if ", ".join(numbers) not in _prompt_text(row):
        raise ValueError(f"The numbers {numbers} of the entry are not in the prompt {row['prompt']!r}.")
    return list(numbers)


def prompt_terms(row: dict) -> list[int]:
    """The signed terms of a chain_sum prompt, ``"4 - 1 + 3 =" -> [4, -1, 3]`` (read from its expression)."""
    from trl_rlvr_ext.tasks.reasoning_gym import signed_terms

    expression = _entry(row)["metadata"]["expression"]
    if expression not in _prompt_text(row):
        raise ValueError(f"The expression {expression!r} of the entry is not in the prompt {row['prompt']!r}.")
    return list(signed_terms(expression))


def countdown_numbers(row: dict) -> list[int]:
    """The numbers a countdown prompt lists, as the entry records them (reasoning-gym builds the question from them)."""
    numbers = _entry(row)["metadata"]["numbers"]
    if ", ".join(map(str, numbers)) not in _prompt_text(row):
        raise ValueError(f"The numbers {numbers} of the entry are not in the prompt {row['prompt']!r}.")
    return list(numbers)


def _random_expression(row: dict, rng: random.Random) -> str:
    from trl_rlvr_ext.tasks.countdown import random_expression

    return random_expression(countdown_numbers(row), rng)


def _as_integer(number: str) -> str:
    return str(int(float(number))) if float(number).is_integer() else number


# number_sorting: the answer formats the verifier accepts (it reads JSON after replacing ' by ", compares floats)
_SORTING_FORMATS = {
    "": lambda numbers: str(list(numbers)),  # reasoning-gym's own: ['9.0', '25.0', '83.0']
    "_json": lambda numbers: json.dumps(list(numbers)),  # ["9.0", "25.0", "83.0"]
    "_bare": lambda numbers: "[" + ", ".join(numbers) + "]",  # [9.0, 25.0, 83.0]
    "_int": lambda numbers: str([_as_integer(n) for n in numbers]),  # ['9', '25', '83']
}


def _shuffled(write: Callable[[list[str]], str]):
    def guess(row: dict, rng: random.Random) -> str:
        numbers = prompt_numbers(row)
        rng.shuffle(numbers)
        return write(numbers)

    return guess


def _random_signs(row: dict, rng: random.Random) -> str:
    first, *rest = prompt_terms(row)
    return str(first + sum(abs(term) * rng.choice((1, -1)) for term in rest))


def _chain_sum_support(row: dict) -> tuple[int, int]:
    terms = prompt_terms(row)
    digits = max(len(str(abs(term))) for term in terms)
    low, high = (0 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1
    return low - (len(terms) - 1) * high, len(terms) * high


def _uniform_chain_sum(row: dict, rng: random.Random) -> str:
    return str(rng.randint(*_chain_sum_support(row)))


def _copy_term(row: dict, rng: random.Random) -> str:
    return str(rng.choice(prompt_terms(row)))


def prompt_factors(row: dict) -> list[int]:
    """The factors of a products prompt, ``"... 4 * 12. ..." -> [4, 12]`` (read from its expression)."""
    expression = _entry(row)["metadata"]["expression"]
    if expression not in _prompt_text(row):
        raise ValueError(f"The expression {expression!r} of the entry is not in the prompt {row['prompt']!r}.")
    return [int(factor) for factor in expression.split("*")]


def _random_with_digits(factor: int, rng: random.Random) -> int:
    digits = len(str(abs(factor)))
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def _random_product(row: dict, rng: random.Random) -> str:
    return str(math.prod(_random_with_digits(factor, rng) for factor in prompt_factors(row)))


def _copy_factor(row: dict, rng: random.Random) -> str:
    return str(rng.choice(prompt_factors(row)))


def _uniform_product(row: dict, rng: random.Random) -> str:
    return str(rng.randint(0, math.prod(10 ** len(str(abs(f))) - 1 for f in prompt_factors(row))))


def toy_operands(row: dict) -> tuple[str, str]:
    """The two little-endian operand strings of a toy prompt, ``"740+580=" -> ("740", "580")``."""
    left, _, right = _prompt_text(row).rstrip("=").partition("+")
    if not (left.isdigit() and right.isdigit() and len(left) == len(right)):
        raise ValueError(f"{row['prompt']!r} is not a toy prompt ('<digits>+<digits>=', one width).")
    return left, right


def _toy_columns(row: dict, carries) -> str:
    """The answer of the toy prompt when column ``i`` receives the carry ``carries[i]`` (``carries[0]`` is 0): each
    digit is the column's digit sum plus that carry mod 10, the last digit the carry out of the last column."""
    left, right = toy_operands(row)
    digits = [(int(a) + int(b) + carry) % 10 for a, b, carry in zip(left, right, carries)]
    return "".join(map(str, digits)) + str(carries[len(left)])


def _random_carries(row: dict, rng: random.Random) -> str:
    width = len(toy_operands(row)[0])
    return _toy_columns(row, [0] + [rng.randint(0, 1) for _ in range(width)])


def _no_carries(row: dict, rng: random.Random) -> str:
    return _toy_columns(row, [0] * (len(toy_operands(row)[0]) + 1))


def _uniform_toy(row: dict, rng: random.Random) -> str:
    from trl_rlvr_ext.toy.task import format_answer

    width = len(toy_operands(row)[0])
    return format_answer(rng.randint(0, 2 * (10**width - 1)), width)


POLICIES: dict[str, list[TrivialPolicy]] = {
    "number_sorting": [
        *(
            TrivialPolicy(
                f"shuffled_copy{suffix}",
                "number_sorting",
                "shuffled_copy",
                f"the prompt's numbers in a random order, written {write(['9.0', '25.0'])}-style",
                _shuffled(write),
            )
            for suffix, write in _SORTING_FORMATS.items()
        ),
        TrivialPolicy(
            "prompt_order",
            "number_sorting",
            "prompt_order",
            "the prompt's numbers in the prompt's order",
            lambda row, rng: str(prompt_numbers(row)),
        ),
    ],
    "chain_sum": [
        TrivialPolicy(
            "random_signs",
            "chain_sum",
            "random_signs",
            "the prompt's terms added with a fair coin for each operator",
            _random_signs,
        ),
        TrivialPolicy(
            "uniform_support",
            "chain_sum",
            "uniform_support",
            "an integer uniform on the range the number of terms and digits allows",
            _uniform_chain_sum,
        ),
        TrivialPolicy("copy_term", "chain_sum", "copy_term", "one of the prompt's signed terms", _copy_term),
    ],
    "products": [
        TrivialPolicy(
            "random_product",
            "products",
            "random_product",
            "the product of random factors with the prompt's digit counts",
            _random_product,
        ),
        TrivialPolicy("copy_factor", "products", "copy_factor", "one of the prompt's factors", _copy_factor),
        TrivialPolicy(
            "uniform_support",
            "products",
            "uniform_support",
            "an integer uniform from 0 to the largest product the digit counts allow",
            _uniform_product,
        ),
    ],
    "countdown": [
        TrivialPolicy(
            "random_expression",
            "countdown",
            "random_expression",
            "the prompt's numbers in a random order, random operators (+ - * /) and a random bracketing",
            _random_expression,
        ),
    ],
    "toy": [
        TrivialPolicy(
            "random_carries",
            "toy",
            "random_carries",
            "each column's digit sum mod 10, every carry guessed with a fair coin",
            _random_carries,
        ),
        TrivialPolicy("no_carries", "toy", "no_carries", "each column's digit sum mod 10, no carries", _no_carries),
        TrivialPolicy(
            "uniform_support",
            "toy",
            "uniform_support",
            "a sum uniform on the range the operand width allows",
            _uniform_toy,
        ),
    ],
}


def row_task(row: dict, dataset: str) -> str:
    """The task a row's trivial policies come from: ``toy`` for the toy, else the row's ``task`` column (a
    reasoning-gym task; ``"None"`` without that column, a task without trivial policies)."""
    return "toy" if dataset.startswith("toy:") else str(row.get("task"))


def policy_names(tasks: list[str]) -> list[str]:
    """The trivial policies of a dataset whose rows come from ``tasks`` (several for a mixture), in order; empty
    when none of them has a trivial policy here."""
    names = [policy.name for task in tasks for policy in POLICIES.get(task, [])]
    return list(dict.fromkeys(names))


def mixture_policy_names(tasks: list[str]) -> list[str]:
    """`policy_names`, less the names that pick the same policy for every task as an earlier name (in a mixture,
    each sub-task's strongest policy is also what the other sub-task's strongest name picks)."""
    names, picks = [], set()
    for name in policy_names(tasks):
        pick = tuple(getattr(policy_for(task, name), "name", None) for task in tasks)
        if pick not in picks:
            picks.add(pick)
            names.append(name)
    return names


def policy_for(task: str, name: str) -> TrivialPolicy | None:
    """The policy ``name`` of ``task``, else the task's first (strongest) policy (a mixture's other sub-task)."""
    policies = POLICIES.get(task, [])
    return next((policy for policy in policies if policy.name == name), policies[0] if policies else None)
