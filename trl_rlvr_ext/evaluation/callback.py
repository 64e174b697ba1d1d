"""`PassAtKCallback`: held-out Pass@k every N optimizer steps, logged with the trainer's own metrics."""

from collections.abc import Callable, Sequence

import numpy as np
import torch
from transformers import TrainerCallback

from .evaluator import count_correct
from .generation import TransformersBackend
from .pass_at_k import curve_from_counts


class PassAtKCallback(TrainerCallback):
    r"""
    Evaluate Pass@k on a held-out set every ``eval_steps`` optimizer steps and log ``eval/pass@<k>``.

    Each process samples its share of the problems (problem ``i`` goes to rank ``i % world_size``); the per-problem
    counts are gathered, so every rank computes and logs the same numbers. Sampling runs under
    `torch.random.fork_rng` with a fixed seed: the training run's RNG stream is exactly what it would be without the
    callback, and every evaluation samples with the same seed (common random numbers make the steps comparable).

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
    ):
        if eval_steps < 1:
            raise ValueError(f"eval_steps must be at least 1, got {eval_steps}.")
        if num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, got {num_samples}.")
        if ks is not None and max(ks) > num_samples:
            raise ValueError(f"ks={list(ks)} asks for k > num_samples={num_samples}; raise num_samples or drop them.")
        self.rows = [dict(row) for row in eval_dataset]
        if not self.rows or "prompt" not in self.rows[0]:
            raise ValueError("eval_dataset must be a non-empty set of problems with a 'prompt' column.")
        self.reward_funcs = [reward_funcs] if callable(reward_funcs) else list(reward_funcs)
        self.eval_steps, self.num_samples, self.ks = eval_steps, num_samples, ks
        self.temperature, self.top_p, self.max_new_tokens = temperature, top_p, max_new_tokens
        self.correct_threshold, self.batch_size, self.seed = correct_threshold, batch_size, seed
        self.eval_on_start, self.prefix = eval_on_start, prefix
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
        """Run the evaluation now (every process must call it) and return ``{"eval/pass@k": value}``."""
        trainer = self.trainer
        accelerator = trainer.accelerator
        rank, world = accelerator.process_index, accelerator.num_processes
        # Equal shard sizes, so every rank makes the same number of `generate` calls (ZeRO-3 gathers are collective)
        per_rank = -(-len(self.rows) // world)
        mine = list(range(rank, len(self.rows), world))
        padded = mine + [mine[-1] if mine else 0] * (per_rank - len(mine))
        max_new_tokens = self.max_new_tokens or getattr(trainer.args, "max_completion_length", None) or 256
        from trl.models import unwrap_model_for_generation

        device = accelerator.device
        devices = [device] if device.type == "cuda" else []
        with (
            torch.random.fork_rng(devices=devices),
            unwrap_model_for_generation(
                trainer.model_wrapped,
                accelerator,
                gather_deepspeed3_params=getattr(trainer.args, "ds3_gather_for_generation", True),
            ) as model,
        ):
            backend = TransformersBackend(model, trainer.processing_class, batch_size=self.batch_size)
            counts = count_correct(
                backend,
                trainer.processing_class,
                [self.rows[i] for i in padded],
                self.reward_funcs,
                self.num_samples,
                temperature=self.temperature,
                top_p=self.top_p,
                max_new_tokens=max_new_tokens,
                correct_threshold=self.correct_threshold,
                problems_per_batch=max(1, self.batch_size // self.num_samples),
                seed=self.seed + rank * 1_000_003,  # ranks hold different problems; keep their streams apart too
            )
        from accelerate.utils import gather_object

        pairs = gather_object([(i, int(c)) for i, c in zip(mine, counts[: len(mine)])])
        num_correct = np.zeros(len(self.rows), dtype=np.int64)
        for i, c in pairs:
            num_correct[i] = c
        num_samples = np.full(len(self.rows), self.num_samples, dtype=np.int64)
        curve = curve_from_counts(num_samples, num_correct, self.ks)
        return {f"{self.prefix}pass@{k}": value for k, value in curve.items()}
