"""The ``pretrained`` study: the seed claims on the real pretrained model (SmolLM2-135M-Instruct), on the task its
screening found learnable (one-digit products, chat prompts, the last number of the reply graded).

Arms (`design.GROUPS`, in run order): ``base`` (the model untrained), ``lora`` (stock GRPO + LoRA, PEFT's default
init), the LoRA initialisers ``rlpo``, ``rlmo``, ``pissa``, ``milora`` (`RLVRGRPOConfig.lora_init`) and, each on the
default init, the rules ``nsr`` (`clip_recovery`), ``acpo`` (`adaptive_clip`) and ``delta`` (`token_credit`), and the
next methods ``rsi_s`` (`rsi_selection`) and ``popo`` (`objective`); then stock GRPO + LoRA stopped at half the
steps with its trajectory recorded (``lora_8steps``, `relex_record_steps`) and ``relex``, the checkpoint RELEX
extrapolates from it to the full budget (`design.Extrapolation`); then SELF's curation ``self``
(`RLVRGRPOConfig.curation`) and stock GRPO + LoRA at as many whole batches as the prompts SELF trained on
(``lora_same_prompts``). Every
trained arm uses the same adapter, sizes and learning rate (`design`); the claims and the pilot's sizing are declared
there, before the runs.

Run it with two one-thread processes side by side (the default of ``python -m lab study``: ``--workers 2
--num_threads 1``, the runs handed out to them seed by seed); a finished run is loaded, not redone, so the commands
(`design.COMMANDS`) resume across sessions. ``--quick`` runs the pipeline on the tiny random model.
"""

from ..budgets import prompts_trained, updates_made
from ..design import RECORDED_LORA_SOLVERS, Arm, Column, Extrapolation, Study, log_column
from ..tasks import number_gold as gold_completion  # noqa: F401  (re-exported: the study's names)
from ..tasks import real_model_base as base_model  # noqa: F401  (re-exported: the study's names)
from ..tasks import real_model_task
from .design import (  # noqa: F401  (re-exported: the study's names)
    CLAIM,
    CLAIMS,
    COMMANDS,
    DATASET,
    GROUPS,
    LORA_INITS,
    LORA_SETTINGS,
    MAX_COMPLETION_LENGTH,
    MODEL,
    NEXT_METHODS,
    NOT_RUN,
    RELEX_HISTORY,
    RELEX_SOURCE,
    RELEX_TARGET,
    RULES,
    SEEDS,
    SELF_ARMS,
    SELF_PROMPTS_MATCHED,
    SIZES,
    TASK,
    TEMPERATURE,
    pilot_mde,
)


def run_one(study, task, arm, seed, out_dir, sizes, quick, command, **where) -> dict:
    """The engine's run (`lab.studies.runner.run_one`); under ``--quick`` the adapter covers every layer of
    the tiny model (fewer than the real model's top ``LORA_LAYERS``) at rank 4 (its narrowest projection has 8
    outputs, fewer than ``LORA_R``)."""
    import dataclasses

    from ..runner import run_one as engine_run_one

    if quick and arm.peft is not None:
        peft = {k: v for k, v in arm.peft.items() if k != "layers_to_transform"}
        arm = dataclasses.replace(arm, peft={**peft, "r": 4, "lora_alpha": 8})
    return engine_run_one(study, task, arm, seed, out_dir, sizes, quick, command, **where)


def make_study() -> Study:
    arms = {"base": Arm("base", train=False), "lora": Arm("lora", peft=dict(LORA_SETTINGS))}
    for method in LORA_INITS:
        solver = {"solver": RECORDED_LORA_SOLVERS[method]}
        arms[method] = Arm(method, config={"lora_init": method, "lora_init_kwargs": solver}, peft=dict(LORA_SETTINGS))
    for name, options in {**RULES, **NEXT_METHODS}.items():
        arms[name] = Arm(name, config=dict(options), peft=dict(LORA_SETTINGS))
    # (f) stock GRPO + LoRA for the history's steps, its trajectory recorded every step, and RELEX's extrapolation
    record = {"max_steps": RELEX_HISTORY, "relex_record_steps": 1}
    arms[RELEX_SOURCE] = Arm(RELEX_SOURCE, config=record, peft=dict(LORA_SETTINGS))
    arms["relex"] = Arm(
        "relex",
        train=False,
        peft=dict(LORA_SETTINGS),
        extrapolate=Extrapolation(RELEX_SOURCE, RELEX_HISTORY, RELEX_TARGET),
    )
    # (b) SELF's curation, and stock GRPO at as many whole batches as the prompts the same-seed SELF run trained on
    for name, options in SELF_ARMS.items():
        arms[name] = Arm(name, config=dict(options), peft=dict(LORA_SETTINGS))
    arms[SELF_PROMPTS_MATCHED] = Arm(SELF_PROMPTS_MATCHED, peft=dict(LORA_SETTINGS), same_prompts_as="self")
    task = real_model_task()
    return Study(
        "pretrained",
        CLAIM,
        {TASK: task},
        arms,
        columns=[
            log_column("final reward", "reward", "last"),
            log_column("max grad_norm", "grad_norm", "max"),
            # how much the clip rules can act on: the share of tokens TRL's clip cut (over all steps, the first of each
            # generation batch at ratio 1 included), and the completions cut at max_completion_length
            log_column("clipped tokens", "clip_ratio/region_mean", "mean", digits=4),
            log_column("truncated completions", "completions/clipped_ratio", "mean"),
            # SELF's budget (group b): the updates made and the prompts trained on, as on the self study's page
            Column("updates made", lambda r: updates_made(r) if r.get("train_log") else None, 0),
            Column("prompts trained", lambda r: prompts_trained(r) if r.get("train_log") else None, 0),
        ],
        curves=["reward", "grad_norm"],
        sizes=SIZES,
        run_one=run_one,
        claims=CLAIMS,
    )
