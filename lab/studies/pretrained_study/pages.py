"""The ``pretrained`` study's evidence page (``docs/evidence/pretrained.md``): the declared design rendered from its
code (arms, sizes, seeds, claims) with the pilot's minimum detectable effects rendered from the pilot's records, and
how far the runs have got (done and left per arm, the commands that resume them)."""

import json
from pathlib import Path

import numpy as np

from ..markdown import mean_sd, table
from ..pages import MethodSummary, Page, PageSetting
from ..tasks import REAL_MODEL_SELECTION
from .design import (
    CLAIMS,
    COMMANDS,
    GROUPS,
    LORA_SETTINGS,
    NOT_RUN,
    RECORDS,
    RELEX_HISTORY,
    RELEX_SOURCE,
    RELEX_TARGET,
    SEEDS,
    SELF_ARMS,
    SELF_CLAIMS,
    SELF_PROMPTS_MATCHED,
    SIZES,
    pilot_mde,
)


# The pilot: the demo's two seeds of stock GRPO + LoRA on the same task and sizes, 8 samples per problem.
PILOT_RECORDS = "docs/evidence/data/real_model_demo.jsonl"
PILOT_SAMPLES = (8, 16, SIZES.eval_samples)


def _pilot(root: Path) -> list[dict]:
    lines = (root / PILOT_RECORDS).read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return [r for r in records if r["method"] == "none" and not r["settings"]["quick"]]


def _default_clip() -> float:
    """The clip every arm without a clip rule of its own trains with: TRL's default ε, symmetric (the design sets no
    ``epsilon_high``, and TRL's default for it is none, which means ε)."""
    from trl import GRPOConfig

    fields = GRPOConfig.__dataclass_fields__
    if fields["epsilon_high"].default is not None:
        raise RuntimeError("TRL's default epsilon_high is no longer None: the design's clip is not symmetric; say so.")
    return fields["epsilon"].default


def _claimed_size(claim) -> str:
    if claim.margin is not None:
        return f"{claim.metric} not worse by more than {claim.margin:.3f}"
    return f"{claim.metric} {'+' if claim.direction > 0 else '-'}{claim.threshold:.3f}"


def _claim_line(claim) -> str:
    exploratory = f"; exploratory, {claim.exploratory}" if claim.exploratory else ""
    return f"{claim.name} ({_claimed_size(claim)}, {claim.reason}{exploratory})"


def design_block(pilot: list[dict]) -> dict[str, str]:
    """The design as its code declares it, and the minimum detectable effects of the ``pilot`` (its records)."""
    mdes = {samples: pilot_mde(pilot, samples) for samples in PILOT_SAMPLES}
    adapter = (
        f"rank {LORA_SETTINGS['r']}, alpha {LORA_SETTINGS['lora_alpha']}, {', '.join(LORA_SETTINGS['target_modules'])} "
        f"of decoder layers {LORA_SETTINGS['layers_to_transform'][0]}-{LORA_SETTINGS['layers_to_transform'][-1]}"
    )
    lines = [
        f"- **Seeds**: {', '.join(map(str, SEEDS))} (fresh: the pilot's were 0 and 1).",
        (
            f"- **GRPO + LoRA, every trained arm**: {SIZES.max_steps} steps at learning rate {SIZES.learning_rate:g} "
            f"(constant), {SIZES.num_prompts} prompts x {SIZES.num_generations} completions per generation batch, "
            f"{SIZES.steps_per_generation} optimiser steps per batch (rollouts reused), loss `dapo` (token-level), clip "
            f"ε = {_default_clip()} on both sides (TRL's default: DAPO's clip-higher is not used), beta 0; adapter: "
            f"{adapter}."
        ),
        (
            f"- **Evaluation**: held-out pass@1 on {SIZES.eval_problems} problems x {SIZES.eval_samples} samples, "
            "sampling seed 1000 + seed, the same for every arm of a seed."
        ),
        "- **Arms, in run order**: "
        + "; ".join(f"{group}: {', '.join(f'`{arm}`' for arm in arms)}" for group, arms in GROUPS.items())
        + ".",
        "- **Pilot** (`"
        + PILOT_RECORDS
        + f"`, {len(pilot)} runs of stock GRPO + LoRA, seeds "
        + ", ".join(str(r["seed"]) for r in pilot)
        + "): minimum detectable effect of one arm against another with "
        + f"{len(SEEDS)} seeds x {SIZES.eval_problems} problems: "
        + ", ".join(f"{mde:.3f} at {samples} samples" for samples, mde in mdes.items())
        + " per problem (`pretrained_study.design.pilot_mde`).",
        "- **Claims** (the metric and the effect size each excludes): "
        + "; ".join(_claim_line(c) for c in CLAIMS)
        + ".",
        "- **Commands**, in order (each resumes: a finished run is loaded, not redone): "
        + "; ".join(f"`{command}`" for command in COMMANDS)
        + f"; then `trl-rlvr-ext study export pretrained outputs/studies/pretrained {RECORDS}` and "
        "`trl-rlvr-ext study report pretrained`.",
    ]
    lines.append("- **Not run**: " + "; ".join(f"{what}: {why}" for what, why in NOT_RUN.items()) + ".")
    return {"design": "\n".join(lines)}


def ceiling_block(page: Page, settings_records: dict[str, list[dict]], root: Path) -> dict[str, str]:
    """SELF's boundary group at the largest k the design evaluates (K = its samples per problem): the pass@K of the
    base, stock GRPO + LoRA and the group's arms, over the seeds each has run, and the problems each solves in no
    sample on any seed (where a boundary could shrink or grow)."""
    k = str(SIZES.eval_samples)
    rows = []
    for arm in ("base", "lora", *SELF_ARMS, SELF_PROMPTS_MATCHED):
        runs = sorted((r for r in settings_records["main"] if r["arm"] == arm), key=lambda r: r["seed"])
        if runs:
            values = [r["pass_at_k"][k] for r in runs]
            unsolved = sum(all(r["num_correct"][i] == 0 for r in runs) for i in range(len(runs[0]["num_correct"])))
            rows.append([f"`{arm}`", ", ".join(str(r["seed"]) for r in runs), mean_sd(values), str(unsolved)])
    if not rows:
        return {"ceiling": "Neither the base nor stock GRPO + LoRA has run yet."}
    header = ["arm", "seeds", f"pass@{k} (mean ± sd over seeds)", "problems unsolved on every seed"]
    return {"ceiling": "\n".join(table(header, rows))}


def progress_block(page: Page, settings_records: dict[str, list[dict]], root: Path) -> dict[str, str]:
    """Per arm: the declared seeds that have a record and those left; a claim's verdict waits for all of them."""
    records = settings_records["main"]
    rows, left_total = [], 0
    for group, arms in GROUPS.items():
        for arm in arms:
            done = sorted({r["seed"] for r in records if r["arm"] == arm and r["seed"] in SEEDS})
            left = [seed for seed in SEEDS if seed not in done]
            left_total += len(left)
            rows.append([group, f"`{arm}`", ", ".join(map(str, done)) or "-", ", ".join(map(str, left)) or "-"])
    lines = table(["group", "arm", "seeds done", "seeds left"], rows)
    total = sum(len(arms) for arms in GROUPS.values()) * len(SEEDS)
    status = (
        "The design has finished: every claim is judged on all its declared seeds."
        if not left_total
        else f"**Not finished: {left_total} of {total} runs left.** A claim is judged once both its arms have run "
        "every declared seed; until then it reads `pending`. The commands above resume where the runs stopped."
    )
    return {"progress": "\n".join([*lines, "", status])}


def seed_spread(arm_rates: dict[int, np.ndarray], baseline_rates: dict[int, np.ndarray], samples: int):
    """The spread over seeds of one comparison's per-seed mean difference of pass@1 (arm − baseline, over the same
    problems), against the spread that sampling alone would give it: ``(realised sd, sampling-only sd)``. The
    sampling-only sd is the root of the mean over seeds of the binomial variance of the per-seed mean difference,
    Σ_problems [p_a(1 − p_a) + p_b(1 − p_b)] / (samples − 1) / problems² (the unbiased within-run estimate). Their
    ratio says how much the training seed adds beyond the evaluation's sampling noise: the pilot assumed nothing."""
    seeds = sorted(set(arm_rates) & set(baseline_rates))
    if len(seeds) < 2:
        raise ValueError(f"The spread over seeds needs at least 2 seeds both arms ran; got {seeds}.")
    differences = [float((arm_rates[s] - baseline_rates[s]).mean()) for s in seeds]
    binomial = [
        float((a * (1 - a) + b * (1 - b)).sum()) / (samples - 1) / a.size**2
        for a, b in ((arm_rates[s], baseline_rates[s]) for s in seeds)
    ]
    return float(np.std(differences, ddof=1)), float(np.mean(binomial)) ** 0.5


def sizing_block(settings_records: dict[str, list[dict]], pilot: list[dict]) -> dict[str, str]:
    """The pilot's sizing checked against the runs: for every pass@1 claim whose arms have run all the declared seeds,
    the realised spread over seeds of its per-seed mean difference and the spread sampling alone would give it
    (`seed_spread`). The claims table's MDEs are the rule's; this block says why they differ from the pilot's."""
    records = settings_records["main"]
    rates = {(r["arm"], r["seed"]): np.asarray(r["num_correct"]) / r["num_samples"] for r in records}
    rows = []
    for claim in CLAIMS:
        if claim.metric != "pass@1":  # the pilot sized pass@1; group b's pass@32 claims are not its
            continue
        if not all((arm, seed) in rates for arm in (claim.arm, claim.baseline) for seed in SEEDS):
            continue
        realised, sampling = seed_spread(
            {s: rates[(claim.arm, s)] for s in SEEDS},
            {s: rates[(claim.baseline, s)] for s in SEEDS},
            SIZES.eval_samples,
        )
        rows.append(
            [f"{claim.arm} − {claim.baseline}", f"{realised:.3f}", f"{sampling:.3f}", f"{realised / sampling:.1f}"]
        )
    if not rows:
        return {"sizing": "No claim has run all its declared seeds yet."}
    mde = pilot_mde(pilot, SIZES.eval_samples)
    lines = table(["comparison", "sd over seeds of the mean difference", "sampling alone", "ratio"], rows)
    lines += [
        "",
        (
            f"The pilot's MDE at {SIZES.eval_samples} samples ({mde:.3f}, the design above) assumed that the training seed "
            "adds nothing beyond the evaluation's sampling noise (ratio 1); the claims table's MDEs are computed from these "
            "runs' own variance, at the ratios above."
        ),
    ]
    return {"sizing": "\n".join(lines)}


def relex_block(page: Page, settings_records: dict[str, list[dict]], root: Path) -> dict[str, str]:
    """Group f per seed: held-out pass@1 of the steps RELEX fits (the source arm), of its extrapolation and of the
    whole run, and how well the fit holds the trajectory (RELEX's variance report over the adapter's tensors: the
    share of each tensor's trajectory its rank-1 subspace explains, and the R² of the line through its coefficients,
    medians over tensors)."""
    runs = {(r["arm"], r["seed"]): r for r in settings_records["main"]}
    rows = []
    for seed in SEEDS:
        relex = runs.get(("relex", seed))
        if relex is None:
            continue
        summary = relex["extrapolation"]["report"]["summary"]
        cells = [str(seed)]
        for arm in (RELEX_SOURCE, "relex", "lora"):
            cells.append(f"{runs[(arm, seed)]['pass_at_k']['1']:.3f}" if (arm, seed) in runs else "-")
        cells += [f"{summary['relex/explained_median']:.3f}", f"{summary['relex/r2_median']:.3f}"]
        rows.append(cells)
    if not rows:
        return {"relex": "No RELEX run yet."}
    header = [
        "seed",
        f"pass@1, {RELEX_HISTORY} steps (`{RELEX_SOURCE}`)",
        f"pass@1, RELEX to step {RELEX_TARGET} (`relex`)",
        f"pass@1, {RELEX_TARGET} steps (`lora`)",
        "explained by rank 1 (median over tensors)",
        "R² of the line (median over tensors)",
    ]
    return {"relex": "\n".join(table(header, rows))}


def pretrained_page_blocks(page: Page, settings_records: dict[str, list[dict]], root: Path) -> dict[str, str]:
    pilot = _pilot(root)  # read once: the design and the sizing both use it
    return {
        **design_block(pilot),
        **progress_block(page, settings_records, root),
        **sizing_block(settings_records, pilot),
        **ceiling_block(page, settings_records, root),
        **relex_block(page, settings_records, root),
    }


PAGE = Page(
    "pretrained",
    "docs/evidence/pretrained.md",
    (PageSetting("main", "the declared design", (RECORDS,), seeds=SEEDS, selected_on_test=REAL_MODEL_SELECTION),),
    "the real model",
    page_blocks=pretrained_page_blocks,
    method_summaries=(
        MethodSummary(
            "docs/methods/lora_init.md", "pretrained", lambda c: c.arm in ("rlpo", "rlmo", "pissa", "milora")
        ),
        MethodSummary("docs/methods/nsr.md", "pretrained", lambda c: c.arm == "nsr"),
        MethodSummary("docs/methods/acpo.md", "pretrained", lambda c: c.arm == "acpo"),
        MethodSummary("docs/methods/delta.md", "pretrained", lambda c: c.arm == "delta"),
        MethodSummary("docs/methods/rsi.md", "pretrained", lambda c: c.arm == "rsi_s"),
        MethodSummary("docs/methods/popo.md", "pretrained", lambda c: c.arm == "popo"),
        MethodSummary("docs/methods/relex.md", "pretrained", lambda c: c.arm == "relex"),
        MethodSummary("docs/methods/self_curation.md", "pretrained", lambda c: c in SELF_CLAIMS),
    ),
    method_of_arm={
        "rlpo": "RLPO / RLMO",
        "rlmo": "RLPO / RLMO",
        "pissa": "RLPO / RLMO",
        "milora": "RLPO / RLMO",
        "nsr": "NSR",
        "acpo": "ACPO",
        "delta": "DelTA",
        "rsi_s": "RSI-S",
        "popo": "POPO",
        "relex": "RELEX",
        "self": "SELF",
    },
    # group b's premises (the base above the trivial policy, GRPO below the base) are SELF's claims too
    method_of_claim=dict.fromkeys((c.name for c in SELF_CLAIMS), "SELF"),
    title="The seed claims on the real model",
)
