"""The two splits of a reasoning-gym name (train at ``seed``, held out far away, de-duplicated, optionally
stratified) and what they hold."""

import dataclasses

from .names import TEST_SEED_OFFSET, ReasoningGymSpec, import_reasoning_gym, parse_name
from .problems import near_duplicate_key, problem_stratum, stratum_label


def _create(spec: ReasoningGymSpec, size: int, seed: int):
    """The reasoning-gym dataset of ``spec`` at ``size``/``seed`` (a composite for a mixture); bad option values fail
    with the generator's own message."""
    rg = import_reasoning_gym()
    try:
        if len(spec.tasks) == 1:
            task = spec.tasks[0]
            return rg.create_dataset(task, size=size, seed=seed, **spec.options[task])
        from reasoning_gym.composite import DatasetSpec

        specs = [DatasetSpec(name=t, weight=spec.weights[t], config=dict(spec.options[t])) for t in spec.tasks]
        return rg.create_dataset("composite", size=size, seed=seed, datasets=specs)
    except (AssertionError, ValueError, TypeError) as error:
        raise ValueError(
            f"reasoning-gym rejected the options {spec.options} of {list(spec.tasks)}: {error or type(error).__name__}. "
            "Change the option values (see the task's config class in reasoning-gym)."
        ) from error


def _entry_task(entry: dict, spec: ReasoningGymSpec) -> str:
    return entry.get("metadata", {}).get("source_dataset", spec.tasks[0])


def _quotas(train_strata: list[tuple], test_size: int) -> dict[tuple, int]:
    """``test_size`` shared out over the train split's strata in proportion to their counts (largest remainders,
    ties in the strata's sorted order)."""
    counts: dict[tuple, int] = {}
    for stratum in train_strata:
        counts[stratum] = counts.get(stratum, 0) + 1
    exact = {stratum: test_size * count / len(train_strata) for stratum, count in counts.items()}
    quotas = {stratum: int(share) for stratum, share in exact.items()}
    by_remainder = sorted(exact, key=lambda stratum: (-(exact[stratum] - quotas[stratum]), repr(stratum)))
    for stratum in by_remainder[: test_size - sum(quotas.values())]:
        quotas[stratum] += 1
    return quotas


@dataclasses.dataclass
class SplitDraw:
    """The entries of a name's two splits and what the held-out draw skipped: ``dropped["exact"]`` (a train
    question), ``["repeat"]`` (a question already held out), ``["near"]`` (with ``dedup=near``: a reordering of a train
    or held-out problem), ``["stratum_full"]`` (with ``stratify``: its stratum had its share); ``draws`` items read."""

    train: list[dict]
    test: list[dict]
    draws: int
    dropped: dict
    quotas: dict | None


def draw_splits(spec: ReasoningGymSpec) -> SplitDraw:
    """The train entries (reasoning-gym's dataset at ``seed``) and the held-out entries (drawn at
    ``seed + TEST_SEED_OFFSET``, skipping copies of train problems, see ``dedup`` and ``stratify``)."""
    train_source = _create(spec, spec.size, spec.seed)
    train = [train_source[i] for i in range(spec.size)]
    train_questions = {entry["question"] for entry in train}
    near = spec.dedup == "near"
    near_keys = {near_duplicate_key(entry, _entry_task(entry, spec)) for entry in train} if near else set()
    quotas = None
    if spec.stratify:
        quotas = _quotas([problem_stratum(entry, _entry_task(entry, spec)) for entry in train], spec.test_size)
    filled = dict.fromkeys(quotas or (), 0)
    dropped = {"exact": 0, "repeat": 0, "near": 0, "stratum_full": 0}
    # Draw held-out items from a far seed, keeping each new question once and none that is in train.
    max_draws = (200 if spec.stratify else 20) * spec.test_size + 1000
    test_source = _create(spec, max_draws, spec.seed + TEST_SEED_OFFSET)
    test, seen = [], set()
    draws = 0
    for i in range(max_draws):
        entry = test_source[i]
        draws += 1
        if entry["question"] in train_questions:
            dropped["exact"] += 1
            continue
        if entry["question"] in seen:
            dropped["repeat"] += 1
            continue
        if near:
            key = near_duplicate_key(entry, _entry_task(entry, spec))
            if key in near_keys:
                dropped["near"] += 1
                continue
        if quotas is not None:
            stratum = problem_stratum(entry, _entry_task(entry, spec))
            if filled.get(stratum, 0) >= quotas.get(stratum, 0):
                dropped["stratum_full"] += 1
                continue
            filled[stratum] += 1
        if near:
            near_keys.add(key)  # the held-out split keeps each problem once, up to reordering too
        seen.add(entry["question"])
        test.append(entry)
        if len(test) == spec.test_size:
            break
    else:
        short = ""
        if quotas is not None:
            missing = [
                f"{stratum_label(s)}: {filled[s]} of {q}" for s, q in sorted(quotas.items(), key=repr) if filled[s] < q
            ]
            short = (
                f" With stratify=true the strata short of their share are {missing}: the train split holds (nearly) "
                "every problem of these strata, so there are too few new ones. Lower size, widen the generator "
                "options, or drop stratify and report results per stratum (split_composition)."
            )
        raise ValueError(
            f"Could not draw {spec.test_size} held-out problems that are not in the {spec.size} train problems of "
            f"{list(spec.tasks)} with options {spec.options}: only {len(test)} distinct new questions in {max_draws} "
            "draws. The task's problem space is too small for these sizes: lower size or test_size, or widen the "
            "generator options (larger ranges)." + short
        )
    return SplitDraw(train, test, draws, dropped, quotas)


def _train_answers_by_key(drawn: SplitDraw, spec: ReasoningGymSpec) -> dict[tuple, set]:
    """The train problems' answers by `near_duplicate_key`: which held-out problems reorder a train problem."""
    answers: dict[tuple, set] = {}
    for entry in drawn.train:
        answers.setdefault(near_duplicate_key(entry, _entry_task(entry, spec)), set()).add(str(entry["answer"]))
    return answers


def near_duplicate_flags(name: str, start: int, stop: int) -> list[bool]:
    """Per held-out row ``start <= i < stop`` of the ``reasoning_gym:`` name, whether it is a reordering of a train
    problem (`near_duplicate_key`): a problem the model was warm-started on under another order, which a comparison
    of held-out results leaves out (the evidence pages, rendered by the `lab/` folder of a clone)."""
    spec = parse_name(name)
    drawn = draw_splits(spec)
    if not 0 <= start < stop <= len(drawn.test):
        raise ValueError(f"Held-out rows [{start}, {stop}) of {name}: it has {len(drawn.test)} held-out problems.")
    train_keys = _train_answers_by_key(drawn, spec)
    return [near_duplicate_key(e, _entry_task(e, spec)) in train_keys for e in drawn.test[start:stop]]


def split_composition(name: str, eval_problems: int | None = None) -> dict:
    """What the splits of the ``reasoning_gym:`` name hold, for a page or a test.

    Returns a dict: ``strata`` (label -> ``{"train": n, "test": n, "eval": n}``; ``eval`` counts the first
    ``eval_problems`` held-out rows, the problems a study evaluates, default all of them), ``eval_strata`` (the label
    of each evaluated problem, in order: for per-stratum results), ``dropped`` (what the held-out draw skipped, see
    `SplitDraw`), ``draws``, and ``eval_near_duplicates`` / ``eval_near_duplicates_same_answer``: how many evaluated
    problems are a reordering of a train problem (`near_duplicate_key`), and how many of them also share its answer.
    """
    spec = parse_name(name)
    drawn = draw_splits(spec)
    eval_problems = len(drawn.test) if eval_problems is None else eval_problems
    if not 1 <= eval_problems <= len(drawn.test):
        raise ValueError(f"eval_problems={eval_problems}: {name} has {len(drawn.test)} held-out problems.")
    evaluated = drawn.test[:eval_problems]
    strata: dict[str, dict[str, int]] = {}
    for split, entries in (("train", drawn.train), ("test", drawn.test), ("eval", evaluated)):
        for entry in entries:
            label = stratum_label(problem_stratum(entry, _entry_task(entry, spec)))
            strata.setdefault(label, {"train": 0, "test": 0, "eval": 0})[split] += 1
    train_answers = _train_answers_by_key(drawn, spec)
    near = [train_answers.get(near_duplicate_key(e, _entry_task(e, spec))) for e in evaluated]
    return {
        "dataset": name,
        "train_size": len(drawn.train),
        "test_size": len(drawn.test),
        "eval_problems": eval_problems,
        "strata": dict(sorted(strata.items())),
        "eval_strata": [stratum_label(problem_stratum(e, _entry_task(e, spec))) for e in evaluated],
        "dropped": drawn.dropped,
        "draws": drawn.draws,
        "eval_near_duplicates": sum(answers is not None for answers in near),
        "eval_near_duplicates_same_answer": sum(
            answers is not None and str(e["answer"]) in answers for answers, e in zip(near, evaluated)
        ),
    }


def split_composition_markdown(name: str, eval_problems: int | None = None) -> str:
    """`split_composition` as a markdown fragment: a table of the strata (count and share per split) and a line on
    the problems the held-out draw dropped and the near duplicates left in the evaluated problems."""
    return composition_markdown(split_composition(name, eval_problems))


def composition_markdown(composition: dict) -> str:
    """The markdown of `split_composition_markdown`, from a `split_composition` already drawn."""
    sizes = {"train": composition["train_size"], "test": composition["test_size"]}
    sizes["eval"] = composition["eval_problems"]
    lines = [
        f"| stratum | train ({sizes['train']}) | held out ({sizes['test']}) | evaluated ({sizes['eval']}) |",
        "|---|---|---|---|",
    ]
    for label, counts in composition["strata"].items():
        cells = [
            f"{counts[split]} ({100 * counts[split] / sizes[split]:.0f} %)" for split in ("train", "test", "eval")
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    dropped = composition["dropped"]
    lines += [
        "",
        (
            f"The held-out draw read {composition['draws']} problems and dropped {dropped['exact']} train questions, "
            f"{dropped['repeat']} repeats, {dropped['near']} reorderings of a kept problem (dedup=near) and "
            f"{dropped['stratum_full']} of full strata (stratify). Of the {sizes['eval']} evaluated problems, "
            f"{composition['eval_near_duplicates']} are a reordering of a train problem "
            f"({composition['eval_near_duplicates_same_answer']} with the same answer)."
        ),
    ]
    return "\n".join(lines) + "\n"
