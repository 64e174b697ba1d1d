"""Trivial-policy baselines: what a policy that reads the prompt's structure, and does not do the task, scores.

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

`baseline_records` draws ``num_samples`` answers per problem with a fixed RNG per (task, policy family, seed),
grades them with the task's own reward (correct at 1.0, as the evaluation counts) and returns records in the studies'
schema, on exactly the problems a study evaluated (the first ``eval_problems`` held-out rows of its dataset).
"""

import dataclasses
import json
import math
import random
import time
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
    from ..tasks.reasoning_gym import signed_terms

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
    from ..tasks.countdown import random_expression

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
    from ..toy.task import format_answer

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


def strongest_trivial_pass_at_k(dataset: str, reward_name: str, eval_problems: int, num_samples: int, seeds=(0, 1, 2)):
    """``(arm, {k: [pass@k per seed]})`` of the strongest trivial policy of the dataset's tasks (each task's first
    policy) on its first ``eval_problems`` held-out problems, or ``None`` where no task has one (a study's table)."""
    records = baseline_records("", dataset, reward_name, eval_problems, num_samples, seeds, only_strongest=True)
    if not records:
        return None
    ks = records[0]["pass_at_k"]
    return records[0]["arm"], {int(k): [r["pass_at_k"][k] for r in records] for k in ks}


def policy_for(task: str, name: str) -> TrivialPolicy | None:
    """The policy ``name`` of ``task``, else the task's first (strongest) policy (a mixture's other sub-task)."""
    policies = POLICIES.get(task, [])
    return next((policy for policy in policies if policy.name == name), policies[0] if policies else None)


def completion_of(answer: str, dataset: str, prompt, answer_format: str | None = None) -> "str | list[dict]":
    """The completion that states ``answer`` under the dataset's reward convention (the row's ``answer_format``:
    the bare answer for the lenient numeric formats, else reasoning-gym's ``<answer>`` tags), in the prompt's
    format."""
    from ..toy.task import format_completion
    from .gym_bases import completion_of as tagged

    if dataset.startswith("toy:"):
        text = format_completion(answer)
    elif answer_format in (None, "tags"):
        text = tagged(answer)
    else:
        text = answer
    return text if isinstance(prompt, str) else [{"role": "assistant", "content": text}]


def evaluate_trivial_policy(rows: list[dict], dataset: str, reward: Callable, name: str, num_samples: int, seed: int):
    """``(num_correct per problem, {task: policy name used})``: ``num_samples`` guesses of the policy ``name`` per
    row, graded by ``reward`` (correct at 1.0). The RNG of each (task, policy family) is seeded by ``seed`` alone."""
    from ..sampling.grading import grade

    rngs: dict[tuple[str, str], random.Random] = {}
    used: dict[str, str] = {}
    num_correct = []
    for row in rows:
        task = row_task(row, dataset)
        policy = policy_for(task, name)
        if policy is None:
            raise ValueError(f"There is no trivial policy for the task {task!r}; those there are: {sorted(POLICIES)}.")
        used[task] = policy.name
        rng = rngs.setdefault((task, policy.family), random.Random(f"trivial/{task}/{policy.family}/{seed}"))
        completions = [
            completion_of(policy.guess(row, rng), dataset, row["prompt"], row.get("answer_format"))
            for _ in range(num_samples)
        ]
        columns = {key: [row[key]] * num_samples for key in row if key != "prompt"}
        correct = grade([reward], [row["prompt"]] * num_samples, completions, [[]] * num_samples, columns)
        num_correct.append(int(correct.sum()))
    return num_correct, dict(sorted(used.items()))


def eval_rows(dataset: str, eval_problems: int) -> list[dict]:
    """The problems a study evaluated: the first ``eval_problems`` rows of the dataset's held-out split, in order."""
    from ..data import load_named_dataset

    test = load_named_dataset(dataset)["test"]
    if test.num_rows < eval_problems:
        raise ValueError(f"{dataset} has {test.num_rows} held-out problems, fewer than the {eval_problems} evaluated.")
    rows = [test[i] for i in range(eval_problems)]
    assert len(rows) == eval_problems, "the reconstructed evaluation set has another size than the study's"
    return rows


def baseline_records(
    task: str,
    dataset: str,
    reward_name: str,
    eval_problems: int,
    num_samples: int,
    seeds=(0, 1, 2),
    studies=(),
    command: str = "",
    only_strongest: bool = False,
) -> list[dict]:
    """One record per (trivial policy, seed) of a task, in the studies' schema (``study="trivial"``, ``arm``
    ``"trivial_<policy>"``, in a mixture ``"trivial_<policy>+<policy>"``), on the first ``eval_problems`` held-out
    problems of ``dataset``; ``studies`` says whose evaluation sets these are; ``only_strongest``: only the first
    policy. Empty when the task has no trivial policy."""
    from ..evaluation.pass_at_k import pass_at_k_curve
    from ..rewards import get_reward_func

    rows = eval_rows(dataset, eval_problems)
    reward = get_reward_func(reward_name)
    tasks = list(dict.fromkeys(row_task(row, dataset) for row in rows))
    records = []
    for name in mixture_policy_names(tasks)[: 1 if only_strongest else None]:
        arm = "trivial_" + "+".join(dict.fromkeys(policy_for(t, name).name for t in tasks if policy_for(t, name)))
        for seed in seeds:
            start = time.perf_counter()
            num_correct, used = evaluate_trivial_policy(rows, dataset, reward, name, num_samples, seed)
            record = {
                "study": "trivial",
                "task": task,
                "arm": arm,
                "seed": seed,
                "quick": False,
                "dataset": dataset,
                "reward": reward_name,
                "base_model": None,
                "policies": used,
                "knows": {t: policy_for(t, p).knows for t, p in used.items()},
                "evaluates": {"studies": sorted(studies), "split": "test", "problems": f"the first {eval_problems}"},
                "pass_at_k": {str(k): v for k, v in pass_at_k_curve([num_samples] * len(rows), num_correct).items()},
                "num_correct": num_correct,
                "num_samples": num_samples,
                "sizes": {"eval_problems": eval_problems, "eval_samples": num_samples},
                "boundary": [],
                "train_seconds": 0.0,
                "wall_seconds": round(time.perf_counter() - start, 1),
                "command": command,
            }
            if len(tasks) > 1:  # a mixture: Pass@k on each sub-task's problems
                record["per_task"] = {}
                for sub in tasks:
                    counts = [c for c, row in zip(num_correct, rows) if row_task(row, dataset) == sub]
                    curve = pass_at_k_curve([num_samples] * len(counts), counts)
                    record["per_task"][sub] = {
                        "problems": len(counts),
                        "pass_at_k": {str(k): v for k, v in curve.items()},
                    }
            records.append(record)
    return records


def study_evaluation_sets(records: list[dict], studies=None) -> list[dict]:
    """The distinct evaluation sets of study records: ``{task, dataset, reward, eval_problems, num_samples,
    studies}``, one per (task, dataset, eval_problems, num_samples), in order of appearance; quick runs are left out,
    and so are runs measured on the validation problems (``evaluated_on``: a sweep's or a calibration's), since the
    baselines are graded on the first test problems, which those runs never saw. Each record's ``num_correct`` must have
    ``sizes.eval_problems`` entries (else the record is not what it says)."""
    sets: dict[tuple, dict] = {}
    for record in records:
        if record.get("quick") or (studies is not None and record["study"] not in studies):
            continue
        if (record.get("evaluated_on") or {}).get("name") == "validation":
            continue
        eval_problems = record["sizes"]["eval_problems"]
        if len(record["num_correct"]) != eval_problems:
            raise ValueError(
                f"A record of {record['study']}/{record['task']}/{record['arm']} has {len(record['num_correct'])} "
                f"problems but sizes.eval_problems={eval_problems}."
            )
        key = (record["task"], record["dataset"], eval_problems, record["num_samples"])
        entry = sets.setdefault(
            key,
            {
                "task": record["task"],
                "dataset": record["dataset"],
                "reward": record["reward"],
                "eval_problems": eval_problems,
                "num_samples": record["num_samples"],
                "studies": [],
            },
        )
        if record["study"] not in entry["studies"]:
            entry["studies"].append(record["study"])
    return list(sets.values())
