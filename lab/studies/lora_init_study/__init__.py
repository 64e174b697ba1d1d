"""The ``lora_init`` study: LoRA initialisers in GRPO (https://huggingface.co/papers/2606.31813) against default LoRA
and full fine-tuning, each at its own tuned learning rate.

Methods: ``lora`` (PEFT's default init: A Kaiming-uniform, B = 0), ``rlpo``, ``rlmo``, ``pissa``, ``milora`` (set
through `RLVRGRPOConfig.lora_init`) and ``full`` (every weight trained, no adapter). Every LoRA method uses the same
adapter: rank `LORA_R` = 8, `LORA_ALPHA` = 16 (γ = α/r = 2, the paper's ratio), on every linear layer of the
decoder (``target_modules="all-linear"``: q/k/v/o and the MLP's gate/up/down; PEFT leaves the LM head out), no
dropout: 65,536 trainable parameters against the model's 658,304.

Each method runs over a learning-rate sweep, one arm per rate, named ``<method>@<rate>`` (e.g. ``rlpo@1.5e-3``):
`LORA_RATES` for the five LoRA methods (one grid for all, so no init gets a grid of its own), `FULL_RATES` for full
fine-tuning (a full update moves every weight, so its useful rates are about ten times lower). The procedure has two
phases, and the runner's resume makes the second reuse the first's runs:

1. the sweep, seed 0 only: ``python -m lab study lora_init --tasks number_sorting --seeds 0``;
2. each method's chosen rate (`choose_rates`: the highest held-out pass@1 of seed 0; a tie goes to the lower rate)
   with seeds 0, 1 and 2: ``--seeds 0,1,2 --arms chosen`` (the study's arm set ``chosen``: the base arm and each
   method at its chosen rate, read from the seed-0 runs in ``--out_dir``). ``results.md`` then has the 3-seed table at the chosen rates, followed by the
   whole sweep (read from every seed-0 run on disk) with the chosen rates marked, and the phase-2 command.

Extra columns (from the per-step training log; every arm logs every step):
- ``max grad_norm``: the largest pre-clipping gradient norm of the run (TRL clips at ``max_grad_norm`` = 1.0);
- ``grad-norm spikes``: the number of steps whose gradient norm exceeds `SPIKE_FACTOR` (5) times the run's median;
- ``final reward``: the mean of the last `REWARD_WINDOW` (10) logged training rewards (a reward is logged at each
  generation, i.e. every ``steps_per_generation`` = 2 steps: the last 20 of 60 steps);
- ``reward change``: that final reward minus the first logged reward (the reward of the starting model's own
  rollouts, generated before any update);
- ``collapsed``: 1 if the final reward is below `COLLAPSE_FRACTION` (half) of that starting reward (the reward fell
  and did not come back), else 0; its mean over seeds is the share of seeds that collapsed. (Against the start, not
  against the first 10 logs: at too high a rate the reward can halve within two updates.)
- ``trainable params``: parameters with ``requires_grad`` (the adapter for LoRA arms, every weight for ``full``).

Task: reasoning-gym ``number_sorting`` from the same cached warm-started base as the ``self`` study (``chain_sum`` is
there too, for a second task when time allows). With ``quick``, the randomly initialised tiny model (a smoke run).
"""

import dataclasses

from ..design import Arm, Study
from ..tasks import shared_tasks
from .design import (  # noqa: F401  (re-exported: the study's names)
    CLAIM,
    CLAIMS,
    COLLAPSE_FRACTION,
    CONFIRM_ARMS,
    CONFIRM_COMMAND,
    CONFIRM_SEEDS,
    FULL_RATES,
    LORA_ALPHA,
    LORA_METHODS,
    LORA_R,
    LORA_RATES,
    LORA_SETTINGS,
    METHODS,
    RATE_LADDER,
    REWARD_WINDOW,
    SETTINGS,
    SIZES,
    SPIKE_FACTOR,
    SWEEP_COMMANDS,
    SWEEP_SEED,
    TASKS,
    VALIDATED_RATES,
    arm_name,
    ladder_of,
    make_arm,
    rates_of,
    split_arm_name,
)
from .rates import (  # noqa: F401  (re-exported: the study's names)
    COLUMNS,
    STABLE_MARGIN,
    choose_rates,
    chosen_arms,
    collapsed,
    extend_arms,
    extension_rates,
    final_reward,
    grad_norm_spikes,
    grid_arms,
    load_results,
    rate_tables,
    reward_change,
    stable,
    trainable_parameters,
)


def make_study() -> Study:
    gym_tasks = shared_tasks()  # the shared tasks and their cached warm-started bases
    arms = {"base": Arm("base", train=False)}
    for method in METHODS:
        for rate in ladder_of(method):  # lowest first; the rates past the grid run in the validated design only
            arm = make_arm(method, rate)
            arms[arm.name] = arm if rate in rates_of(method) else dataclasses.replace(arm, settings=tuple(SETTINGS))
    return Study(
        "lora_init",
        CLAIM,
        {name: gym_tasks[name] for name in TASKS},
        arms,
        columns=COLUMNS,
        curves=["reward", "grad_norm", "entropy"],
        sizes=SIZES,
        plots=[rate_tables],
        arm_sets={"chosen": chosen_arms, "grid": grid_arms, "extend": extend_arms},
        settings=SETTINGS,
        claims=CLAIMS,
    )
