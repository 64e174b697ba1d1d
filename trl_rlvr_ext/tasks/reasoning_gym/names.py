"""Reading a ``reasoning_gym:`` name: the options, their checks against reasoning-gym, `ReasoningGymSpec`."""

import dataclasses
import difflib
import re

from ..countdown import compact_question


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
# task -> the prompt of compact=true: the problem's data without the question's template.
COMPACT_QUESTIONS = {"countdown": compact_question}


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
