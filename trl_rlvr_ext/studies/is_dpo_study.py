"""The ``is_dpo`` study: IS-DAA's claim (https://huggingface.co/papers/2506.08681) of over-optimisation at low β.

Claim: offline DPO over-optimises at small β (the gold metric falls while the KL to the reference grows); weighting
each pair by the clipped importance ratio π_θ/π_D (`ISDPOTrainer`) gives a better gold-vs-KL frontier.

Setting. The tasks are the reasoning-gym presets of the ``self`` study, with the same warm-started bases (reused from
`trl_rlvr_ext.studies.self_study`, so the cached bases are hit). Per task the preference data are built once, from the
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

How the runner's `StudySizes` read here: ``num_prompts`` = pairs per optimiser step, ``num_generations`` = samples
per train prompt for the preference data, ``probe_problems`` / ``probe_every`` = the frontier's held-out prompts and
interval; ``steps_per_generation`` is unused (keep 1).
"""

import hashlib
import json
import os
import shutil
import statistics
import time
from pathlib import Path

from .runner import (
    Arm,
    Column,
    Study,
    StudySizes,
    StudyTask,
    common_training_settings,
    evaluate_and_record,
    finished_result,
    load_run_inputs,
    log_column,
)
from .verdicts import Claim


CLAIM = (
    "IS-DAA (arXiv 2506.08681) claims that offline DPO over-optimises at low β (held-out gold accuracy falls while "
    "KL(π_θ || π_ref) grows) and that the clipped importance weight π_θ/π_D gives a better gold-vs-KL frontier. "
    "Preference pairs: the base model's own samples (chosen correct, rejected wrong), behaviour log-probs scored "
    "with score-behavior. Gold: held-out greedy accuracy and pass@1; KL: mean over policy samples of "
    "Σ_t (log π_θ − log π_ref). Final models: unbiased Pass@k on held-out problems, samples at temperature 1."
)
# The pre-declared comparisons the evidence page judges (trl_rlvr_ext.studies.verdicts). The paper states its claims
# as a frontier (gold against KL) and gives no effect size in pass@1 units, so each has a smallest effect of interest.
# Its main claim, a better frontier *at matched KL*, is not among them: the final models sit at different KL, and the
# frontier points do not overlap densely enough to pair them (the page shows the points without a verdict). Claim 2
# compares the arms at the same step budget instead, which is a different, weaker claim.
_TWO_POINTS = "2 pass@1 points is the smallest change taken to matter (no pass@1 size in the paper)"
_OVER_OPTIMISES = [
    (f"1a. DPO at β = {beta} ends below the base (over-optimisation)", f"dpo_b{beta}", "base") for beta in (0.01, 0.1)
] + [("1b. DPO at β = 0.01 ends below DPO at β = 0.1", "dpo_b0.01", "dpo_b0.1")]
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
    )
    for beta in (0.01, 0.1)
]
# Train prompts sampled for the preference data (the first ones of the train split), and for --quick.
DATA_PROMPTS, QUICK_DATA_PROMPTS = 1000, 6
# Samples per held-out prompt for the frontier's pass@1 and KL estimate.
FRONTIER_SAMPLES = 4
_DATA_VERSION = 1

# Calibrated on number_sorting, dpo_b0.01, seed 0 (786 pairs): lr 3e-4 collapsed greedy accuracy 0.56 -> 0.01 within
# 20 steps (KL 8.8); 3e-5 lowers it gradually, 0.56 -> 0.24 at step 120 (KL 5.0): the over-optimisation regime, traced
# over the whole run. 120 steps x 32 pairs is about 5 epochs of the pairs.
IS_DPO_SIZES = StudySizes(
    max_steps=120,
    learning_rate=3e-5,
    num_prompts=32,
    num_generations=8,
    steps_per_generation=1,
    eval_problems=100,
    eval_samples=64,
    probe_problems=100,
    probe_every=20,
)
IS_DPO_QUICK = StudySizes(
    max_steps=2,
    learning_rate=3e-4,  # large, so that two steps move the IS weights visibly off 1
    num_prompts=2,
    num_generations=2,
    steps_per_generation=1,
    eval_problems=3,
    eval_samples=4,
    probe_problems=3,
    probe_every=1,
)


def sampled_kl(policy_logps, ref_logps) -> float:
    """KL(π_θ || π_ref) from completions sampled from π_θ: the mean over samples of log π_θ(y|x) − log π_ref(y|x).

    Each argument holds one sequence log-probability (the sum over the completion's tokens) per sample. This is the
    standard unbiased Monte-Carlo estimator (k1): E_{y~π_θ}[log π_θ(y) − log π_ref(y)] = KL(π_θ || π_ref); a single
    estimate can be negative.
    """
    policy_logps, ref_logps = list(policy_logps), list(ref_logps)
    if len(policy_logps) != len(ref_logps) or not policy_logps:
        raise ValueError(
            f"sampled_kl needs one policy and one reference log-prob per sample, got {len(policy_logps)} and "
            f"{len(ref_logps)} (at least one sample)."
        )
    return statistics.fmean(p - r for p, r in zip(policy_logps, ref_logps))


# ---------------------------------------------------------------- the preference data (once per task)
def _data_settings(task: StudyTask, sizes: StudySizes, quick: bool) -> dict:
    return {
        "version": _DATA_VERSION,
        "dataset": task.dataset,
        "reward": task.reward,
        "base_model": task.base_model(quick),
        "num_prompts": QUICK_DATA_PROMPTS if quick else DATA_PROMPTS,
        "num_samples": sizes.num_generations,
        "temperature": 1.0,
        "max_new_tokens": task.max_completion_length,
        "seed": 0,
        "quick": quick,
    }


def build_preference_data(task: StudyTask, sizes: StudySizes, quick: bool, out_dir: Path, log=print):
    """The task's preference pairs with behaviour log-probs: built once under ``<out_dir>/<task>/_data/<key>/``
    (atomically: a finished build is exactly a directory with ``meta.json``), then loaded. Returns ``(dataset, meta)``.
    """
    from datasets import Dataset, load_from_disk

    settings = _data_settings(task, sizes, quick)
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    data_dir = out_dir / task.name / "_data" / key
    if (data_dir / "meta.json").is_file():
        return load_from_disk(str(data_dir / "pairs")), json.loads((data_dir / "meta.json").read_text())

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..data import load_named_dataset
    from ..dpo.behavior import score_behavior_logps
    from ..rewards import get_reward_func
    from ..sampling import SamplingSettings, TransformersBackend, as_reward_func_list, sample_and_grade

    log(f"[is_dpo] {task.name}: building the preference data in {data_dir}")
    start = time.perf_counter()
    train = load_named_dataset(task.dataset)["train"]
    rows = [train[i] for i in range(min(settings["num_prompts"], train.num_rows))]
    tokenizer = AutoTokenizer.from_pretrained(settings["base_model"])
    model = AutoModelForCausalLM.from_pretrained(settings["base_model"])
    sampling = SamplingSettings(
        num_samples=settings["num_samples"],
        temperature=1.0,
        max_new_tokens=settings["max_new_tokens"],
        seed=settings["seed"],
    )
    backend = TransformersBackend(model, tokenizer, batch_size=256)
    graded = sample_and_grade(backend, tokenizer, rows, as_reward_func_list(get_reward_func(task.reward)), sampling)
    n = settings["num_samples"]
    pairs, from_gold = [], 0
    for index, row in enumerate(rows):
        correct = graded.correct[index].tolist()
        texts = graded.completions[index * n : (index + 1) * n]
        wrong = [text for text, ok in zip(texts, correct) if not ok]
        right = [text for text, ok in zip(texts, correct) if ok]
        if not wrong:
            continue
        if not right:
            if not quick:
                continue
            right, from_gold = [task.gold_completion(row)], from_gold + 1
        pairs.append({"prompt": row["prompt"], "chosen": right[0], "rejected": wrong[0]})
    if not pairs:
        raise RuntimeError(
            f"No preference pair for task {task.name!r}: no sampled prompt had both a correct and a wrong answer "
            f"among {n} samples. The base model {settings['base_model']} is too weak or too strong for this task."
        )
    pairs = score_behavior_logps(Dataset.from_list(pairs), model, tokenizer, batch_size=64, show_progress=False)
    per_prompt = graded.correct.mean(axis=1)
    meta = {
        "settings": settings,
        "num_pairs": len(pairs),
        "num_pairs_chosen_from_gold": from_gold,
        "prompts_all_correct": int((per_prompt == 1).sum()),
        "prompts_all_wrong": int((per_prompt == 0).sum()),
        "sample_accuracy": float(graded.correct.mean()),
        "build_seconds": round(time.perf_counter() - start, 1),
    }
    tmp = data_dir.with_name(data_dir.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    pairs.save_to_disk(str(tmp / "pairs"))
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    shutil.rmtree(data_dir, ignore_errors=True)  # a half-written build without meta.json
    os.replace(tmp, data_dir)
    log(f"[is_dpo] {task.name}: {len(pairs)} pairs from {len(rows)} prompts in {meta['build_seconds']:.0f} s")
    return load_from_disk(str(data_dir / "pairs")), meta


# ---------------------------------------------------------------- the frontier
def _frontier_callback_class():
    from transformers import TrainerCallback

    class FrontierCallback(TrainerCallback):
        """Gold (held-out greedy accuracy, sampled pass@1) and KL(π_θ || π_ref) every ``every`` steps and at step 0.

        ``history`` holds one dict per measurement: ``step``, ``greedy_acc``, ``pass1`` and ``kl`` (`sampled_kl` on
        ``num_samples`` samples per held-out prompt, seeded the same at every measurement). The policy and reference are
        the trainer's (``trainer.model``, ``trainer.ref_model``), or given to `measure` (the base arm: no trainer).
        """

        def __init__(self, trainer, rows, reward, max_new_tokens: int, every: int, num_samples: int, seed: int):
            from ..sampling import SamplingSettings, as_reward_func_list

            self.trainer, self.rows, self.every = trainer, rows, every
            self.reward = as_reward_func_list(reward)
            self.sampling = SamplingSettings(
                num_samples=num_samples, temperature=1.0, max_new_tokens=max_new_tokens, seed=seed
            )
            self.history: list[dict] = []

        def measure(self, step: int, model=None, ref_model=None, tokenizer=None) -> dict:
            from ..evaluation.boundary import sequence_logps
            from ..sampling import TransformersBackend, sample_and_grade

            if model is None:
                model, ref_model, tokenizer = self.trainer.model, self.trainer.ref_model, self.trainer.processing_class
            backend = TransformersBackend(model, tokenizer, batch_size=256)
            greedy = sample_and_grade(backend, tokenizer, self.rows, self.reward, self.sampling.as_greedy())
            sampled = sample_and_grade(backend, tokenizer, self.rows, self.reward, self.sampling)
            prompts = [p for p in sampled.prompt_ids for _ in range(self.sampling.num_samples)]
            completions = [c for per_prompt in sampled.completion_ids for c in per_prompt]
            pad = backend.pad_token_id
            policy = sequence_logps(model, pad, prompts, completions, batch_size=256)
            ref = sequence_logps(ref_model, pad, prompts, completions, batch_size=256)
            entry = {
                "step": step,
                "greedy_acc": float(greedy.correct.mean()),
                "pass1": float(sampled.correct.mean()),
                "kl": sampled_kl(policy, ref),
            }
            self.history.append(entry)
            print(f"    frontier step {step}: " + ", ".join(f"{k} {v:.3f}" for k, v in entry.items() if k != "step"))
            return entry

        def on_train_begin(self, args, state, control, **kwargs):
            if not self.history:
                self.measure(0)

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % self.every == 0 or state.global_step == state.max_steps:
                self.measure(state.global_step)

    return FrontierCallback


# ---------------------------------------------------------------- one run
def _dpo_config(run_dir: Path, arm: Arm, sizes: StudySizes, seed: int):
    from ..dpo.dpo_config import ISDPOConfig

    settings = {
        **common_training_settings(run_dir, sizes, seed),  # activation checkpointing off: DPOConfig turns it on
        "loss_type": "sigmoid",
        "per_device_train_batch_size": sizes.num_prompts,
        **arm.config,
    }
    return ISDPOConfig(**settings), settings


def run_one(
    study: Study, task: StudyTask, arm: Arm, seed: int, out_dir: Path, sizes: StudySizes, quick: bool, command: str
) -> dict:
    """One (task, arm, seed): DPO or IS-DPO on the task's shared pairs, the frontier, Pass@k; writes ``result.json``."""
    from transformers import AutoTokenizer

    from ..dpo.behavior import BEHAVIOR_COLUMNS
    from ..dpo.dpo_trainer import ISDPOTrainer

    if (done := finished_result(out_dir, task, arm, seed)) is not None:
        return done
    run_dir = out_dir / task.name / arm.name / f"seed{seed}"
    if sizes.steps_per_generation != 1:
        raise ValueError(
            f"steps_per_generation={sizes.steps_per_generation} means nothing to the is_dpo study (offline pairs, no "
            "generation during training); leave it at 1. The batch is num_prompts pairs per step."
        )
    # The shared data are built (once per task) outside the run's wall time; their build time is in their meta.
    pairs, data_meta = build_preference_data(task, sizes, quick, out_dir) if arm.train else (None, None)
    start = time.perf_counter()
    run_dir.mkdir(parents=True, exist_ok=True)
    _, test, probe_rows, reward, base_path = load_run_inputs(task, sizes, quick)
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    frontier = _frontier_callback_class()(
        None, probe_rows, reward, task.max_completion_length, sizes.probe_every, FRONTIER_SAMPLES, 2000 + seed
    )
    config, log_history, train_seconds = None, [], 0.0
    if arm.train:
        args, config = _dpo_config(run_dir, arm, sizes, seed)
        if not args.importance_sampling:  # stock DPO sees plain preference data
            pairs = pairs.remove_columns(list(BEHAVIOR_COLUMNS))
        trainer = ISDPOTrainer(model=base_path, args=args, train_dataset=pairs, processing_class=tokenizer)
        frontier.trainer = trainer
        trainer.add_callback(frontier)
        t0 = time.perf_counter()
        trainer.train()
        train_seconds = time.perf_counter() - t0
        model, log_history = trainer.model, trainer.state.log_history
    else:  # the base model: its gold metrics (the frontier's starting point) and Pass@k
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(base_path)
        frontier.measure(0, model=model, ref_model=model, tokenizer=tokenizer)
    model.eval()
    extra = {
        "boundary": [],
        "frontier": frontier.history,
        "preference_data": data_meta,  # None for the base arm
        "train_log": log_history,
        "dpo_config": config,
    }
    return evaluate_and_record(
        study,
        task,
        arm,
        seed,
        out_dir,
        sizes,
        quick,
        command,
        model,
        tokenizer,
        test,
        reward,
        base_path,
        start,
        train_seconds,
        extra,
    )


# ---------------------------------------------------------------- table and plot
def _frontier_value(key: str, reduce):
    def value(result: dict) -> float | None:
        values = [entry[key] for entry in result.get("frontier", [])]
        return reduce(values) if values else None

    return value


def plot_frontier(task_name: str, rows: list[dict], out_dir: Path) -> list[str]:
    """``<task>_frontier.png``: held-out greedy accuracy and pass@1 against KL(π_θ || π_ref), one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, arm in enumerate(dict.fromkeys(r["arm"] for r in rows)):
        for n, run in enumerate(r for r in rows if r["arm"] == arm and r.get("frontier")):
            kl = [entry["kl"] for entry in run["frontier"]]
            for ax, key in zip(axes, ("greedy_acc", "pass1")):
                ax.plot(
                    kl,
                    [entry[key] for entry in run["frontier"]],
                    marker=".",
                    alpha=0.7,
                    color=colors[index % len(colors)],
                    label=arm if n == 0 else None,
                )
    for ax, key in zip(axes, ("held-out greedy accuracy", f"held-out pass@1 ({FRONTIER_SAMPLES} samples)")):
        ax.set(xlabel="KL(π_θ || π_ref) (sampled, nats per completion)", ylabel=key)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle(f"{task_name}: gold vs KL over training (one line per seed)")
    fig.tight_layout()
    fig.savefig(out_dir / f"{task_name}_frontier.png", dpi=100)
    plt.close(fig)
    pairs = {r["preference_data"]["num_pairs"] for r in rows if r.get("preference_data")}
    return [
        f"![gold vs KL]({task_name}_frontier.png)",
        "",
        f"Preference pairs (shared by every arm and seed): {', '.join(str(p) for p in sorted(pairs))}.",
    ]


def make_study() -> Study:
    from .self_study import _gym_task

    tasks = {
        # "<answer>['9.0', '25.0', '83.0']</answer>" + EOS = 42 tokens
        "number_sorting": _gym_task("number_sorting", "number_sorting", 44),
        # "<answer>" + at most "-18" + "</answer>" + EOS = 21 tokens
        "chain_sum": _gym_task("chain_sum", "chain_sum", 24),
    }
    arms = {"base": Arm("base", train=False)}
    for beta in (0.01, 0.1):
        arms[f"dpo_b{beta}"] = Arm(f"dpo_b{beta}", config={"beta": beta, "importance_sampling": False})
        arms[f"isdpo_b{beta}"] = Arm(f"isdpo_b{beta}", config={"beta": beta, "importance_sampling": True})
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
        plots=[plot_frontier],
        claims=CLAIMS,
    )
