"""The ``lora_init`` study's design: its claims, methods and learning-rate grids, sizes, the validated design's
settings (sweep on validation problems, then confirmation on fresh seeds) and the arm names.
"""

from ..design import RECORDED_LORA_SOLVERS, Arm, Setting, StudySizes
from ..verdicts import Claim


CLAIM = (
    "RLPO and RLMO (arXiv 2606.31813) claim +2.6 and +1.4 accuracy over default LoRA in RLVR, because an orthonormal "
    "A (B = 0) keeps updates inside RLVR's implicit KL budget, while PiSSA/MiLoRA's singular-value scaling amplifies "
    "gradients and trains unstably. Every method runs at its own best learning rate from a sweep (seed 0), then with "
    "3 seeds at that rate. Evaluation: unbiased Pass@k on held-out problems, samples at temperature 1."
)


LORA_METHODS = ("lora", "rlpo", "rlmo", "pissa", "milora")


METHODS = (*LORA_METHODS, "full")


# Rates as written in the arm names. Calibrated on number_sorting, seed 0, 60 steps (training reward of the first
# generation -> mean of the last 10 logged; pass@1 on 50 held-out problems x 16 samples, base: 0.42 on 100 x 64):
# lora@1.5e-3 0.48 -> ~0.52 (mild gain); lora@5e-3 0.50 -> 0.31, pass@1 0.36 (too high: the reward falls);
# full@5e-4 0.50 -> 0.24 within two updates, pass@1 0.23 (collapse); full@1.5e-4 0.50 -> 0.53, pass@1 0.53.
# So each grid brackets a working rate with one that is too high, at a factor ~3 between rates.
LORA_RATES = ("5e-4", "1.5e-3", "5e-3")


FULL_RATES = ("5e-5", "1.5e-4", "5e-4")


LORA_R = 8


LORA_ALPHA = 16


LORA_SETTINGS = {"r": LORA_R, "lora_alpha": LORA_ALPHA, "lora_dropout": 0.0, "target_modules": "all-linear"}


SPIKE_FACTOR = 5.0


REWARD_WINDOW = 10


COLLAPSE_FRACTION = 0.5


TASKS = ("number_sorting", "chain_sum")


# The comparisons the evidence page judges (lab.studies.verdicts), each method at the rate `choose_rates`
# picked. Those rates were chosen on seed 0's held-out pass@1, on the same problems that are reported, and seed 0 stays
# in the table: every claim is exploratory (selected on the test set) until rerun on rates chosen on a validation
# split and fresh seeds. "Stable" has no verdict: the collapse indicator is one number per run.
_SELECTED = (
    "selected on the test set: the rates were chosen on seed 0's held-out pass@1 (the reported problems) and seed 0 "
    "is reported; RLPO's, PiSSA's and full fine-tuning's chosen rates sit at the low edge of their grids"
)


_LORA = "lora@1.5e-3"


CLAIMS = [
    *(
        Claim(
            f"1. {name} beats default LoRA",
            arm=arm,
            baseline=_LORA,
            metric="pass@1",
            paper_effect=effect,
            reason=f"the paper's +{100 * effect:.1f} average accuracy of {name} over LoRA",
            part_of="1. RLPO / RLMO beat default LoRA (+2.6 / +1.4)",
            settings=("main",),
            exploratory=_SELECTED,
        )
        for name, arm, effect in (("RLPO", "rlpo@5e-4", 0.026), ("RLMO", "rlmo@1.5e-3", 0.014))
    ),
    *(
        Claim(
            f"2. {name} ends below default LoRA",
            arm=arm,
            baseline=_LORA,
            metric="pass@1",
            direction=-1,
            smallest_effect=0.02,
            reason="the paper gives no size; 2 pass@1 points is the smallest drop taken to matter",
            part_of="2. PiSSA / MiLoRA end below LoRA",
            settings=("main",),
            exploratory=_SELECTED,
        )
        for name, arm in (("PiSSA", "pissa@5e-4"), ("MiLoRA", "milora@1.5e-3"))
    ),
]


# about one CPU-minute per (task, arm, seed) on the 0.66 M-parameter base
SIZES = StudySizes(
    max_steps=60,
    num_prompts=32,
    num_generations=8,
    steps_per_generation=2,
    eval_problems=100,
    eval_samples=64,
    probe_problems=100,
    probe_every=20,
)


# The validated design, declared here before any of its runs. The first design chose each rate on seed 0's test-set
# pass@1 and reported seed 0 (`_SELECTED`); this one keeps the test problems out of every choice:
# 1. the sweep (setting ``sweep``): every method over its grid (`LORA_RATES` / `FULL_RATES`) on `SWEEP_SEED`, a seed
#    that is never reported, each run measured on the validation problems (held-out rows 100-199:
#    `lab.studies.runner.validation_split`, disjoint from the test problems and from every train prompt);
# 2. grids past their edges: while a method's best validation pass@1 sits at the lowest (highest) rate it ran, the
#    next rate down (up) its ladder (`RATE_LADDER`, a factor of about 3 per step) runs too (the arm set ``extend``:
#    repeat ``--arms extend`` until it adds nothing);
# 3. the confirmation (setting ``confirm``): each method at its chosen rate (`choose_rates` on the sweep) on the fresh
#    seeds `CONFIRM_SEEDS`, measured on the test problems at the first design's sizes. Its claims are declared, with
#    the chosen rates, after the sweep and before any confirmation run.
RATE_LADDER = {
    "lora": ("5e-5", "1.5e-4", "5e-4", "1.5e-3", "5e-3", "1.5e-2"),
    "full": ("5e-6", "1.5e-5", "5e-5", "1.5e-4", "5e-4", "1.5e-3"),
}


SWEEP_SEED = 100


CONFIRM_SEEDS = (10, 11, 12, 13, 14)


# 32 samples per validation problem (the test problems get 64): pass@1 is all the choice reads, and its noise over
# 100 problems is dominated by the problems, which every arm shares.
SETTINGS = {
    "sweep": Setting(
        f"the rate sweep on the validation problems (held-out rows 100-199), seed {SWEEP_SEED} (never reported)",
        sizes={"eval_samples": 32},
        evaluate_on="validation",
    ),
    "confirm": Setting(
        "each method at the rate chosen on the validation sweep, fresh seeds 10-14, on the test problems",
    ),
}


_SWEEP = f"trl-rlvr-ext study lora_init --tasks number_sorting --setting sweep --seeds {SWEEP_SEED} --out_dir <dir>"


SWEEP_COMMANDS = (f"{_SWEEP} --arms grid", f"{_SWEEP} --arms extend  (repeated until it adds no arm)")


def ladder_of(method: str) -> tuple[str, ...]:
    """The rates ``method`` may sweep in the validated design, lowest first (`RATE_LADDER`)."""
    rates_of(method)  # an unknown method fails naming the known ones
    return RATE_LADDER["full" if method == "full" else "lora"]


def rates_of(method: str) -> tuple[str, ...]:
    """The learning rates (as written in the arm names) swept for ``method``."""
    if method not in METHODS:
        raise ValueError(f"Unknown method {method!r}: choose one of {list(METHODS)}.")
    return FULL_RATES if method == "full" else LORA_RATES


def arm_name(method: str, rate: str) -> str:
    return f"{method}@{rate}"


# Each method's rate as the sweep chose it (`choose_rates` on the sweep's records, after every grid extension it
# needed; a test checks this against docs/evidence/data/lora_init_sweep.jsonl), written here after the sweep and
# before any confirmation run, with the confirmation's claims: the first design's comparisons, at the validated rates,
# judged in the ``confirm`` setting only.
VALIDATED_RATES = {
    "lora": "1.5e-3",
    "rlpo": "5e-4",
    "rlmo": "1.5e-3",
    "pissa": "1.5e-4",
    "milora": "1.5e-3",
    "full": "5e-5",
}


CONFIRM_ARMS = ("base", *(arm_name(method, rate) for method, rate in VALIDATED_RATES.items()))


CONFIRM_COMMAND = (
    "trl-rlvr-ext study lora_init --tasks number_sorting --setting confirm --seeds "
    + ",".join(map(str, CONFIRM_SEEDS))
    + " --arms "
    + ",".join(CONFIRM_ARMS)
    + " --out_dir <dir>"
)


_VALIDATED_LORA = arm_name("lora", VALIDATED_RATES["lora"])


CLAIMS += [
    *(
        Claim(
            f"1. {name} beats default LoRA (validated rates)",
            arm=arm_name(method, VALIDATED_RATES[method]),
            baseline=_VALIDATED_LORA,
            metric="pass@1",
            paper_effect=effect,
            reason=f"the paper's +{100 * effect:.1f} average accuracy of {name} over LoRA; each rate chosen on the "
            "validation problems with an unreported seed, fresh seeds 10-14",
            part_of="1. RLPO / RLMO beat default LoRA (+2.6 / +1.4)",
            settings=("confirm",),
        )
        for name, method, effect in (("RLPO", "rlpo", 0.026), ("RLMO", "rlmo", 0.014))
    ),
    *(
        Claim(
            f"2. {name} ends below default LoRA (validated rates)",
            arm=arm_name(method, VALIDATED_RATES[method]),
            baseline=_VALIDATED_LORA,
            metric="pass@1",
            direction=-1,
            smallest_effect=0.02,
            reason="the paper gives no size; 2 pass@1 points is the smallest drop taken to matter; each rate chosen "
            "on the validation problems with an unreported seed, fresh seeds 10-14",
            part_of="2. PiSSA / MiLoRA end below LoRA",
            settings=("confirm",),
        )
        for name, method in (("PiSSA", "pissa"), ("MiLoRA", "milora"))
    ),
]


def split_arm_name(name: str) -> tuple[str, str] | None:
    """``(method, rate)`` of a sweep arm name, ``None`` for any other arm (the base)."""
    method, sep, rate = name.partition("@")
    return (method, rate) if sep and method in METHODS else None


def make_arm(method: str, rate: str) -> Arm:
    # logging_steps=1: the spike count and the collapse indicator need every step's grad norm and reward
    config = {"learning_rate": float(rate), "logging_steps": 1}
    if method == "full":
        return Arm(arm_name(method, rate), config=config)
    if method != "lora":  # "lora": PEFT's default init (lora_init unset)
        solver = RECORDED_LORA_SOLVERS[method]
        config |= {"lora_init": method, "lora_init_kwargs": {"show_progress": False, "solver": solver}}
    return Arm(arm_name(method, rate), config=config, peft=dict(LORA_SETTINGS))
