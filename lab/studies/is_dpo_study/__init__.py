"""The ``is_dpo`` study: IS-DAA's claim (https://huggingface.co/papers/2506.08681) of over-optimisation at low β.

Claim: offline DPO over-optimises at small β (the gold metric falls while the KL to the reference grows); weighting
each pair by the clipped importance ratio π_θ/π_D (`ISDPOTrainer`) gives a better gold-vs-KL frontier.

Setting. The tasks are the reasoning-gym presets of the ``self`` study, with the same warm-started bases (reused from
`lab.studies.tasks`, so the cached bases are hit). Per task the preference data are built once, from the
base model's own samples, and shared by every arm and seed (``<out_dir>/<task>/_data/<key>/``, written atomically):

- ``DATA_PROMPTS`` train prompts, ``num_generations`` samples each at temperature 1 (the sampling layer,
  `trl_rlvr_ext.sampling.sample_and_grade`), graded with the task's reward;
- one pair per prompt that has both a correct and a wrong sample: chosen = the first correct sample, rejected = the
  first wrong one (prompts with only correct or only wrong samples give no pair);
- the behaviour log-probs scored with `trl_rlvr_ext.dpo.behavior.score_behavior_logps` (what ``trl-rlvr-ext
  score-behavior`` runs) under the base model, which generated the pairs. The base is also the DPO reference, so
  π_D = π_ref here, the paper's setting.

With ``quick`` (the random tiny model, which never answers correctly) a prompt without a correct sample gets its gold
completion as chosen, so that a smoke run has pairs; ``meta.json`` counts the pairs by where the chosen came from.

Arms: ``DPOTrainer``-equivalent DPO (`ISDPOTrainer` with ``importance_sampling=False``, stock TRL to the bit) and
IS-DPO (``importance_sampling=True``, default cap C = e^0.5), each at β ∈ {0.01, 0.1}; sigmoid loss, full fine-tuning,
constant learning rate.

The over-optimisation frontier: every ``probe_every`` steps (and at step 0) `FrontierCallback` measures, on the first
``probe_problems`` held-out problems, the greedy accuracy (the gold metric), pass@1 from ``FRONTIER_SAMPLES`` samples
at temperature 1, and KL(π_θ || π_ref) estimated on those policy samples (`sampled_kl`). The final model is evaluated
with the unbiased Pass@k like the other studies.

The ``dense`` setting (`SETTINGS`, a `FrontierSetting`; declared after an audit of the records, run on fresh seeds
`DENSE_SEEDS` with `DENSE_COMMAND` and `DENSE_B01_COMMAND`) changes the design where the records were weak, and leaves
the defaults as the records were made:

- **validation problems**: the frontier is measured on 100 validation problems as well (`validation_split`: held-out
  rows 100-199, never trained on, disjoint from the test problems and from every train prompt, asserted), recorded as
  ``frontier_validation``; ``frontier`` stays the test problems. Any choice reads the validation problems only; the
  test problems are reported.
- **a dense start**: probes at steps 0, 2, ..., 20, then every ``probe_every`` (`probe_schedule`), so that DPO has
  points between KL 0 and ~0.8, where the arms meet at matched KL; the record holds ``probe_steps``.
- **better-tuned DPO baselines** (arms of this setting only, `Arm.settings`): ``dpo_b0.01_lr1e-5`` (the learning rate
  overridden in the arm's config, through the same `_dpo_config`) and ``dpo_b0.01_es``, early-stopped: its final model
  is its frontier step with the best validation greedy accuracy (`BestCheckpoint`, in memory, ties to the earliest
  step); the record's ``early_stopping`` names the step, with fingerprints of that checkpoint and of the model
  evaluated.
- **matched KL** (`MATCHED_KL_CLAIMS` at `MATCHED_KL_GRID`, `lab.studies.frontier`): each run's gold metric
  interpolated at declared KL values, paired by seed, a t interval over seeds, the project's verdict rule; the
  table is in ``results.md``.

How the runner's `StudySizes` read here: ``num_prompts`` = pairs per optimiser step, ``num_generations`` = samples
per train prompt for the preference data, ``probe_problems`` / ``probe_every`` = the frontier's held-out prompts and
interval; ``steps_per_generation`` is unused (keep 1).

The ``pretrained`` setting (`PRETRAINED_SETTING`, declared before its runs, `PRETRAINED_COMMAND`) runs the design on
the real pretrained model (SmolLM2-135M-Instruct, its task ``products`` belongs to that setting only): the base, DPO
and IS-DPO at β = 0.01, every weight trained, on pairs from the model's own samples; claims 6 and 7.
"""

from ..design import Arm, Column, Study, log_column
from ..tasks import real_model_task, shared_tasks
from .claims import (  # noqa: F401  (re-exported: the study's names)
    _DENSE,
    CLAIM,
    CLAIMS,
    MATCHED_KL_CLAIMS,
    MATCHED_KL_GRID,
)
from .data import (  # noqa: F401  (re-exported: the study's names)
    build_preference_data,
)
from .design import (  # noqa: F401  (re-exported: the study's names)
    DATA_PROMPTS,
    DENSE_ARMS,
    DENSE_B01_ARMS,
    DENSE_B01_COMMAND,
    DENSE_COMMAND,
    DENSE_SEEDS,
    FRONTIER_SAMPLES,
    IS_DPO_QUICK,
    IS_DPO_SIZES,
    PRETRAINED_ARMS,
    PRETRAINED_COMMAND,
    PRETRAINED_RECORDS,
    PRETRAINED_SEEDS,
    PRETRAINED_SETTING,
    QUICK_DATA_PROMPTS,
    RECORDS_FRONTIER,
    SETTINGS,
    VALIDATED_ARMS,
    VALIDATED_COMMANDS,
    VALIDATED_IS_ARMS,
    VALIDATED_SEEDS,
    FrontierSetting,
    probe_schedule,
)
from .plots import (  # noqa: F401  (re-exported: the study's names)
    _frontier_value,
    matched_kl_comparisons,
    matched_kl_section,
    plot_frontier,
)
from .rates import (  # noqa: F401  (re-exported: the study's names)
    CHOSEN_RATES,
    CONFIRM_RATE_COMMANDS,
    CONFIRM_RATE_SEEDS,
    CONFIRM_RATE_SETTINGS,
    RATE_COLLAPSE,
    RATE_COMMANDS,
    RATE_GRID,
    RATE_LADDER,
    RATE_PREFIX,
    RATE_SEED,
    RATE_SETTINGS,
    RATE_STEPS,
    RateCalibration,
    choose_rate,
    rate_arm,
    rate_runs,
)
from .steps import (  # noqa: F401  (re-exported: the study's names)
    BestCheckpoint,
    _dpo_config,
    run_one,
    sampled_kl,
    state_fingerprint,
)


def make_study() -> Study:
    shared = shared_tasks()  # the shared tasks and their cached warm-started bases
    tasks = {name: shared[name] for name in ("number_sorting", "chain_sum")}
    tasks["products"] = real_model_task(settings=(PRETRAINED_SETTING,))  # the real model, in its own setting only
    arms = {"base": Arm("base", train=False)}
    for beta in (0.01, 0.1):
        arms[f"dpo_b{beta}"] = Arm(f"dpo_b{beta}", config={"beta": beta, "importance_sampling": False})
        # The authors' weight, no floor: the design was declared and run before `importance_weight_floor` existed
        # (its default 2^-8 would change a rerun), so its arms pin the weight they ran with
        arms[f"isdpo_b{beta}"] = Arm(
            f"isdpo_b{beta}", config={"beta": beta, "importance_sampling": True, "importance_weight_floor": 0.0}
        )
    # the dense setting's better-tuned DPO baselines (only there: the defaults keep the records' five arms)
    dpo = {"beta": 0.01, "importance_sampling": False}
    arms["dpo_b0.01_lr1e-5"] = Arm("dpo_b0.01_lr1e-5", config={**dpo, "learning_rate": 1e-5}, settings=_DENSE)
    arms["dpo_b0.01_es"] = Arm("dpo_b0.01_es", config={**dpo, "early_stopping": True}, settings=_DENSE)
    # the learning-rate calibration's arms (only there)
    for rate in RATE_LADDER:
        arms[rate_arm(rate)] = Arm(
            rate_arm(rate), config={**dpo, "learning_rate": float(rate)}, settings=tuple(RATE_SETTINGS)
        )
    columns = [
        Column("greedy (final)", _frontier_value("greedy_acc", lambda v: v[-1])),
        Column("greedy (best)", _frontier_value("greedy_acc", max)),
        Column("KL (final)", _frontier_value("kl", lambda v: v[-1]), digits=2),
        log_column("IS w mean", "is/weight_mean"),
        log_column("IS w max", "is/weight_max", reduce="max"),
        log_column("IS clipped", "is/clipped_frac"),
        log_column("IS ESS (min)", "is/ess", reduce="min"),
    ]
    return Study(
        "is_dpo",
        CLAIM,
        tasks,
        arms,
        columns=columns,
        curves=["loss", "rewards/margins"],
        sizes=IS_DPO_SIZES,
        quick_sizes=IS_DPO_QUICK,
        run_one=run_one,
        plots=[plot_frontier, matched_kl_section],
        settings=SETTINGS,
        claims=CLAIMS,
    )
