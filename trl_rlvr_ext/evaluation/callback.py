"""`PassAtKCallback`: held-out pass@k, pass^k and maj@k every N optimizer steps, logged with the trainer's metrics."""

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import torch
from transformers import TrainerCallback

from ..sampling import (
    SamplingSettings,
    TrainerVLLMBackend,
    TransformersBackend,
    as_reward_func_list,
    sampling_from_keywords,
)
from .answers import resolve_answer_extractor
from .evaluator import PassAtKResult, count_outcomes


class PassAtKCallback(TrainerCallback):
    r"""
    Evaluate a held-out set every ``eval_steps`` optimizer steps and log ``eval/pass@<k>``, ``eval/pass^<k>``, with an
    answer extractor ``eval/maj@<k>``, and with a confidence level ``eval/<metric>_ci_low`` / ``eval/<metric>_ci_high``
    (percentile bootstrap over problems; see docs/reference/metrics.md).

    Each process samples its share of the problems (problem ``i`` goes to rank ``i % world_size``); the per-problem
    counts (and answer classes) are gathered, so every rank computes and logs the same numbers. Sampling runs under
    `torch.random.fork_rng` with a fixed seed: the training run's RNG stream is exactly what it would be without the
    callback, and every evaluation samples with the same seed (common random numbers make the steps comparable).

    When the trainer generates with vLLM (``trainer.use_vllm``), the evaluation samples through the trainer's own
    engine (`TrainerVLLMBackend`: weights synced as the trainer syncs them, colocate or server mode) instead of
    ``model.generate``. vLLM samples from its engine's random state, so those evaluations are not seeded.

    The callback must know its trainer, to log into the trainer's metrics (TRL trainers average ``_metrics`` into each
    log record) and to reach the wrapped model under DeepSpeed/FSDP. Give it with ``trainer=`` or `bind`:

    ```python
    trainer = RLVRGRPOTrainer(model=..., reward_funcs=[accuracy], args=args, train_dataset=train)
    trainer.add_callback(PassAtKCallback(test_set, [accuracy], trainer=trainer, eval_steps=50, num_samples=16))
    ```

    Args:
        eval_dataset: problems with a ``prompt`` column and the reward functions' columns.
        reward_funcs: TRL-style reward functions; a sample is correct when each returns at least ``correct_threshold``.
        trainer: the trainer to log into (or call `bind` later).
        eval_steps: evaluate when ``global_step % eval_steps == 0``.
        num_samples: ``n``, samples per problem.
        ks: the k's to log (default 1, 2, 4, ..., n).
        temperature, top_p: sampling settings.
        max_new_tokens: generation budget (default: the trainer's ``max_completion_length``, else 256).
        correct_threshold: the reward that counts as correct.
        batch_size: sequences per ``generate`` call.
        seed: sampling seed.
        eval_on_start: also evaluate before the first step (logged at step 0 with the first training log).
        prefix: metric name prefix.
        answer_extractor: how to read each sample's answer for maj@k: ``"auto"`` (from the reward functions: the toy
            reward, our math reward and TRL's ``accuracy_reward`` have one; others get no maj@k), ``"toy"``,
            ``"math"``, a callable ``text -> str | None``, or `None` (no maj@k).
        confidence_level: level of the bootstrap intervals over problems; `None` logs no intervals.
        bootstrap_resamples: bootstrap resamples (seeded with ``seed``, so every rank draws the same ones).
        sampling (`trl_rlvr_ext.sampling.SamplingSettings`, *optional*): all the sampling settings as one value,
            instead of ``num_samples``, ``temperature``, ``top_p``, ``max_new_tokens`` and ``seed`` (which must then
            keep their defaults: giving a setting both ways is an error). Its ``max_new_tokens`` is used as given; its
            seed also seeds the bootstrap (0 when it is `None`; rank ``r`` samples with ``seed + r * 1_000_003``).
    """

    def __init__(
        self,
        eval_dataset,
        reward_funcs: Callable | Sequence[Callable],
        trainer=None,
        eval_steps: int = 100,
        num_samples: int = 16,
        ks: Sequence[int] | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int | None = None,
        correct_threshold: float = 1.0,
        batch_size: int = 64,
        seed: int = 0,
        eval_on_start: bool = False,
        prefix: str = "eval/",
        answer_extractor="auto",
        confidence_level: float | None = 0.95,
        bootstrap_resamples: int = 1000,
        sampling: SamplingSettings | None = None,
    ):
        if eval_steps < 1:
            raise ValueError(f"eval_steps must be at least 1, got {eval_steps}.")
        # `max_new_tokens=None` means "the trainer's max_completion_length", known only once a trainer is bound
        self.max_new_tokens_from_trainer = sampling is None and max_new_tokens is None
        if self.max_new_tokens_from_trainer:
            max_new_tokens = SamplingSettings.max_new_tokens  # a stand-in until `evaluate` reads the trainer's
        self.sampling = sampling_from_keywords(sampling, PassAtKCallback.__init__, locals())
        num_samples = self.sampling.num_samples
        if ks is not None and max(ks) > num_samples:
            raise ValueError(f"ks={list(ks)} asks for k > num_samples={num_samples}; raise num_samples or drop them.")
        self.rows = [dict(row) for row in eval_dataset]
        if not self.rows or "prompt" not in self.rows[0]:
            raise ValueError("eval_dataset must be a non-empty set of problems with a 'prompt' column.")
        self.reward_funcs = as_reward_func_list(reward_funcs)
        self.eval_steps, self.num_samples, self.ks = eval_steps, num_samples, ks
        self.correct_threshold, self.batch_size = correct_threshold, batch_size
        self.seed = 0 if self.sampling.seed is None else self.sampling.seed  # the bootstrap's seed
        self.eval_on_start, self.prefix = eval_on_start, prefix
        self.answer_extractor = resolve_answer_extractor(answer_extractor, self.reward_funcs)
        if confidence_level is not None and not 0.0 < confidence_level < 1.0:
            raise ValueError(f"confidence_level must lie in (0, 1) or be None, got {confidence_level}.")
        if bootstrap_resamples < 1:
            raise ValueError(f"bootstrap_resamples must be at least 1, got {bootstrap_resamples}.")
        self.confidence_level, self.bootstrap_resamples = confidence_level, bootstrap_resamples
        self.last_result: PassAtKResult | None = (
            None  # the full result (counts, answer classes) of the last evaluation
        )
        self.trainer = None
        self.history: list[tuple[int, dict[str, float]]] = []  # (global_step, metrics) of every evaluation
        if trainer is not None:
            self.bind(trainer)

    def bind(self, trainer) -> "PassAtKCallback":
        """Attach the trainer whose model is evaluated and whose logs receive the metrics; returns the callback."""
        self.trainer = trainer
        return self

    def on_train_begin(self, args, state, control, **kwargs):
        if self.trainer is None:
            raise ValueError(
                "PassAtKCallback has no trainer to log into. Create it with `trainer=trainer` after building the "
                "trainer, e.g. `trainer.add_callback(PassAtKCallback(test_set, reward_funcs, trainer=trainer))`, or "
                "call `callback.bind(trainer)` before `trainer.train()`."
            )
        if self.eval_on_start and state.global_step == 0:
            self._log(self.evaluate(), control, state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.eval_steps == 0:
            self._log(self.evaluate(), control, state.global_step)

    def _log(self, metrics: dict[str, float], control, step: int):
        self.history.append((step, metrics))
        trainer_metrics = getattr(self.trainer, "_metrics", None)
        if isinstance(trainer_metrics, dict) and "train" in trainer_metrics:
            # TRL trainers average `_metrics[mode]` into the next log record; force that record to be this step's
            for key, value in metrics.items():
                trainer_metrics["train"][key].append(value)
            control.should_log = True
        else:
            self.trainer.log(dict(metrics))

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Run the evaluation now (every process must call it) and return the metrics, e.g. ``{"eval/pass@1": ...}``."""
        trainer = self.trainer
        accelerator = trainer.accelerator
        rank, world = accelerator.process_index, accelerator.num_processes
        # Equal shard sizes, so every rank makes the same number of `generate` calls (ZeRO-3 gathers and vLLM server
        # requests are collective)
        per_rank = -(-len(self.rows) // world)
        mine = list(range(rank, len(self.rows), world))
        padded = mine + [mine[-1] if mine else 0] * (per_rank - len(mine))
        max_new_tokens = self.sampling.max_new_tokens
        if self.max_new_tokens_from_trainer:
            max_new_tokens = getattr(trainer.args, "max_completion_length", None) or 256
        device = accelerator.device
        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            if getattr(trainer, "use_vllm", False):
                counts, classes = self._count(
                    TrainerVLLMBackend(trainer), [self.rows[i] for i in padded], max_new_tokens, rank
                )
            else:
                from trl.models import unwrap_model_for_generation

                with unwrap_model_for_generation(
                    trainer.model_wrapped,
                    accelerator,
                    gather_deepspeed3_params=getattr(trainer.args, "ds3_gather_for_generation", True),
                ) as model:
                    backend = TransformersBackend(model, trainer.processing_class, batch_size=self.batch_size)
                    counts, classes = self._count(backend, [self.rows[i] for i in padded], max_new_tokens, rank)
        from accelerate.utils import gather_object

        local = [(i, int(counts[j]), None if classes is None else classes[j]) for j, i in enumerate(mine)]
        num_correct = np.zeros(len(self.rows), dtype=np.int64)
        answer_classes = None if self.answer_extractor is None else [[] for _ in self.rows]
        for i, c, problem_classes in gather_object(local):
            num_correct[i] = c
            if answer_classes is not None:
                answer_classes[i] = problem_classes
        num_samples = np.full(len(self.rows), self.num_samples, dtype=np.int64)
        # Every rank holds the same gathered counts and seeds the bootstrap alike, so all log identical numbers
        result = PassAtKResult.from_counts(
            "eval",
            num_samples,
            num_correct,
            self.ks,
            answer_classes,
            confidence_level=self.confidence_level,
            bootstrap_resamples=self.bootstrap_resamples,
            seed=self.seed,
        )
        self.last_result = result
        return self.metrics_of(result)

    def _count(self, backend, rows, max_new_tokens: int, rank: int):
        # ranks hold different problems; keep their streams apart too
        sampling = dataclasses.replace(self.sampling, max_new_tokens=max_new_tokens).offset_seed(rank * 1_000_003)
        return count_outcomes(
            backend,
            self.trainer.processing_class,
            rows,
            self.reward_funcs,
            sampling,
            correct_threshold=self.correct_threshold,
            problems_per_batch=max(1, self.batch_size // self.num_samples),
            answer_extractor=self.answer_extractor,
        )

    def metrics_of(self, result: PassAtKResult) -> dict[str, float]:
        """The logged metrics of a result: ``<prefix>pass@<k>``, ``<prefix>pass^<k>``, ``<prefix>maj@<k>`` and
        ``<prefix><metric>_ci_low`` / ``_ci_high``."""
        metrics = {f"{self.prefix}pass@{k}": v for k, v in result.pass_at_k.items()}
        metrics.update({f"{self.prefix}pass^{k}": v for k, v in result.pass_hat_k.items()})
        if result.maj_at_k is not None:
            metrics.update({f"{self.prefix}maj@{k}": v for k, v in result.maj_at_k.items()})
        for name, (low, high) in result.intervals.items():
            metrics[f"{self.prefix}{name}_ci_low"] = low
            metrics[f"{self.prefix}{name}_ci_high"] = high
        return metrics
