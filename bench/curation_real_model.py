"""SELF, pass-rate sampling and DAPO dynamic sampling against stock GRPO on a real task, whole steps side by side.

    python bench/real_model.py --parts curation        # on SmolLM2-135M-Instruct (bench/real_model.py's model)

These options act between steps (which prompts a step gets, how many generation rounds fill it), so their cost is in
whole steps, not in the loss path: each arm runs ``--curation-steps`` GRPO steps on the task the real model's screening found learnable (one-digit products, the demo's settings: LoRA on
the top 8 layers, 4 prompts x 8 completions, 16 tokens, each generation batch used for 2 optimiser steps), arms
alternated round by round. A run's step time is the mean of TRL's ``step_time`` over whole generation cycles (a
generating step then a reusing one, whose times differ tenfold) after the first cycle, which warms up; the median of
the per-round ratios to stock's is printed. A model that does
not read the task (the tiny one of the test) runs the same code paths; its numbers mean nothing.

What each arm's step does beyond stock's, and what to expect:

- ``self``: one greedy completion per prompt, fused into the sampling ``generate`` call, so about 1/G more decoding
  (the target is a step ratio <= 1 + 1/G); when every prompt of a step is already solved greedily the step is skipped
  (printed: ``curation/skipped_steps``);
- ``pass_rate``: a weighted draw of the prompts from their running pass rates; no extra generation (target <= 1.03);
- ``dynamic_sampling``: more generation rounds whenever a batch's groups have no reward spread, until the batch is
  full of informative groups (printed: the mean ``dynamic_sampling/rounds``); its step ratio is the price of the
  rounds by design, not an overhead to remove.
"""

import os
import statistics


ARMS = ("stock", "self", "pass_rate", "dynamic_sampling")
OPTIONS = {
    "stock": {},
    "self": {"curation": "self", "curation_id_column": "idx"},
    "pass_rate": {"curation": "pass_rate", "curation_id_column": "idx"},
    "dynamic_sampling": {"dynamic_sampling": True},
}
NUM_GENERATIONS = 8
STEPS_PER_GENERATION = 2


def make_trainer(arm: str, model_path: str, steps: int, out_dir: str, lora_layers: int = 8):
    from peft import LoraConfig
    from transformers import AutoConfig
    from trl import GRPOConfig, GRPOTrainer

    from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
    from trl_rlvr_ext.data import load_named_dataset
    from trl_rlvr_ext.rewards import get_reward_func
    from trl_rlvr_ext.scripts.demo_pretrained import DEFAULT_DATASET, LORA_TARGETS

    common = {
        "output_dir": out_dir,
        "per_device_train_batch_size": 4 * NUM_GENERATIONS // STEPS_PER_GENERATION,  # 4 prompts per generation
        "steps_per_generation": STEPS_PER_GENERATION,
        "num_generations": NUM_GENERATIONS,
        "max_completion_length": 16,
        "temperature": 0.7,
        "loss_type": "dapo",
        "beta": 0.0,
        "learning_rate": 3e-4,
        "max_steps": steps,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "gradient_checkpointing": False,
        "disable_tqdm": True,
        "seed": 0,
    }
    layers = AutoConfig.from_pretrained(model_path).num_hidden_layers
    peft = LoraConfig(
        r=16,
        lora_alpha=32,
        target_modules=list(LORA_TARGETS),
        layers_to_transform=list(range(max(0, layers - lora_layers), layers)),
        task_type="CAUSAL_LM",
    )
    trainer_cls, config_cls = (GRPOTrainer, GRPOConfig) if arm == "stock" else (RLVRGRPOTrainer, RLVRGRPOConfig)
    return trainer_cls(
        model=model_path,
        reward_funcs=get_reward_func("reasoning_gym"),
        args=config_cls(**common, **OPTIONS[arm]),
        train_dataset=load_named_dataset(DEFAULT_DATASET)["train"],
        peft_config=peft,
    )


def check_steps(steps: int) -> str | None:
    """Why ``steps`` cannot be measured (None if it can): a warm-up cycle and whole cycles after it."""
    if steps < 2 * STEPS_PER_GENERATION or steps % STEPS_PER_GENERATION:
        return (
            f"must be a multiple of {STEPS_PER_GENERATION} (a generation cycle) and at least "
            f"{2 * STEPS_PER_GENERATION}: the first cycle warms up, the others are timed."
        )
    return None


def curation_part(model_path: str, tmp: str, steps: int, rounds: int, label: str) -> dict:
    """Run the arms alternated over ``rounds``; print and return {arm: median step-time ratio to stock}."""
    medians = {arm: [] for arm in ARMS}
    extra = {arm: [] for arm in ARMS}
    for r in range(rounds):
        for arm in ARMS if r % 2 == 0 else ARMS[::-1]:
            trainer = make_trainer(arm, model_path, steps, os.path.join(tmp, f"curation-{arm}-{r}"))
            trainer.train()
            logs = trainer.state.log_history
            times = [log["step_time"] for log in logs if "step_time" in log]
            medians[arm].append(statistics.fmean(times[STEPS_PER_GENERATION:]))  # whole cycles after the first
            if arm == "self":
                extra[arm].append(max((log.get("curation/skipped_steps", 0) for log in logs), default=0))
            if arm == "dynamic_sampling":
                rounds_ = [log["dynamic_sampling/rounds"] for log in logs if "dynamic_sampling/rounds" in log]
                extra[arm].append(statistics.fmean(rounds_) if rounds_ else float("nan"))
    ratios = {arm: statistics.median(a / s for a, s in zip(medians[arm], medians["stock"])) for arm in ARMS[1:]}
    counted = steps - STEPS_PER_GENERATION
    print(f"\nCuration options, whole GRPO steps ({counted} counted x {rounds} rounds) on {label}")
    print(f"stock step: {statistics.median(medians['stock']):.2f} s (median over rounds of the mean step)")
    notes = {
        "self": f"target <= {1 + 1 / NUM_GENERATIONS:.3f}; skipped steps per run {extra['self']}",
        "pass_rate": "target <= 1.03",
        "dynamic_sampling": "generation rounds per batch, mean per run "
        + ", ".join(f"{x:.2f}" for x in extra["dynamic_sampling"]),
    }
    for arm in ARMS[1:]:
        per_round = ", ".join(f"{a / s:.3f}" for a, s in zip(medians[arm], medians["stock"]))
        print(f"{arm} step ratio: {ratios[arm]:.3f} (per round {per_round}; {notes[arm]})")
    return ratios
