"""The ``is_dpo`` study's claim and its pre-declared comparisons (`CLAIMS`, `MATCHED_KL_CLAIMS`)."""

from .. import base_steps
from ..frontier import MatchedKLClaim
from ..verdicts import Claim
from .design import PRETRAINED_SETTING


CLAIM = (
    "IS-DAA (arXiv 2506.08681) claims that offline DPO over-optimises at low β (held-out gold accuracy falls while "
    "KL(π_θ || π_ref) grows) and that the clipped importance weight π_θ/π_D gives a better gold-vs-KL frontier. "
    "Preference pairs: the base model's own samples (chosen correct, rejected wrong), behaviour log-probs scored "
    "with score-behavior. Gold: held-out greedy accuracy and pass@1; KL: mean over policy samples of "
    "Σ_t (log π_θ − log π_ref). Final models: unbiased Pass@k on held-out problems, samples at temperature 1."
)


# The pre-declared comparisons the evidence page judges (lab.studies.verdicts). The paper states its claims
# as a frontier (gold against KL) and gives no effect size in pass@1 units, so each has a smallest effect of interest.
# Its main claim, a better frontier *at matched KL*, is not among them: the final models sit at different KL, and the
# frontier points do not overlap densely enough to pair them (the page shows the points without a verdict). Claim 2
# compares the arms at the same step budget instead, which is a different, weaker claim. The dense setting judges the
# main claim too, by interpolation at declared KL values (MATCHED_KL_CLAIMS, lab.studies.frontier).
_TWO_POINTS = "2 pass@1 points is the smallest change taken to matter (no pass@1 size in the paper)"


_OVER_OPTIMISES = [
    (f"1a. DPO at β = {beta} ends below the base (over-optimisation)", f"dpo_b{beta}", "base") for beta in (0.01, 0.1)
] + [("1b. DPO at β = 0.01 ends below DPO at β = 0.1", "dpo_b0.01", "dpo_b0.1")]


# The page settings of the toy bases' designs (claims 1 and 2 were declared for them; the real model's setting has its
# own claims, 6 and 7, so that its parts do not enter the verdicts these claims had before it existed)
# the dense design on each validated base, and the same at the rate chosen on that base (rates.CONFIRM_RATE_SETTINGS)
_VALIDATED = tuple(base_steps.validated_setting(task) for task in base_steps.VALIDATED_TASKS)
_VALIDATED_AT_CHOSEN_RATE = tuple(f"{setting}_lr1e-4" for setting in _VALIDATED)
_TOY_BASES = ("main", "dense", *_VALIDATED, *_VALIDATED_AT_CHOSEN_RATE)


CLAIMS = [
    Claim(
        name,
        arm=arm,
        baseline=baseline,
        metric="pass@1",
        direction=-1,
        smallest_effect=0.02,
        reason=_TWO_POINTS,
        part_of="1. DPO over-optimises, most at small β",
        settings=_TOY_BASES,
    )
    for name, arm, baseline in _OVER_OPTIMISES
] + [
    Claim(
        f"2. IS-DPO ends above DPO at β = {beta} after the same steps (not at matched KL)",
        arm=f"isdpo_b{beta}",
        baseline=f"dpo_b{beta}",
        metric="pass@1",
        smallest_effect=0.02,
        reason=_TWO_POINTS,
        part_of="2. IS-DPO ends above DPO at the same step budget",
        settings=_TOY_BASES,
    )
    for beta in (0.01, 0.1)
]


# The ``dense`` setting's comparisons, declared before its runs (DENSE_SEEDS, never run before). Claims 3 ask whether the
# over-optimisation claim 1 only says that DPO was run too long or too fast: DPO stopped at its best validation step,
# and DPO at a third of the learning rate. Claims 4 ask whether IS-DPO still ends above those better-tuned baselines.
_DENSE = ("dense",)


_BETTER_DPO = [
    ("3a. Early-stopped DPO at β = 0.01 ends above DPO at β = 0.01", "dpo_b0.01_es", "dpo_b0.01"),
    ("3b. DPO at β = 0.01 and lr 1e-5 ends above DPO at lr 3e-5", "dpo_b0.01_lr1e-5", "dpo_b0.01"),
    ("4a. IS-DPO at β = 0.01 ends above early-stopped DPO", "isdpo_b0.01", "dpo_b0.01_es"),
    ("4b. IS-DPO at β = 0.01 ends above DPO at lr 1e-5", "isdpo_b0.01", "dpo_b0.01_lr1e-5"),
]


CLAIMS += [
    Claim(
        name,
        arm=arm,
        baseline=baseline,
        metric="pass@1",
        smallest_effect=0.02,
        reason=_TWO_POINTS,
        settings=_DENSE,
        part_of=(
            "3. Better-tuned DPO ends above DPO at β = 0.01"
            if name.startswith("3")
            else "4. IS-DPO ends above the better-tuned DPO baselines"
        ),
    )
    for name, arm, baseline in _BETTER_DPO
]


# The real pretrained model's claims (design.PRETRAINED_SETTING, declared with it before its runs): claims 1a and 2 at
# β = 0.01 on SmolLM2-135M-Instruct's own samples.
CLAIMS += [
    Claim(
        "6. On the real model, DPO at β = 0.01 ends below the base (over-optimisation)",
        arm="dpo_b0.01",
        baseline="base",
        metric="pass@1",
        direction=-1,
        smallest_effect=0.02,
        reason=_TWO_POINTS,
        settings=(PRETRAINED_SETTING,),
    ),
    Claim(
        "7. On the real model, IS-DPO ends above DPO at β = 0.01 after the same steps",
        arm="isdpo_b0.01",
        baseline="dpo_b0.01",
        metric="pass@1",
        smallest_effect=0.02,
        reason=_TWO_POINTS,
        settings=(PRETRAINED_SETTING,),
    ),
]


# The paper's main claim, a better frontier at matched KL (lab.studies.frontier), on the test problems'
# frontier. The grid is declared here, before the dense runs: it is where the records' seeds 0-2 show both arms at
# β = 0.01 (IS-DPO ends at KL 0.96-1.34 after 120 steps, DPO passes KL 1 within its first 20-40 steps); beyond 1.0
# IS-DPO has no point, and gold_at_kl never extrapolates.
MATCHED_KL_GRID = (0.25, 0.5, 0.75, 1.0)


_GOLD_POINTS = "2 accuracy points, like the study's pass@1 claims (no effect size in the paper)"


MATCHED_KL_CLAIMS = [
    MatchedKLClaim(
        f"5. IS-DPO above {baseline} at matched KL ({metric})",
        arm=arm,
        baseline=baseline,
        metric=metric,
        smallest_effect=0.02,
        reason=_GOLD_POINTS,
        # the dense design on number_sorting's chosen base too (declared with its IS-DPO arms, before they ran), and
        # there at the rate chosen on that base (declared with its runs, before they ran)
        settings=_DENSE + _VALIDATED + _VALIDATED_AT_CHOSEN_RATE,
    )
    for arm, baseline in (
        ("isdpo_b0.01", "dpo_b0.01"),
        ("isdpo_b0.01", "dpo_b0.01_lr1e-5"),
        ("isdpo_b0.1", "dpo_b0.1"),
    )
    for metric in ("greedy_acc", "pass1")
]
