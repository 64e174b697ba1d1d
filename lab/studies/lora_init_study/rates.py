"""The ``lora_init`` study's reading of its runs: each method's rate chosen on the sweep (`choose_rates`,
`chosen_arms`), the extension of a grid whose best rate is at its edge, the training-health measures (collapse,
reward change, gradient-norm spikes, `stable`), the extra columns and the rate tables.
"""

import json
import math
import statistics
from pathlib import Path

from ..design import Column, Study, StudySizes, log_column, train_log_series
from ..markdown import mean_sd
from ..summary import size_flags
from .design import (
    CLAIM,
    COLLAPSE_FRACTION,
    METHODS,
    REWARD_WINDOW,
    SIZES,
    SPIKE_FACTOR,
    SWEEP_SEED,
    arm_name,
    ladder_of,
    rates_of,
    split_arm_name,
)


def choose_rates(results: list[dict], seed: int = 0) -> dict[str, str]:
    """Each method's chosen rate: the highest held-out pass@1 of ``seed`` over its swept rates; a tie goes to the lower
    rate (the smaller change to the base). Methods without any run of ``seed`` are left out."""
    scores: dict[str, list[tuple[float, str]]] = {}
    for result in results:
        parsed = split_arm_name(result["arm"])
        if parsed is None or result["seed"] != seed:
            continue
        method, rate = parsed
        scores.setdefault(method, []).append((result["pass_at_k"]["1"], rate))
    # max over (pass@1, -rate): the best pass@1, then the lowest rate
    return {
        method: max(runs, key=lambda run: (run[0], -float(run[1])))[1]
        for method, runs in sorted(scores.items(), key=lambda item: METHODS.index(item[0]))
    }


def extension_rates(results: list[dict], seed: int = SWEEP_SEED) -> dict[str, str]:
    """The grid extensions the sweep still needs: ``{method: rate}`` for each method whose best pass@1 on ``seed``
    (`choose_rates`) sits at the lowest or highest rate it ran, the next rate beyond it on its ladder. Fails, naming
    the method, when that edge is the ladder's end (widen `RATE_LADDER`)."""
    ran: dict[str, set[str]] = {}
    for result in results:
        parsed = split_arm_name(result["arm"])
        if parsed is not None and result["seed"] == seed:
            ran.setdefault(parsed[0], set()).add(parsed[1])
    needed = {}
    for method, rate in choose_rates(results, seed).items():
        ladder = ladder_of(method)
        unknown = sorted(ran[method] - set(ladder), key=float)
        if unknown:
            raise ValueError(f"{method} ran rate(s) {unknown}, which are not on its ladder {list(ladder)}.")
        index, lowest, highest = ladder.index(rate), min(ran[method], key=float), max(ran[method], key=float)
        step = -1 if rate == lowest else 1 if rate == highest else 0
        if step and len(ran[method]) == 1:
            raise ValueError(f"{method} ran one rate only ({rate}): run its grid first (--arms grid).")
        if not step:
            continue
        if not 0 <= index + step < len(ladder):
            raise ValueError(
                f"{method}'s best rate {rate} is the end of its ladder {list(ladder)}: widen RATE_LADDER before "
                "choosing."
            )
        needed[method] = ladder[index + step]
    return needed


def grid_arms(out_dir: str | Path, task: str) -> list[str]:
    """The sweep's first arms: the base and every method at each rate of its grid (`rates_of`)."""
    return ["base", *(arm_name(method, rate) for method in METHODS for rate in rates_of(method))]


def extend_arms(out_dir: str | Path, task: str) -> list[str]:
    """The base and the arms `extension_rates` still needs, from the sweep runs of ``task`` in ``out_dir`` (only the
    base, already run, once no method's best sits at an edge)."""
    results = load_results(out_dir, task)
    if not any(r["seed"] == SWEEP_SEED and split_arm_name(r["arm"]) for r in results):
        raise ValueError(
            f"No sweep run of {task!r} (seed {SWEEP_SEED}) under {out_dir}: run the grid first "
            f"(python -m lab study lora_init --tasks {task} --setting sweep --seeds {SWEEP_SEED} --arms grid "
            f"--out_dir {out_dir})."
        )
    return ["base", *(arm_name(method, rate) for method, rate in extension_rates(results).items())]


def load_results(out_dir: str | Path, task: str) -> list[dict]:
    """Every finished run of ``task`` under ``out_dir`` (``<out_dir>/<task>/<arm>/seed<k>/result.json``)."""
    return [json.loads(path.read_text()) for path in sorted(Path(out_dir, task).glob("*/seed*/result.json"))]


def chosen_arms(out_dir: str | Path, task: str = "number_sorting") -> list[str]:
    """The phase-2 arms: the base and each method at its chosen rate (from the seed-0 runs of ``task``)."""
    results = load_results(out_dir, task)
    chosen = choose_rates(results)
    if not chosen:
        raise ValueError(
            f"No seed-0 sweep run of {task!r} under {out_dir}: run phase 1 first "
            f"(python -m lab study lora_init --tasks {task} --seeds 0 --out_dir {out_dir})."
        )
    return ["base", *(arm_name(method, rate) for method, rate in chosen.items())]


def _rewards(result: dict) -> list[float]:
    return [v for _, v in train_log_series(result, "reward") if v is not None and not math.isnan(v)]


def final_reward(result: dict) -> float | None:
    """Mean of the last `REWARD_WINDOW` logged training rewards."""
    rewards = _rewards(result)
    return statistics.fmean(rewards[-REWARD_WINDOW:]) if rewards else None


def collapsed(result: dict) -> float | None:
    """1.0 if the final reward is below `COLLAPSE_FRACTION` of the first logged reward (the starting model's rollouts;
    0.0 when that is zero: nothing to lose)."""
    rewards = _rewards(result)
    if not rewards:
        return None
    return float(rewards[0] > 0 and final_reward(result) < COLLAPSE_FRACTION * rewards[0])


# "Stable" (claim 3) with a margin: a run is stable when its held-out pass@1 is at most `STABLE_MARGIN` below the mean
# pass@1 of the base's seeds; a method is stable at a rate when every run there is. Defined after the sweep's records
# were seen (the audit had named RLMO at 5e-3), so the page labels it exploratory; 5 points is about twice the spread
# of a trained arm's pass@1 over seeds here, so a drop past it is not evaluation noise.
STABLE_MARGIN = 0.05


def stable(result: dict, base_pass1: float) -> bool:
    """Whether the run's held-out pass@1 is at most `STABLE_MARGIN` below ``base_pass1`` (the base's mean)."""
    return base_pass1 - result["pass_at_k"]["1"] <= STABLE_MARGIN


def reward_change(result: dict) -> float | None:
    """The final reward minus the first logged reward (the starting model's rollouts; negative: the reward fell)."""
    rewards = _rewards(result)
    return final_reward(result) - rewards[0] if rewards else None


def grad_norm_spikes(result: dict) -> float | None:
    """Number of logged steps whose grad norm exceeds `SPIKE_FACTOR` times the run's median grad norm."""
    norms = [v for _, v in train_log_series(result, "grad_norm") if v is not None and not math.isnan(v)]
    if not norms:
        return None
    median = statistics.median(norms)
    return float(sum(norm > SPIKE_FACTOR * median for norm in norms))


def trainable_parameters(result: dict) -> float | None:
    return (result.get("parameters") or {}).get("trainable")


COLUMNS = [
    log_column("max grad_norm", "grad_norm", "max", digits=2),
    Column(f"grad-norm spikes (>{SPIKE_FACTOR:g}x median)", grad_norm_spikes, digits=1),
    Column(f"final reward (last {REWARD_WINDOW} logs)", final_reward),
    Column("reward change", reward_change),
    Column("collapsed", collapsed, digits=2),
    Column("trainable params", trainable_parameters, digits=0),
]


def rate_tables(task_name: str, rows: list[dict], out_dir: Path) -> list[str]:
    """Markdown: the whole sweep (seed 0, every run on disk) with the chosen rates, and the phase-2 command."""
    results = load_results(out_dir, task_name) or rows
    sweep = rows[0].get("setting") == "sweep"  # the validated design's sweep: its seed, its validation problems
    seed = SWEEP_SEED if sweep else 0
    seed0 = {r["arm"]: r for r in results if r["seed"] == seed}
    chosen = choose_rates(results, seed)
    where = f"seed {seed}, validation problems" if sweep else "seed 0"
    lines = [
        "",
        f"### Learning-rate sweep ({where}; chosen rate = highest pass@1, a tie goes to the lower rate; **bold**)",
        "",
        "| method | rate | pass@1 | max grad_norm | grad-norm spikes | final reward | reward change | collapsed | seeds run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for method in METHODS:
        for rate in ladder_of(method) if sweep else rates_of(method):
            name = arm_name(method, rate)
            if name not in seed0:
                continue
            r = seed0[name]
            mark = "**" if chosen.get(method) == rate else ""
            seeds = sorted(x["seed"] for x in results if x["arm"] == name)
            cells = [
                method,
                f"{mark}{rate}{mark}",
                f"{mark}{r['pass_at_k']['1']:.3f}{mark}",
                mean_sd([COLUMNS[0].value(r)], 2, keep_nan=True),
                mean_sd([grad_norm_spikes(r)], 0, keep_nan=True),
                mean_sd([final_reward(r)], keep_nan=True),
                mean_sd([reward_change(r)], keep_nan=True),
                mean_sd([collapsed(r)], 0, keep_nan=True),
                ",".join(map(str, seeds)),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    if chosen and sweep:
        try:
            pending = extension_rates(results)
            status = f"Grid extensions still to run (--arms extend): {pending}." if pending else "No extension left."
        except ValueError as error:  # the table is still written; the message says what the sweep lacks
            status = f"The sweep cannot choose yet: {error}"
        lines += ["", status]
    elif chosen:
        arms = ",".join(["base", *(arm_name(m, rate) for m, rate in chosen.items())])
        # the same sizes as the sweep, so that seed 0 is reused and the seeds are comparable
        quick = rows[0]["quick"]
        flags = (" --quick" if quick else "") + size_flags(_STUDY_SIZES, StudySizes(**rows[0]["sizes"]), quick)
        lines += [
            "",
            "Phase 2 (each method at its chosen rate, 3 seeds; seed 0 is reused):",
            "",
            f"    trl-rlvr-ext study lora_init --tasks {task_name} --seeds 0,1,2 --arms {arms} --out_dir {out_dir}{flags}",
        ]
    return lines + [""]


# only the sizes matter to size_flags
_STUDY_SIZES = Study("lora_init", CLAIM, {}, {}, sizes=SIZES)
