r"""reasoning-gym tasks as TRL prompt-only datasets (optional extra ``[gym]``: ``pip install -e ".[gym]"``).

`reasoning-gym <https://github.com/open-thought/reasoning-gym>`_ has about a hundred procedural task generators, each
with its own verifier (``score_answer``). A dataset name of the form

    reasoning_gym:<task>[+<task>...][?<option>=<value>&...]

resolves through `trl_rlvr_ext.data`, so it works wherever a dataset name is accepted (the GRPO/DPO scripts and
recipes, ``trl-rlvr-ext eval``/``curate``, `trl_rlvr_ext.data.load_named_dataset`). Examples::

    reasoning_gym:count_bits?size=2000&seed=1&max_n=255
    reasoning_gym:chain_sum?min_terms=2&max_terms=2&max_digits=2&strip_template=true
    reasoning_gym:chain_sum+count_bits?chain_sum.max_digits=1&count_bits.max_n=63&count_bits.weight=2

Options (everything after ``?``, ``&``-separated):

- ``size`` (default 1000): train problems; ``test_size`` (default 200): held-out problems.
- ``seed`` (default 0): the train split is reasoning-gym's dataset at this seed.
- ``format``: ``standard`` (default; the prompt is the question text), ``conversational`` (a system message with
  reasoning-gym's default system prompt, which asks for ``<answer>...</answer>``, then the question as a user message)
  or ``chat`` (the question as the only, user, message: the model's chat template adds its own system prompt; for
  instruction-tuned models that do not follow reasoning-gym's answer-tag instruction, with a lenient ``answer``).
- ``answer`` (default ``tags``): how the reward reads a completion's answer (`ANSWER_FORMATS`). ``tags`` is
  reasoning-gym's convention, one final ``<answer>...</answer>`` block. ``first_number`` / ``last_number`` read the
  first / last number written anywhere in the completion (`trl_rlvr_ext.rewards.reasoning_gym.extract_answer`): a
  lenient, explicit option for tasks whose gold answer is one number (a name whose gold answers are not all single
  numbers fails), so a model that answers "3 * 4 = 12" is graded on what it wrote. It adds an ``answer_format``
  column; compare results only under one format, against trivial policies graded the same way.
- ``strip_template`` (default false): remove the constant text every question of a task starts and ends with
  (reasoning-gym prompts carry a fixed natural-language prefix, e.g. ``"State the final answer to the following
  arithmetic problem: "``), leaving the varying part (``"4 - 1 - 7 ="``). The constant part is the longest common
  prefix (and suffix) of the task's train questions, cut at whitespace; train and test are stripped identically.
  Meant for tiny models with a short context; the task itself is unchanged.
- ``compact`` (default false): the prompt is the problem's data alone, written by the task's compact renderer
  (`COMPACT_QUESTIONS`; countdown: ``"8 from 6, 4, 8"``), instead of reasoning-gym's question. For tasks whose
  question comes in several templates (countdown has three), which ``strip_template`` cannot shorten. The verifier
  and the ``entry`` column are unchanged: only the prompt is rewritten. Needs ``dedup=near`` (two questions that
  differ only in their template become one prompt, and the near-duplicate key is what identifies the problem) and
  excludes ``strip_template`` (nothing is left to strip).
- any other ``key=value`` is a generator option of the task (a field of its reasoning-gym config, e.g. ``max_n`` of
  ``count_bits``). In a mixture, write ``<task>.<key>=value``; ``<task>.weight`` sets its sampling weight (default 1).
  Values parse as ``true``/``false``, integers, floats, or text; ``a,b,c`` is a tuple (``operators=+,-``).

- ``dedup`` (default ``exact``): which held-out problems are dropped as copies of train ones. ``exact``: the same
  question. ``near``: also the same problem up to a reordering (`near_duplicate_key`: chain_sum the multiset of
  signed terms, number_sorting the multiset of numbers, countdown the multiset of numbers and the target, any other task its question with case and whitespace
  normalised; products the multiset of factors), so ``"3 + 4 - 1"`` is dropped when ``"4 - 1 + 3"`` is a train problem.
- ``stratify`` (default false): draw the held-out split with the train split's composition over the generator's own
  options (`problem_stratum`: the task of a mixture, and the per-problem values of the options reasoning-gym lists
  as the problem's difficulty, e.g. chain_sum's ``num_terms`` and ``num_digits``): each stratum gets its share of
  ``test_size`` (largest remainders). A stratum the train split has exhausted fails the name, naming it.

The splits share no problem: reasoning-gym draws item ``i`` of ``create_dataset(task, size, seed)`` from an RNG seeded
with ``seed + i``, so two seeds closer than the sizes share items. The held-out split is therefore drawn at
``seed + TEST_SEED_OFFSET`` (far beyond any train size), and every held-out question that also occurs in the train
split is dropped (and the held-out split keeps each question once), drawing on until ``test_size`` remain.
`split_composition` reports what a name's splits hold (strata, dropped problems, near duplicates left in).

Columns: ``prompt``; ``answer`` (the gold answer string); ``task`` (the reasoning-gym task of the row); ``entry``
(the reasoning-gym entry, question/answer/metadata, as JSON); ``task_options`` (the task's generator options, JSON);
``idx`` (the row's position in its split); with a lenient ``answer``, ``answer_format``. The reward `trl_rlvr_ext.rewards.reasoning_gym.reasoning_gym_reward` reads
``task``, ``entry``, ``task_options`` (and ``answer_format``) and grades with the task's own ``score_answer``.
"""

import dataclasses
import difflib
import json
import re

from .countdown import compact_question


PREFIX = "reasoning_gym:"
INSTALL_HINT = 'pip install "reasoning-gym>=0.1.25" (from a clone of trl-rlvr-ext: pip install -e ".[gym]")'
# Far beyond any train size: train items use RNG seeds [seed, seed + size), held-out items [seed + OFFSET, ...).
TEST_SEED_OFFSET = 1_000_000_007
# Options of the name that are ours, not the generator's.
RESERVED_OPTIONS = (
    "size",
    "test_size",
    "seed",
    "format",
    "answer",
    "strip_template",
    "compact",
    "dedup",
    "stratify",
)
FORMATS = ("standard", "conversational", "chat")
# answer=: reasoning-gym's strict <answer> tags, or the first / last plain decimal number of the completion (NUMBER;
# thousands separators and exponents are not read).
ANSWER_FORMATS = ("tags", "first_number", "last_number")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
DEDUP_MODES = ("exact", "near")
_DEFAULTS = {
    "size": 1000,
    "test_size": 200,
    "seed": 0,
    "format": "standard",
    "answer": "tags",
    "strip_template": False,
    "compact": False,
    "dedup": "exact",
    "stratify": False,
}


def import_reasoning_gym():
    """The ``reasoning_gym`` module, or an `ImportError` that says how to install the extra."""
    try:
        import reasoning_gym
    except ImportError as error:
        raise ImportError(
            f"reasoning_gym: dataset names and the 'reasoning_gym' reward need the optional package reasoning-gym "
            f"({error}). Install it with: {INSTALL_HINT}"
        ) from error
    return reasoning_gym


def task_names() -> list[str]:
    """The reasoning-gym task names (``reasoning_gym.factory.DATASETS``)."""
    import_reasoning_gym()
    from reasoning_gym.factory import DATASETS

    return sorted(name for name in DATASETS if name != "composite")


def parse_value(text: str):
    """``"true"``/``"false"`` -> bool, integers and floats -> numbers, ``"a,b"`` -> a tuple of parsed parts, else text."""
    if "," in text:
        return tuple(parse_value(part) for part in text.split(",") if part != "")
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


@dataclasses.dataclass(frozen=True)
class ReasoningGymSpec:
    """A parsed ``reasoning_gym:`` name: the tasks with their generator options and weights, and the split settings."""

    tasks: tuple[str, ...]
    options: dict  # task -> {generator option: value}
    weights: dict  # task -> weight
    size: int = 1000
    test_size: int = 200
    seed: int = 0
    format: str = "standard"
    answer: str = "tags"
    strip_template: bool = False
    compact: bool = False
    dedup: str = "exact"
    stratify: bool = False


def _check_task(task: str, known: list[str]) -> None:
    if task not in known:
        close = difflib.get_close_matches(task, known, n=5, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"Unknown reasoning-gym task {task!r}.{hint} The tasks are listed by "
            "`trl_rlvr_ext.tasks.reasoning_gym.task_names()` (reasoning_gym.factory.DATASETS)."
        )


def _config_fields(task: str) -> list[str]:
    from reasoning_gym.factory import DATASETS

    config_cls = DATASETS[task][1]
    return [f.name for f in dataclasses.fields(config_cls) if f.name not in ("seed", "size")]


def parse_name(name: str) -> ReasoningGymSpec:
    """Parse ``reasoning_gym:<task>[+<task>...][?<option>=<value>&...]`` (see the module docstring); checks the task
    names and option names against reasoning-gym, so a typo fails here, naming the valid choices."""
    if not name.startswith(PREFIX):
        raise ValueError(f"{name!r} is not a reasoning-gym dataset name: it must start with {PREFIX!r}.")
    body = name[len(PREFIX) :]
    task_part, _, query = body.partition("?")
    tasks = tuple(task_part.split("+"))
    if not task_part or any(not t for t in tasks):
        raise ValueError(
            f"{name!r} names no task: write reasoning_gym:<task>, e.g. reasoning_gym:chain_sum, or a mixture "
            "reasoning_gym:chain_sum+count_bits."
        )
    if len(set(tasks)) != len(tasks):
        raise ValueError(f"{name!r} names a task twice; name each task of a mixture once.")
    known = task_names()
    for task in tasks:
        _check_task(task, known)
    settings = dict(_DEFAULTS)
    options = {task: {} for task in tasks}
    weights = dict.fromkeys(tasks, 1.0)
    # Not URL decoding: "+" and "%" are literal ("operators=+,-").
    pairs = []
    for item in query.split("&") if query else []:
        key, equals, raw = item.partition("=")
        if not equals or not key:
            raise ValueError(
                f"Cannot read the option {item!r} of {name!r}: write options as key=value pairs separated by '&'."
            )
        pairs.append((key, raw))
    for key, raw in pairs:
        if raw == "":
            raise ValueError(f"Option {key!r} of {name!r} has no value: write {key}=<value>.")
        value = parse_value(raw)
        if key in RESERVED_OPTIONS:
            settings[key] = value
            continue
        task, dot, option = key.rpartition(".")
        if not dot:
            if len(tasks) > 1:
                raise ValueError(
                    f"Option {key!r} of the mixture {name!r} does not say which task it is for: write "
                    f"<task>.{key}=..., e.g. {tasks[0]}.{key}={raw}."
                )
            task, option = tasks[0], key
        if task not in tasks:
            raise ValueError(f"Option {key!r} of {name!r} is for task {task!r}, which is not one of {list(tasks)}.")
        if option == "weight":
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{key}={raw}: a task's weight must be a positive number.")
            weights[task] = float(value)
            continue
        fields = _config_fields(task)
        if option not in fields:
            close = difflib.get_close_matches(option, fields, n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise ValueError(
                f"Unknown option {option!r} for reasoning-gym task {task!r}.{hint} Its options are {fields}; ours are "
                f"{list(RESERVED_OPTIONS)}" + (" and <task>.weight" if len(tasks) > 1 else "") + "."
            )
        options[task][option] = value
    for key in ("size", "test_size", "seed"):
        if not isinstance(settings[key], int) or isinstance(settings[key], bool) or settings[key] < 0:
            raise ValueError(f"{key}={settings[key]!r} in {name!r} must be a non-negative integer.")
    if settings["size"] < 1 or settings["test_size"] < 1:
        raise ValueError(f"size and test_size in {name!r} must be at least 1.")
    if settings["size"] >= TEST_SEED_OFFSET:
        raise ValueError(f"size={settings['size']} is too large: keep it below {TEST_SEED_OFFSET}.")
    if settings["format"] not in FORMATS:
        raise ValueError(f"format={settings['format']!r} in {name!r}: use one of {list(FORMATS)}.")
    if settings["answer"] not in ANSWER_FORMATS:
        raise ValueError(
            f"answer={settings['answer']!r} in {name!r}: use one of {list(ANSWER_FORMATS)} (tags: reasoning-gym's "
            "<answer> block; first_number / last_number: a lenient read of a numeric answer)."
        )
    for key in ("strip_template", "compact", "stratify"):
        if not isinstance(settings[key], bool):
            raise TypeError(f"{key}={settings[key]!r} in {name!r}: use true or false.")
    if settings["dedup"] not in DEDUP_MODES:
        raise ValueError(f"dedup={settings['dedup']!r} in {name!r}: use one of {list(DEDUP_MODES)}.")
    if settings["compact"]:
        _check_compact(name, tasks, settings)
    return ReasoningGymSpec(tasks=tasks, options=options, weights=weights, **settings)


def _check_compact(name: str, tasks: tuple[str, ...], settings: dict) -> None:
    missing = [task for task in tasks if task not in COMPACT_QUESTIONS]
    if missing:
        raise ValueError(
            f"compact=true in {name!r}: the tasks {missing} have no compact renderer (only "
            f"{sorted(COMPACT_QUESTIONS)} do). Drop compact, or use strip_template=true to shorten their questions."
        )
    if settings["strip_template"]:
        raise ValueError(
            f"compact=true and strip_template=true in {name!r}: compact replaces the question, so there is nothing "
            "left to strip. Drop strip_template."
        )
    if settings["dedup"] != "near":
        raise ValueError(
            f"compact=true in {name!r} needs dedup=near: questions that differ only in their template become one "
            "prompt, so exact de-duplication of the questions would let a train prompt into the held-out split."
        )


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


def _common_affixes(questions: list[str]) -> tuple[str, str]:
    """The longest common prefix ending in whitespace and the longest common suffix starting with whitespace."""
    if len(set(questions)) < 2:
        return "", ""
    first, last = min(questions), max(questions)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    prefix = first[:n]
    prefix = prefix[: max(prefix.rfind(c) for c in " \n\t") + 1]
    reversed_questions = [q[::-1] for q in questions]
    first, last = min(reversed_questions), max(reversed_questions)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    suffix = first[:n][::-1]
    cut = min((suffix.find(c) for c in " \n\t" if c in suffix), default=-1)
    suffix = suffix[cut:] if cut >= 0 else ""
    return prefix, suffix


def _strip(question: str, prefix: str, suffix: str) -> str:
    if prefix and question.startswith(prefix) and len(question) > len(prefix) + len(suffix):
        question = question[len(prefix) :]
    if suffix and question.endswith(suffix) and len(question) > len(suffix):
        question = question[: -len(suffix)]
    return question.strip()


def _prompt(question: str, spec: ReasoningGymSpec):
    if spec.format == "standard":
        return question
    if spec.format == "chat":
        return [{"role": "user", "content": question}]
    from reasoning_gym.utils import SYSTEM_PROMPTS

    return [{"role": "system", "content": SYSTEM_PROMPTS["default"]}, {"role": "user", "content": question}]


def _rows(entries: list[dict], spec: ReasoningGymSpec, affixes: dict) -> dict:
    columns = {"prompt": [], "answer": [], "task": [], "entry": [], "task_options": [], "idx": []}
    lenient = spec.answer != "tags"
    if lenient:
        # Only then: a name without answer= keeps the columns (and the dataset's fingerprint) it always had.
        columns["answer_format"] = []
    for i, entry in enumerate(entries):
        task = _entry_task(entry, spec)
        if lenient and NUMBER.fullmatch(str(entry["answer"]).strip()) is None:
            raise ValueError(
                f"answer={spec.answer} reads a number, but the gold answer {entry['answer']!r} of a {task} problem is "
                "not one number: use answer=tags for this task (the lenient formats are for numeric answers)."
            )
        question = entry["question"]
        if spec.strip_template:
            question = _strip(question, *affixes.get(task, ("", "")))
        if spec.compact:
            question = COMPACT_QUESTIONS[task](entry)
        columns["prompt"].append(_prompt(question, spec))
        columns["answer"].append(str(entry["answer"]))
        columns["task"].append(task)
        columns["entry"].append(json.dumps(entry, default=str, sort_keys=True))
        columns["task_options"].append(json.dumps(spec.options[task], sort_keys=True))
        columns["idx"].append(i)
        if lenient:
            columns["answer_format"].append(spec.answer)
    return columns


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


# task -> the prompt of compact=true: the problem's data without the question's template.
COMPACT_QUESTIONS = {"countdown": compact_question}
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


def make_reasoning_gym_datasets(name_or_spec: "str | ReasoningGymSpec"):
    """A `DatasetDict` with ``train`` and ``test`` splits (TRL prompt-only format) for a ``reasoning_gym:`` name.

    The ``test`` split shares no question with ``train`` (see the module docstring for how). Deterministic given the
    name.
    """
    from datasets import Dataset, DatasetDict

    spec = parse_name(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec
    drawn = draw_splits(spec)
    affixes = {}
    if spec.strip_template:
        by_task: dict[str, list[str]] = {}
        for entry in drawn.train:
            by_task.setdefault(_entry_task(entry, spec), []).append(entry["question"])
        affixes = {task: _common_affixes(questions) for task, questions in by_task.items()}
    return DatasetDict(
        {
            "train": Dataset.from_dict(_rows(drawn.train, spec, affixes)),
            "test": Dataset.from_dict(_rows(drawn.test, spec, affixes)),
        }
    )


def _train_answers_by_key(drawn: SplitDraw, spec: ReasoningGymSpec) -> dict[tuple, set]:
    """The train problems' answers by `near_duplicate_key`: which held-out problems reorder a train problem."""
    answers: dict[tuple, set] = {}
    for entry in drawn.train:
        answers.setdefault(near_duplicate_key(entry, _entry_task(entry, spec)), set()).add(str(entry["answer"]))
    return answers


def near_duplicate_flags(name: str, start: int, stop: int) -> list[bool]:
    """Per held-out row ``start <= i < stop`` of the ``reasoning_gym:`` name, whether it is a reordering of a train
    problem (`near_duplicate_key`): a problem the model was warm-started on under another order, which a comparison
    of held-out results leaves out (the studies' pages, `trl_rlvr_ext.studies.report`)."""
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


def load_reasoning_gym(name: str):
    """`make_reasoning_gym_datasets` for a ``reasoning_gym:`` name (the hook of `trl_rlvr_ext.data`)."""
    return make_reasoning_gym_datasets(name)


__all__ = [
    "ANSWER_FORMATS",
    "INSTALL_HINT",
    "NUMBER",
    "PREFIX",
    "TEST_SEED_OFFSET",
    "ReasoningGymSpec",
    "SplitDraw",
    "composition_markdown",
    "draw_splits",
    "load_reasoning_gym",
    "make_reasoning_gym_datasets",
    "near_duplicate_flags",
    "near_duplicate_key",
    "parse_name",
    "problem_stratum",
    "split_composition",
    "split_composition_markdown",
    "task_names",
]
