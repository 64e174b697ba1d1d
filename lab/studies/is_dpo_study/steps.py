"""One ``is_dpo`` run: DPO or IS-DPO on the task's shared pairs, the frontier (KL and greedy accuracy per probed step),
early stopping on validation problems, Pass@k, ``result.json``.
"""

import hashlib
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from ..design import Arm, Study, StudySizes, StudyTask
from ..run_files import RunSpec, finished_result, run_dir
from ..run_inputs import common_training_settings, load_run_inputs, validation_split
from ..runner import evaluate_and_record
from .data import build_preference_data
from .design import DATA_PROMPTS, FRONTIER_SAMPLES, QUICK_DATA_PROMPTS, RECORDS_FRONTIER, SETTINGS


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


def state_fingerprint(state: dict) -> str:
    """A short hash of a model state (every tensor's name, dtype, shape and bytes): equal exactly when the weights are.
    The record of an early-stopped run holds the chosen checkpoint's and the evaluated model's, so that a reader can
    check that the evaluated model is the chosen step's."""
    import torch

    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


class BestCheckpoint:
    """Early stopping: the model state at the best validation score observed so far, kept in memory (the study's
    models are ~0.66 M parameters). Step 0, the reference itself, is a candidate (stopping there is not training). A
    tie keeps the earlier step: a later step at the same score has moved further from the reference for nothing.
    `restore` loads that state into the model and returns the record."""

    def __init__(self, metric: str = "greedy_acc"):
        self.metric = metric
        self.step, self.score, self.state, self.fingerprint = None, None, None, None
        self.observed: list[int] = []

    def observe(self, step: int, score: float, model) -> None:
        self.observed.append(step)
        if self.score is None or score > self.score:
            self.step, self.score = step, score
            self.state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
            self.fingerprint = state_fingerprint(self.state)

    def restore(self, model) -> dict:
        if self.state is None:
            raise RuntimeError("Early stopping observed no validation score: the frontier measured no step.")
        last = state_fingerprint(model.state_dict())
        model.load_state_dict(self.state)
        return {
            "metric": f"validation {self.metric}",
            "chosen_step": self.step,
            f"validation_{self.metric}": self.score,
            "steps_considered": list(self.observed),
            "checkpoint_fingerprint": self.fingerprint,
            "last_step_fingerprint": last,
        }


def _frontier_callback_class():
    from transformers import TrainerCallback

    class FrontierCallback(TrainerCallback):
        """Gold (greedy accuracy, sampled pass@1) and KL(π_θ || π_ref) at the steps ``steps`` (0 included).

        ``history`` holds one dict per measurement on ``rows`` (the test problems): ``step``, ``greedy_acc``,
        ``pass1`` and ``kl`` (`sampled_kl` on ``num_samples`` samples per prompt, seeded the same at every
        measurement; the sampling runs under `torch.random.fork_rng`, so measuring never moves the training RNG and
        a denser schedule trains the same model). With ``validation_rows``, ``validation_history`` holds the same on
        those, and ``best`` (a `BestCheckpoint`) follows their greedy accuracy. The policy and reference are the
        trainer's (``trainer.model``, ``trainer.ref_model``), or given to `measure` (the base arm: no trainer).
        """

        def __init__(
            self,
            trainer,
            rows,
            reward,
            max_new_tokens: int,
            steps: Sequence[int],
            num_samples: int,
            seed: int,
            validation_rows=None,
            best: BestCheckpoint | None = None,
        ):
            from trl_rlvr_ext.sampling import SamplingSettings, as_reward_func_list

            if best is not None and not validation_rows:
                raise ValueError("Early stopping needs validation rows to choose on; the test rows are not for that.")
            self.trainer, self.rows, self.steps = trainer, rows, set(steps)
            self.validation_rows, self.best = validation_rows, best
            self.reward = as_reward_func_list(reward)
            self.sampling = SamplingSettings(
                num_samples=num_samples, temperature=1.0, max_new_tokens=max_new_tokens, seed=seed
            )
            self.history: list[dict] = []
            self.validation_history: list[dict] = []

        def _measure_rows(self, rows, step: int, model, ref_model, tokenizer) -> dict:
            from trl_rlvr_ext.evaluation.boundary import sequence_logps
            from trl_rlvr_ext.sampling import TransformersBackend, sample_and_grade

            backend = TransformersBackend(model, tokenizer, batch_size=256)
            greedy = sample_and_grade(backend, tokenizer, rows, self.reward, self.sampling.as_greedy())
            sampled = sample_and_grade(backend, tokenizer, rows, self.reward, self.sampling)
            prompts = [p for p in sampled.prompt_ids for _ in range(self.sampling.num_samples)]
            completions = [c for per_prompt in sampled.completion_ids for c in per_prompt]
            pad = backend.pad_token_id
            policy = sequence_logps(model, pad, prompts, completions, batch_size=256)
            ref = sequence_logps(ref_model, pad, prompts, completions, batch_size=256)
            return {
                "step": step,
                "greedy_acc": float(greedy.correct.mean()),
                "pass1": float(sampled.correct.mean()),
                "kl": sampled_kl(policy, ref),
            }

        def measure(self, step: int, model=None, ref_model=None, tokenizer=None) -> dict:
            if model is None:
                model, ref_model, tokenizer = self.trainer.model, self.trainer.ref_model, self.trainer.processing_class
            entry = self._measure_rows(self.rows, step, model, ref_model, tokenizer)
            self.history.append(entry)
            line = ", ".join(f"{k} {v:.3f}" for k, v in entry.items() if k != "step")
            if self.validation_rows:
                validation = self._measure_rows(self.validation_rows, step, model, ref_model, tokenizer)
                self.validation_history.append(validation)
                line += "; validation " + ", ".join(f"{k} {v:.3f}" for k, v in validation.items() if k != "step")
                if self.best is not None:
                    self.best.observe(step, validation[self.best.metric], model)
            print(f"    frontier step {step}: {line}")
            return entry

        def on_train_begin(self, args, state, control, **kwargs):
            if not self.history:
                self.measure(0)

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step in self.steps:
                self.measure(state.global_step)

    return FrontierCallback


# ---------------------------------------------------------------- one run
# Arm options the run reads itself (not ISDPOConfig fields): ``early_stopping``, the final model is the frontier
# step's with the best validation greedy accuracy (a setting with validation problems only).
_RUN_OPTIONS = ("early_stopping",)


def _dpo_config(run_dir: Path, arm: Arm, sizes: StudySizes, seed: int, quick: bool = False):
    from trl_rlvr_ext.dpo.dpo_config import ISDPOConfig

    settings = {
        **common_training_settings(run_dir, sizes, seed, quick),  # activation checkpointing off: DPOConfig turns it on
        "loss_type": "sigmoid",
        "per_device_train_batch_size": sizes.num_prompts,
        **{key: value for key, value in arm.config.items() if key not in _RUN_OPTIONS},  # e.g. learning_rate
    }
    return ISDPOConfig(**settings), settings


def run_one(
    study: Study,
    task: StudyTask,
    arm: Arm,
    seed: int,
    out_dir: Path,
    sizes: StudySizes,
    quick: bool,
    command: str,
    setting: str | None = None,
) -> dict:
    """One (task, arm, seed): DPO or IS-DPO on the task's shared pairs, the frontier, Pass@k; writes ``result.json``.

    In a `FrontierSetting` with validation problems the frontier is measured on them too (``frontier_validation``;
    ``frontier`` stays the test problems), and an ``early_stopping`` arm's final model is its best validation step's
    (``early_stopping`` in the record: the step, and the fingerprints of that checkpoint, of the last step's model and
    of the model evaluated)."""
    from transformers import AutoTokenizer

    from trl_rlvr_ext.dpo.behavior import BEHAVIOR_COLUMNS
    from trl_rlvr_ext.dpo.dpo_trainer import ISDPOTrainer

    if (done := finished_result(out_dir, task, arm, seed)) is not None:
        return done
    folder = run_dir(out_dir, task.name, arm.name, seed)
    if sizes.steps_per_generation != 1:
        raise ValueError(
            f"steps_per_generation={sizes.steps_per_generation} means nothing to the is_dpo study (offline pairs, no "
            "generation during training); leave it at 1. The batch is num_prompts pairs per step."
        )
    design = RECORDS_FRONTIER if setting is None else study.get_setting(setting)
    early_stopping = bool(arm.config.get("early_stopping"))
    num_validation = design.num_validation(quick)
    if early_stopping and not num_validation:
        raise ValueError(
            f"Arm {arm.name!r} early-stops on the validation problems, which "
            f"{'the default design' if setting is None else f'setting {setting!r}'} does not measure: run it in a "
            f"setting with validation problems ({sorted(k for k, v in SETTINGS.items() if v.validation_problems)})."
        )
    # The shared data are built (once per task) outside the run's wall time; their build time is in their meta.
    base = design.base
    pairs, data_meta = build_preference_data(task, sizes, quick, out_dir, base=base) if arm.train else (None, None)
    start = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    splits, test, probe_rows, reward, base_path, evaluated_on = load_run_inputs(
        task, sizes, quick, design.evaluate_on, base
    )
    validation_rows, validation = None, None
    if num_validation:
        data_prompts = QUICK_DATA_PROMPTS if quick else DATA_PROMPTS
        validation_rows, validation = validation_split(splits, sizes, num_validation, data_prompts)
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    best = BestCheckpoint() if early_stopping else None
    config, log_history, train_seconds, steps, stopped = None, [], 0.0, [0], None
    if arm.train:
        args, config = _dpo_config(folder, arm, sizes, seed, quick)
        steps = design.probe_steps(args.max_steps, sizes.probe_every)
    frontier = _frontier_callback_class()(
        None,
        probe_rows,
        reward,
        task.max_completion_length,
        steps,
        FRONTIER_SAMPLES,
        2000 + seed,
        validation_rows=validation_rows,
        best=best,
    )
    if arm.train:
        if not args.importance_sampling:  # stock DPO sees plain preference data
            pairs = pairs.remove_columns(list(BEHAVIOR_COLUMNS))
        trainer = ISDPOTrainer(model=base_path, args=args, train_dataset=pairs, processing_class=tokenizer)
        frontier.trainer = trainer
        trainer.add_callback(frontier)
        t0 = time.perf_counter()
        trainer.train()
        train_seconds = time.perf_counter() - t0
        model, log_history = trainer.model, trainer.state.log_history
        if best is not None:
            stopped = best.restore(model)
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
    if setting is not None:  # the settings' keys; a run of the defaults records exactly what the records hold
        extra["probe_steps"] = steps
    if validation is not None:
        extra.update(frontier_validation=frontier.validation_history, validation=validation)
    if stopped is not None:
        extra["early_stopping"] = {**stopped, "evaluated_fingerprint": state_fingerprint(model.state_dict())}
    if base:
        extra["base_overrides"] = base
    if evaluated_on:  # the frontier and the Pass@k are not on the test problems: it says so
        extra["evaluated_on"] = evaluated_on
    return evaluate_and_record(
        RunSpec(study, task, arm, seed, out_dir, sizes, quick, command, setting),
        model,
        tokenizer,
        test,
        reward,
        base_path=base_path,
        start=start,
        train_seconds=train_seconds,
        extra=extra,
    )
