"""Trivial-policy baselines: what a policy that reads the prompt's structure, and does not do the task, scores.

The policies themselves (what each reads and guesses, task by task) are `lab.studies.trivial_policies`;
this module evaluates them and keeps their records. It re-exports the policies' public names, which the scripts,
the studies and the tests import from here.

`baseline_records` draws ``num_samples`` answers per problem with a fixed RNG per (task, policy family, seed),
grades them with the task's own reward (correct at 1.0, as the evaluation counts) and returns records in the studies'
schema, on exactly the problems a study evaluated (the first ``eval_problems`` held-out rows of its dataset).
"""

import random
import time
from collections.abc import Callable

from .trivial_policies import (
    POLICIES,
    TrivialPolicy,
    countdown_numbers,
    mixture_policy_names,
    policy_for,
    policy_names,
    prompt_factors,
    prompt_numbers,
    prompt_terms,
    row_task,
    toy_operands,
)


__all__ = [
    "POLICIES",
    "TrivialPolicy",
    "baseline_records",
    "completion_of",
    "countdown_numbers",
    "eval_rows",
    "evaluate_trivial_policy",
    "mixture_policy_names",
    "policy_for",
    "policy_names",
    "prompt_factors",
    "prompt_numbers",
    "prompt_terms",
    "row_task",
    "strongest_trivial_pass_at_k",
    "study_evaluation_sets",
    "toy_operands",
]


def strongest_trivial_pass_at_k(dataset: str, reward_name: str, eval_problems: int, num_samples: int, seeds=(0, 1, 2)):
    """``(arm, {k: [pass@k per seed]})`` of the strongest trivial policy of the dataset's tasks (each task's first
    policy) on its first ``eval_problems`` held-out problems, or ``None`` where no task has one (a study's table)."""
    records = baseline_records("", dataset, reward_name, eval_problems, num_samples, seeds, only_strongest=True)
    if not records:
        return None
    ks = records[0]["pass_at_k"]
    return records[0]["arm"], {int(k): [r["pass_at_k"][k] for r in records] for k in ks}


def completion_of(answer: str, dataset: str, prompt, answer_format: str | None = None) -> "str | list[dict]":
    """The completion that states ``answer`` under the dataset's reward convention (the row's ``answer_format``:
    the bare answer for the lenient numeric formats, else reasoning-gym's ``<answer>`` tags), in the prompt's
    format."""
    from trl_rlvr_ext.gym_bases import completion_of as tagged
    from trl_rlvr_ext.toy.task import format_completion

    if dataset.startswith("toy:"):
        text = format_completion(answer)
    elif answer_format in (None, "tags"):
        text = tagged(answer)
    else:
        text = answer
    from trl_rlvr_ext.sampling import completion_in_format

    return completion_in_format(text, not isinstance(prompt, str))


def evaluate_trivial_policy(rows: list[dict], dataset: str, reward: Callable, name: str, num_samples: int, seed: int):
    """``(num_correct per problem, {task: policy name used})``: ``num_samples`` guesses of the policy ``name`` per
    row, graded by ``reward`` (correct at 1.0). The RNG of each (task, policy family) is seeded by ``seed`` alone."""
    from trl_rlvr_ext.sampling.grading import grade

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
    from trl_rlvr_ext.data import load_named_dataset

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
    policy. Empty when the task has no trivial policy. Each record carries its ``provenance`` (time, commit,
    library versions, CPU; no weights: a trivial policy has none) as every study run's does; the guesses and grades
    are pure Python, on one thread."""
    from trl_rlvr_ext.evaluation.estimators import pass_at_k_curve
    from trl_rlvr_ext.provenance import provenance
    from trl_rlvr_ext.rewards import get_reward_func

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
                "provenance": provenance(None, num_threads=1, seed=seed),
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
