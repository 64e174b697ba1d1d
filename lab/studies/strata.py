"""Results per stratum of a held-out set: Pass@k of study records on each stratum of the problems they evaluated.

Where a held-out split does not match the train split's composition (`trl_rlvr_ext.tasks.reasoning_gym
.split_composition`: the study presets' chain_sum has 99 three-term problems out of 100 against half of train), the
pooled Pass@k hides which problems moved. `stratum_pass_at_k` splits a record's ``num_correct`` by the stratum of each
evaluated problem; `stratum_table_markdown` renders mean ± sd over seeds per arm and stratum.
"""

import statistics


def stratum_pass_at_k(record: dict, eval_strata: list[str], ks=None) -> dict[str, dict]:
    """``{stratum: {"problems": n, "pass_at_k": {k: value}}}`` of one record; ``eval_strata[i]`` is the stratum of its
    ``i``-th evaluated problem (the record's ``num_correct`` order). ``ks``: default 1, 2, 4, ... up to n."""
    from trl_rlvr_ext.evaluation.estimators import pass_at_k_curve

    if len(eval_strata) != len(record["num_correct"]):
        raise ValueError(
            f"{len(eval_strata)} strata for a record of {len(record['num_correct'])} problems: give the strata of "
            "exactly the problems the record evaluated (split_composition(name, eval_problems)['eval_strata'])."
        )
    out = {}
    for label in dict.fromkeys(sorted(eval_strata)):
        counts = [c for c, s in zip(record["num_correct"], eval_strata) if s == label]
        curve = pass_at_k_curve([record["num_samples"]] * len(counts), counts, ks)
        out[label] = {"problems": len(counts), "pass_at_k": {str(k): v for k, v in curve.items()}}
    return out


def _setting(record: dict) -> tuple:
    sizes = record.get("sizes", {})
    return sizes.get("learning_rate"), sizes.get("max_steps")


def stratum_table_markdown(records: list[dict], eval_strata: list[str], ks=(1, 16, 64, 256)) -> str:
    """A markdown table: one row per (arm, stratum) of ``records`` (one task's, one evaluation set), Pass@k mean ± sd
    over the arm's seeds; an arm recorded at several learning rates or step counts gets rows per setting, and a run
    recorded twice counts once. ``ks`` beyond the records' samples are left out."""
    ks = [k for k in ks if all(k <= r["num_samples"] for r in records)]
    lines = ["| arm | stratum | problems | seeds | " + " | ".join(f"pass@{k}" for k in ks) + " |"]
    lines.append("|---|---|---|---|" + "---|" * len(ks))
    unique = {}  # a run recorded twice (the same base evaluation in two settings' files) counts once
    for r in records:
        unique.setdefault((r["arm"], r["seed"], _setting(r), tuple(r["num_correct"])), r)
    groups: dict[str, list[dict]] = {}
    for r in unique.values():
        groups.setdefault(r["arm"], []).append(r)
    labelled = {}
    for arm, runs in groups.items():  # an arm run in several settings (learning rate, steps) gets a row per setting
        settings = list(dict.fromkeys(_setting(r) for r in runs))
        for setting in settings:
            label = arm if len(settings) == 1 else f"{arm} @ lr {setting[0]}, {setting[1]} steps"
            labelled[label] = [r for r in runs if _setting(r) == setting]
    for arm, runs in labelled.items():
        per_run = [stratum_pass_at_k(r, eval_strata, ks) for r in runs]
        for label, first in per_run[0].items():
            cells = []
            for k in ks:
                values = [p[label]["pass_at_k"][str(k)] for p in per_run]
                sd = f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else ""
                cells.append(f"{statistics.fmean(values):.3f}{sd}")
            seeds = ",".join(str(r["seed"]) for r in runs)
            lines.append(f"| {arm} | {label} | {first['problems']} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
