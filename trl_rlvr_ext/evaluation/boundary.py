r"""`BoundaryProbeCallback`: reasoning-boundary diagnostics during training, by teacher forcing (no generation).

SELF (https://huggingface.co/papers/2510.02230) explains the shrinking reasoning boundary of on-policy RLVR by two
effects on the likelihood of *correct* solutions: **negative interference** (learning some problems lowers the
likelihood of correct solutions to others) and **winner-take-all** (problems the model already finds likely are
reinforced, unlikely ones suppressed). Both are visible without sampling: fix a probe set of (prompt, correct
completion) pairs, and track each pair's log-likelihood ``log pi(y* | x)`` (the sum over the completion's tokens,
EOS included) as training runs.

Metrics, against the base log-likelihoods ``b_i`` measured when training starts, with ``d_i = l_i - b_i``:

- ``boundary/mean_logp_correct``: the mean of ``l_i``;
- ``boundary/interference_frac``: the share of probes with ``d_i < -threshold`` (a correct solution became less likely
  by more than ``threshold`` nats; the default ``log 2`` means: at least halved);
- ``boundary/winner_take_all``: Spearman's rank correlation between ``b_i`` and ``d_i`` (positive: the likelier a
  problem was, the more it gained);
- ``boundary/delta_q1`` ... ``boundary/delta_q5``: the mean ``d_i`` in each quintile of ``b_i`` (q1: the least likely
  fifth of the probes).
"""

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from transformers import TrainerCallback


NUM_QUANTILES = 5


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties sharing their average rank (as Spearman's rho needs)."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), dtype=np.float64)
    sorted_values = values[order]
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson's on average ranks); NaN when either side is constant."""
    rx, ry = _ranks(np.asarray(x, dtype=np.float64)), _ranks(np.asarray(y, dtype=np.float64))
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = math.sqrt(float((rx**2).sum() * (ry**2).sum()))
    return float((rx * ry).sum() / denominator) if denominator > 0 else float("nan")


def boundary_metrics(
    base_logps: Sequence[float], logps: Sequence[float], threshold: float = math.log(2), prefix: str = "boundary/"
) -> dict[str, float]:
    """The probe metrics (see the module docstring) of log-likelihoods ``logps`` against ``base_logps``.

    Quintiles: the probes sorted by base log-likelihood (ties by position) and cut into 5 groups of sizes as equal as
    ``numpy.array_split`` makes them (earlier groups take the remainder); a group with no probe reports NaN.
    """
    base = np.asarray(base_logps, dtype=np.float64)
    now = np.asarray(logps, dtype=np.float64)
    if base.shape != now.shape or base.ndim != 1 or len(base) == 0:
        raise ValueError(
            f"Need two equal, non-empty 1-D sequences of log-likelihoods, got {base.shape} and {now.shape}."
        )
    delta = now - base
    metrics = {
        f"{prefix}mean_logp_correct": float(now.mean()),
        f"{prefix}interference_frac": float(np.mean(delta < -threshold)),
        f"{prefix}winner_take_all": spearman(base, delta),
    }
    groups = np.array_split(np.argsort(base, kind="stable"), NUM_QUANTILES)
    for q, group in enumerate(groups, start=1):
        metrics[f"{prefix}delta_q{q}"] = float(delta[group].mean()) if len(group) else float("nan")
    return metrics


@torch.no_grad()
def sequence_logps(model, pad_token_id: int, prompt_ids, completion_ids, batch_size: int = 64) -> list[float]:
    """``log p(completion | prompt)`` under ``model``: the sum of the completion tokens' log-probabilities."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[float] = []
    try:
        for start in range(0, len(prompt_ids), batch_size):
            prompts = prompt_ids[start : start + batch_size]
            completions = completion_ids[start : start + batch_size]
            seqs = [list(p) + list(c) for p, c in zip(prompts, completions)]
            width = max(len(s) for s in seqs)
            input_ids = torch.full((len(seqs), width), pad_token_id, dtype=torch.long)
            attention_mask = torch.zeros((len(seqs), width), dtype=torch.long)
            for r, s in enumerate(seqs):  # right padding: positions are those of the unpadded sequence
                input_ids[r, : len(s)] = torch.tensor(s, dtype=torch.long)
                attention_mask[r, : len(s)] = 1
            logits = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).logits
            logps = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            token_logps = logps.gather(-1, input_ids[:, 1:].to(device).unsqueeze(-1)).squeeze(-1)
            for r, (p, c) in enumerate(zip(prompts, completions)):
                # token t is predicted at position t - 1
                out.append(token_logps[r, len(p) - 1 : len(p) + len(c) - 1].sum().item())
    finally:
        model.train(was_training)
    return out


def _completion_ids(tokenizer, completion) -> list[int]:
    """Token ids of a given correct completion (a string, or one assistant message), ending with EOS."""
    if isinstance(completion, list):
        if (
            not completion
            or not isinstance(completion[-1], dict)
            or not isinstance(completion[-1].get("content"), str)
        ):
            raise ValueError(
                f"A conversational completion must be a list of messages with string content, got {completion!r}."
            )
        completion = completion[-1]["content"]
    if not isinstance(completion, str):
        raise TypeError(
            f"A probe's completion must be a string or a list of messages, got {type(completion).__name__}."
        )
    ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    return [*ids, tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else ids


class BoundaryProbeCallback(TrainerCallback):
    r"""
    Every ``eval_steps`` optimizer steps, teacher-force a fixed probe set of (prompt, correct completion) pairs and
    log the reasoning-boundary metrics of `boundary_metrics` (``boundary/mean_logp_correct``,
    ``boundary/interference_frac``, ``boundary/winner_take_all``, ``boundary/delta_q1`` ... ``q5``).

    The probes are either given (``probes``: rows with ``prompt`` and ``completion``), or harvested once, when
    training starts, from the model's own correct samples (``problems`` + ``reward_funcs``: ``num_harvest_samples``
    samples per problem, the first correct one kept; problems never solved are left out, and ``boundary/num_probes``
    says how many remain). Prompts are standard (strings) or conversational (messages, rendered with the tokenizer's
    chat template and the generation prompt, as `GRPOTrainer` renders them). The base log-likelihoods are measured
    when training starts.

    Under several processes each rank scores its share of the probes (probe ``i`` on rank ``i % world_size``, equal
    shard sizes), the results are gathered, and every rank logs the same numbers. Harvesting samples under
    `torch.random.fork_rng`, so the training run's RNG stream is unchanged. When the trainer generates with vLLM
    (``trainer.use_vllm``), harvesting samples through the trainer's own engine (`TrainerVLLMBackend`, not seeded).

    ```python
    trainer = RLVRGRPOTrainer(model=..., reward_funcs=[reward], args=args, train_dataset=train)
    trainer.add_callback(BoundaryProbeCallback(problems=test_set, reward_funcs=[reward], trainer=trainer, eval_steps=20))
    ```

    Args:
        probes: rows with ``prompt`` and a correct ``completion`` (string or one assistant message).
        problems: problems to harvest probes from (rows with ``prompt`` and the reward functions' columns).
        reward_funcs: graders for harvesting; a sample is correct when each returns at least ``correct_threshold``.
        trainer: the trainer to log into (or call `bind` later).
        eval_steps: measure when ``global_step % eval_steps == 0``.
        threshold: the drop in log-likelihood (nats) that counts as interference (default ``log 2``: halved).
        num_harvest_samples, temperature, max_new_tokens, correct_threshold, seed: harvesting settings
            (``max_new_tokens`` defaults to the trainer's ``max_completion_length``, else 256).
        batch_size: sequences per forward or ``generate`` call.
        prefix: metric name prefix.
    """

    def __init__(
        self,
        probes=None,
        *,
        problems=None,
        reward_funcs: Callable | Sequence[Callable] | None = None,
        trainer=None,
        eval_steps: int = 50,
        threshold: float = math.log(2),
        num_harvest_samples: int = 16,
        temperature: float = 1.0,
        max_new_tokens: int | None = None,
        correct_threshold: float = 1.0,
        batch_size: int = 64,
        seed: int = 0,
        prefix: str = "boundary/",
    ):
        if (probes is None) == (problems is None):
            raise ValueError(
                "Give exactly one of `probes` (rows with 'prompt' and a correct 'completion') or `problems` with "
                "`reward_funcs` (the correct completions are then harvested from the model's own samples)."
            )
        if problems is not None and not reward_funcs:
            raise ValueError("Harvesting probes from `problems` needs `reward_funcs` to tell correct samples apart.")
        if eval_steps < 1:
            raise ValueError(f"eval_steps must be at least 1, got {eval_steps}.")
        if threshold < 0:
            raise ValueError(f"threshold={threshold} must be non-negative (a drop in nats).")
        rows = [dict(row) for row in (probes if probes is not None else problems)]
        required = ("prompt", "completion") if probes is not None else ("prompt",)
        if not rows or any(key not in rows[0] for key in required):
            raise ValueError(f"The probe set must be non-empty with columns {list(required)}.")
        self.rows, self.harvest = rows, probes is None
        self.reward_funcs = [reward_funcs] if callable(reward_funcs) else list(reward_funcs or [])
        self.eval_steps, self.threshold = eval_steps, threshold
        self.num_harvest_samples, self.temperature, self.max_new_tokens = (
            num_harvest_samples,
            temperature,
            max_new_tokens,
        )
        self.correct_threshold, self.batch_size, self.seed, self.prefix = correct_threshold, batch_size, seed, prefix
        self.trainer = None
        self.prompt_ids: list[list[int]] | None = None
        self.completion_ids: list[list[int]] | None = None
        self.base_logps: np.ndarray | None = None
        self.history: list[tuple[int, dict[str, float]]] = []  # (global_step, metrics) of every measurement
        if trainer is not None:
            self.bind(trainer)

    def bind(self, trainer) -> "BoundaryProbeCallback":
        """Attach the trainer whose model is probed and whose logs receive the metrics; returns the callback."""
        self.trainer = trainer
        return self

    # ------------------------------------------------------------------ probes
    def _shard(self, n: int) -> tuple[list[int], list[int]]:
        accelerator = self.trainer.accelerator
        rank, world = accelerator.process_index, accelerator.num_processes
        mine = list(range(rank, n, world))
        per_rank = -(-n // world)  # equal shard sizes: every rank runs the same number of forwards
        return mine, mine + [mine[-1] if mine else 0] * (per_rank - len(mine))

    def _unwrapped(self):
        from trl.models import unwrap_model_for_generation

        trainer = self.trainer
        return unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=getattr(trainer.args, "ds3_gather_for_generation", True),
        )

    def _prepare_probes(self) -> None:
        from accelerate.utils import gather_object

        from ..sampling import (
            SamplingSettings,
            TrainerVLLMBackend,
            TransformersBackend,
            render_prompt_ids,
            sample_and_grade,
        )

        tokenizer = self.trainer.processing_class
        if not self.harvest:
            self.prompt_ids = render_prompt_ids(tokenizer, [row["prompt"] for row in self.rows])
            self.completion_ids = [_completion_ids(tokenizer, row["completion"]) for row in self.rows]
            return
        mine, padded = self._shard(len(self.rows))
        max_new_tokens = self.max_new_tokens or getattr(self.trainer.args, "max_completion_length", None) or 256
        device = self.trainer.accelerator.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), self._unwrapped() as model:
            if getattr(self.trainer, "use_vllm", False):  # the trainer's engine, as PassAtKCallback samples
                backend = TrainerVLLMBackend(self.trainer)
            else:
                backend = TransformersBackend(model, tokenizer, batch_size=self.batch_size)
            found = []
            per_batch = max(1, self.batch_size // self.num_harvest_samples)
            for b, start in enumerate(range(0, len(padded), per_batch)):
                chunk = padded[start : start + per_batch]
                sampling = SamplingSettings(
                    num_samples=self.num_harvest_samples,
                    temperature=self.temperature,
                    max_new_tokens=max_new_tokens,
                    seed=self.seed + 1_000_003 * self.trainer.accelerator.process_index + b,
                )
                graded = sample_and_grade(
                    backend, tokenizer, [self.rows[i] for i in chunk], self.reward_funcs, sampling,
                    correct_threshold=self.correct_threshold,
                )  # fmt: skip
                prompt_ids, sampled, correct = graded.prompt_ids, graded.completion_ids, graded.correct
                for j, i in enumerate(chunk):
                    if start + j >= len(mine):  # padding
                        continue
                    hits = np.flatnonzero(correct[j])
                    if len(hits):
                        found.append((i, list(prompt_ids[j]), list(sampled[j][hits[0]])))
        gathered = sorted(gather_object(found))
        if not gathered:
            raise ValueError(
                f"BoundaryProbeCallback found no correct sample among {self.num_harvest_samples} per problem for any "
                f"of the {len(self.rows)} problems: give probes with known correct completions, more problems, or "
                "more samples (num_harvest_samples)."
            )
        self.probe_indices = [i for i, _, _ in gathered]
        self.prompt_ids = [p for _, p, _ in gathered]
        self.completion_ids = [c for _, _, c in gathered]

    def measure(self) -> np.ndarray:
        """Log-likelihood of every probe's correct completion under the current model (every process must call it)."""
        from accelerate.utils import gather_object

        mine, padded = self._shard(len(self.prompt_ids))
        tokenizer = self.trainer.processing_class
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        with self._unwrapped() as model:
            values = sequence_logps(
                model,
                pad,
                [self.prompt_ids[i] for i in padded],
                [self.completion_ids[i] for i in padded],
                self.batch_size,
            )
        pairs = gather_object([(i, v) for i, v in zip(mine, values[: len(mine)])])
        out = np.full(len(self.prompt_ids), np.nan)
        for i, v in pairs:
            out[i] = v
        return out

    # ------------------------------------------------------------------ hooks
    def on_train_begin(self, args, state, control, **kwargs):
        if self.trainer is None:
            raise ValueError(
                "BoundaryProbeCallback has no trainer. Create it with `trainer=trainer` after building the trainer, or "
                "call `callback.bind(trainer)` before `trainer.train()`."
            )
        if self.prompt_ids is None:
            self._prepare_probes()
        if self.base_logps is None:
            self.base_logps = self.measure()
            # recorded, not logged: a value pushed into the trainer's metrics now would be averaged into a later log
            self._record(state.global_step, self.base_logps, control, log=False)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.eval_steps == 0:
            self._record(state.global_step, self.measure(), control)

    def _record(self, step: int, logps: np.ndarray, control, log: bool = True) -> None:
        metrics = boundary_metrics(self.base_logps, logps, self.threshold, self.prefix)
        metrics[f"{self.prefix}num_probes"] = float(len(logps))
        self.last_logps = logps
        self.history.append((step, metrics))
        if not log:
            return
        trainer_metrics = getattr(self.trainer, "_metrics", None)
        if isinstance(trainer_metrics, dict) and "train" in trainer_metrics:
            # TRL trainers average `_metrics[mode]` into the next log record; make that record this step's
            for key, value in metrics.items():
                trainer_metrics["train"][key].append(value)
            control.should_log = True
        else:
            self.trainer.log(dict(metrics))
