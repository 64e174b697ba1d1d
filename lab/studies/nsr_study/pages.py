"""The ``nsr`` study's evidence page (``docs/evidence/nsr.md``): its settings, the collapse column, how far past its
bound each clipped token is, and the choice of a clip regime on the calibration records (`choose_clip_regime`)."""

import itertools
import math
from pathlib import Path

import numpy as np

from trl_rlvr_ext.losses.off_policy import CLIPPED_HIGH_EDGES, CLIPPED_LOW_EDGES

from ..design import Column
from ..markdown import marked, table
from ..pages import MethodSummary, Page, PageSetting, arm_order, last_over_first_reward, load_records
from . import (
    CALIBRATION_COMMANDS,
    CALIBRATION_PREFIX,
    CLIP_CANDIDATES,
    CLIP_TARGET,
    choose_clip_regime,
    collapsed,
    signal_clipped_share,
)


CLIP_CALIBRATION_RECORDS = "docs/evidence/data/nsr/clip_calibration.jsonl.gz"


def clip_calibration_block(page: "Page", settings_records: dict[str, list[dict]], root: Path) -> dict[str, str]:
    """The NSR page's choice of a clip regime on countdown_compact (`nsr_study.choose_clip_regime`): each candidate's
    calibration run (stock clipping, the unreported seed, validation problems) with the diagnostics the rule reads,
    and the regime the rule picks. Before the calibration has run, says so."""
    path = root / CLIP_CALIBRATION_RECORDS
    if not path.exists():
        commands = "\n".join(f"- `{command}`" for command in CALIBRATION_COMMANDS)
        return {"clip_calibration": f"Declared, not run yet:\n\n{commands}"}
    records = load_records(path)
    chosen = choose_clip_regime(records)
    by_setting = {r.get("setting"): r for r in records}
    header = [
        "candidate",
        "regime",
        "clipped share (signal tokens, replayed steps)",
        "collapsed",
        "last / first reward",
        "validation pass@1",
    ]
    rows = []
    for name, candidate in CLIP_CANDIDATES.items():
        record = by_setting[CALIBRATION_PREFIX + name]
        share, reward_ratio = signal_clipped_share(record), last_over_first_reward(record)
        rows.append(
            [
                marked(name, chosen),
                candidate.description,
                "n/a" if share is None else f"{share:.4f}",
                f"{collapsed(record):.0f}",
                "n/a" if reward_ratio is None else f"{reward_ratio:.3f}",
                f"{record['pass_at_k']['1']:.3f}",
            ]
        )
    target = f"{CLIP_TARGET * 100:.0f} % of the signal tokens"
    verdict = (
        f"The rule's choice: **{chosen}** (the first candidate to clip at least {target} without collapsing)."
        if chosen
        else f"No candidate clipped {target} without collapsing: no regime was chosen."
    )
    commands = "\n".join(f"- `{r['command']}` ({r['wall_seconds']:.0f} s)" for r in records)
    candidates = "\n".join(table(header, rows))
    return {"clip_calibration": f"{candidates}\n\n{verdict}\n\nCommands:\n\n{commands}"}


def _edge_labels(edges: tuple[float, ...]) -> list[str]:
    return [f"[{lo:g}, {hi:g})" for lo, hi in itertools.pairwise(edges)]


def near_bound_rescue_share(shares, edges: tuple[float, ...], side: str) -> float:
    """Of NSR's expected rescue weight over the clipped tokens binned by ``edges`` (shares per bin), the share in the
    bins within 25 % of the bound: low side x = r / (1 − ε_low) >= 0.75, high side y = r / (1 + ε_high) < 1.25. Each
    bin's tokens sit at its midpoint (an open last bin at its lower edge); the weight per token is the rule's
    `nsr_expected_weight` at ε = 0 on the normalised ratio (x²/2, 1/(2y²))."""
    import torch

    from trl_rlvr_ext.losses.clip_recovery import nsr_expected_weight

    points = [lo if math.isinf(hi) else (lo + hi) / 2 for lo, hi in itertools.pairwise(edges)]
    weights = nsr_expected_weight(torch.tensor(points, dtype=torch.float64), 0.0, 0.0, side).numpy()
    mass = np.asarray(shares, dtype=float) * weights
    near = np.array([lo >= 0.75 if side == "low" else hi <= 1.25 for lo, hi in itertools.pairwise(edges)])
    return float(mass[near].sum() / mass.sum()) if mass.sum() else float("nan")


def clipped_ratio_block(page: "Page", setting: PageSetting, task: str, records: list[dict]) -> dict[str, str]:
    """How far past its bound each clipped token is (the off-policy diagnostics' histograms, ``off_policy/clipped_
    {low,high}_hist{k}``): per arm and side, the clipped tokens with a training signal counted over every logged
    step and seed of the runs that log them, and their share per bin of r / bound. Fresh-batch steps (r ≡ 1) add
    nothing to a count. No block where no run logs them."""
    sides = (
        ("low", "r / (1 − ε_low), A < 0", CLIPPED_LOW_EDGES),
        ("high", "r / (1 + ε_high), A > 0", CLIPPED_HIGH_EDGES),
    )
    lines = []
    for side, label, edges in sides:
        rows, near = [], []
        for arm in arm_order(page, records):
            runs = [r for r in records if r["arm"] == arm and setting.matches(r)]
            keys = [f"off_policy/clipped_{side}_hist{k}" for k in range(len(edges) - 1)]
            logged = [r for r in runs if any(keys[0] in e for e in r.get("train_log", []))]
            if not logged:
                continue
            counts = np.array(
                [[e.get(key, 0.0) for key in keys] for r in logged for e in r["train_log"] if keys[0] in e]
            )
            total = counts.sum(0)
            shares = total / total.sum() if total.sum() else total
            seeds = ",".join(str(r["seed"]) for r in sorted(logged, key=lambda r: r["seed"]))
            near.append(f"{arm} {near_bound_rescue_share(shares, edges, side):.2f}")
            rows.append([f"{arm} ({total.sum():.0f} tokens, seeds {seeds})", *(f"{v:.2f}" for v in shares)])
        if rows:
            lines += [f"Clipped on the {side} side, share per bin of {label}:", ""]
            lines += table(["arm", *_edge_labels(edges)], rows) + [""]
            lines += [f"NSR's expected rescue weight within 25 % of the bound ({side} side): {', '.join(near)}.", ""]
    if not lines:
        return {}
    lines.append(
        "Tokens: the clipped tokens with a non-zero advantage, summed over every step and the seeds listed (seeds "
        "without the diagnostics are left out). A share near the bound (the low side's last bin, the high side's "
        "first) is a token just past the clip. NSR's expected rescue weight within 25 %: of the gradient weight NSR's "
        "rescue gives these tokens in expectation (its rule's E[u 1{rescued}], `nsr_expected_weight`: x²/2 for x = r / (1 − ε_low), 1/(2y²) for "
        "y = r / (1 + ε_high)), the share on tokens within 25 % of the bound (x >= 0.75, y < 1.25), from the bins' "
        "midpoints (the open last high bin at its lower edge, which overstates its weight: the high side's share is "
        "then a lower bound)."
    )
    return {"clipped_ratios": "\n".join(lines)}


# The verdicts this page's claims had under the previous rule (v2: nested bootstrap and seed-t interval; by claim, or
# by the claim its parts belong to): the index shows what the crossed rule (v3) changed.
PREVIOUS_VERDICTS = {
    "NSR raises pass@1 over DAPO's clipping": "mixed (3 inconclusive, 6 not reproduced); exploratory (chosen after looking): inconclusive",
    "The stochastic rescue beats its deterministic expectation": "not reproduced; exploratory (chosen after looking): mixed (2 inconclusive, 1 not reproduced)",
    "ACPO raises pass@1 over DAPO's clipping": "mixed (4 not reproduced, 1 inconclusive)",
    "NSR on ACPO's bounds raises pass@1 over ACPO": "mixed (4 not reproduced, 1 inconclusive)",
    "DelTA raises pass@1 over DAPO": "mixed (4 not reproduced, 1 inconclusive)",
}

# The method a claim is about, where it is not the page's own (the page also holds the ACPO / DelTA extension).
METHOD_OF_ARM = {"acpo": "ACPO", "acpo_nsr": "ACPO + NSR", "delta": "DelTA"}
PAGE = Page(
    "nsr",
    "docs/evidence/nsr.md",
    (
        # lr 3e-4 with two passes was picked from single seed-0 runs of `none` on the two reasoning-gym bases that
        # left no records (the page's calibration without records): exploratory there; on the toy, countdown and
        # countdown_compact it was declared before their runs
        PageSetting(
            "lr3e-4",
            "lr 3e-4",
            ("docs/evidence/data/nsr/lr3e-4.jsonl.gz",),
            {"learning_rate": 3e-4},
            exploratory_tasks=dict.fromkeys(
                ("chain_sum", "number_sorting"),
                "chosen after looking: the regime was picked from seed-0 runs of `none` on this task that left no "
                "records",
            ),
        ),
        # the ACPO / DelTA extension: ACPO's two regimes, pre-registered in nsr_study (fresh seeds 10-14)
        PageSetting(
            "updates16",
            "16 updates per rollout, lr 3e-4",
            ("docs/evidence/data/nsr/updates16.jsonl.gz",),
            {"steps_per_generation": 8},
        ),
        PageSetting(
            "updates2",
            "2 updates per rollout, lr 3e-4",
            ("docs/evidence/data/nsr/updates2.jsonl.gz",),
            {"steps_per_generation": 2},
        ),
        # countdown_compact's regime, chosen by nsr_study.choose_clip_regime on the calibration records (seed 100,
        # validation problems), then run on fresh seeds 20-24
        PageSetting(
            "updates32_lr6e-4",
            "32 updates per rollout, lr 6e-4 (chosen on calibration)",
            ("docs/evidence/data/nsr/updates32_lr6e-4.jsonl.gz",),
            {"max_steps": 65, "learning_rate": 6e-4},
        ),
        PageSetting(
            "lr1e-4",
            "lr 1e-4",
            ("docs/evidence/data/nsr/lr1e-4.jsonl",),
            {"learning_rate": 1e-4},
            exploratory="chosen after looking: added after every arm degraded at lr 3e-4, not confirmed on fresh "
            "seeds",
        ),
    ),
    "NSR",
    columns=(Column("last / first reward (collapse below 0.5)", last_over_first_reward, 3),),
    extra_blocks=clipped_ratio_block,
    page_blocks=clip_calibration_block,
    method_summaries=(
        MethodSummary("docs/methods/nsr.md", "nsr", lambda c: c.arm in ("nsr", "acpo_nsr")),
        MethodSummary("docs/methods/acpo.md", "nsr", lambda c: c.arm in ("acpo", "acpo_nsr")),
        MethodSummary("docs/methods/delta.md", "nsr", lambda c: c.arm == "delta"),
    ),
    previous_verdicts=PREVIOUS_VERDICTS,
    method_of_arm=METHOD_OF_ARM,
    details=(
        "docs/evidence/nsr/results.md",
        "docs/evidence/nsr/acpo.md",
        "docs/evidence/nsr/heldout.md",
        "docs/evidence/nsr/heldout_compact.md",
    ),
    splits_by_task=True,
    title="NSR, ACPO and DelTA where the clip binds",
)
