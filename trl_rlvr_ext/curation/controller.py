"""`CurationController`: online prompt curation (SELF and pass-rate sampling) without a trainer.

The controller owns everything curation decides: the prompt ids, the per-prompt statistics (`CurationState`), the
sampler, the record of the generation batch being scored, the keep mask of SELF, the empty-window skip, the metrics
and the checkpoint state. It imports neither TRL nor transformers; a trainer drives it through a thin adapter
(`trl_rlvr_ext.grpo.methods.curation`) in this order, per generation batch:

1. `begin_batch` with the gathered prompt rows of the global batch (the same on every process);
2. `record_greedy` with the greedy results of SELF (before or after sampling, see `trl_rlvr_ext.curation.greedy`);
3. `record_rewards` with the gathered correctness rewards: updates the statistics, returns SELF's keep mask;
4. `close_batch`, then `batch_metrics` of the closed record;

and per optimizer window: `record_micro_batch` for each micro-batch's kept-row count (maximum over processes), then
`end_window`, which says whether the optimizer step must be skipped. Every input is already gathered across processes,
so every process's controller holds the same state.
"""

from dataclasses import dataclass

import numpy as np
import torch

from .samplers import CurationSampler
from .state import CurationState


ROW_COLUMN = "curation_row"  # added to the training set when no `curation_id_column` is given
KEEP_KEY = "curation_keep"  # per-row keep mask of a micro-batch (SELF)
WINDOW_ROWS_KEY = "curation_window_rows"  # kept rows of the micro-batch's optimizer window, all processes (SELF)
STATE_VERSION = 1
# Metrics that hold a running total: the latest value replaces the logged list instead of joining its mean.
GAUGE_METRICS = frozenset({"curation/skipped_steps"})


def resolve_reward_index(mode: str, reward_names: list[str], reward_func: str | None) -> int:
    """Index of the correctness reward function among ``reward_names``: the only one, or the one named
    ``reward_func`` (`curation_reward_func`)."""
    if reward_func is None:
        if len(reward_names) != 1:
            raise ValueError(
                f"curation={mode!r} needs the correctness signal, not the shaped total of {reward_names}: set "
                "curation_reward_func to the name of the reward function that grades correctness."
            )
        return 0
    if reward_func not in reward_names:
        raise ValueError(f"curation_reward_func={reward_func!r} is not one of the reward functions {reward_names}.")
    return reward_names.index(reward_func)


def select_rows(inputs: dict, index: torch.Tensor, num_padding: int = 0) -> dict:
    """Rows ``index`` of a GRPO micro-batch (per-row tensors and lists; 0-dim values pass through), followed by
    ``num_padding`` copies of its first row that carry no loss: completion (and tool) mask and advantage zeroed."""
    batch_size = inputs["completion_mask"].size(0)
    if num_padding:
        source = index[:1] if index.numel() else torch.zeros(1, dtype=torch.long, device=index.device)
        index = torch.cat([index, source.repeat(num_padding)])
    out = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.ndim > 0 and value.size(0) == batch_size:
            out[key] = value[index]
        elif isinstance(value, list) and len(value) == batch_size:
            out[key] = [value[i] for i in index.tolist()]
        else:
            out[key] = value
    if num_padding:
        for key in ("completion_mask", "tool_mask", "advantages"):
            if key in out:
                out[key] = out[key].clone()
                out[key][-num_padding:] = 0
    return out


def window_row_counts(counts: list[int], window: int) -> list[int]:
    """Kept rows of the optimizer window of each micro-batch of a generation batch. ``counts[m]`` is micro-batch m's
    kept-row count summed over processes; micro-batch m is used at micro-step m, and windows are runs of ``window``
    (gradient_accumulation_steps) micro-steps that start with the generation batch (the config requires
    steps_per_generation to be a multiple of gradient_accumulation_steps)."""
    return [int(sum(counts[m - m % window : m - m % window + window])) for m in range(len(counts))]


def sequence_scale(rows: int, accumulation_steps: int, num_processes: int, window_rows: int | None) -> float:
    """Factor that turns TRL's sequence-averaged micro-batch loss into the kept-prompts-only loss.

    For grpo, sapo, dr_grpo and luspo TRL divides the micro-batch's sum of per-sequence terms by its row count
    ``rows`` (kept rows padded to the common count of the processes) and by the accumulation steps GA; DDP then
    averages over the P processes. Multiplying by rows·GA·P/K, with K the kept rows of the whole optimizer window on all
    processes, makes every kept sequence weigh 1/K, as GRPO on the kept prompts alone. When nothing is dropped,
    K = rows·GA·P and the factor is exactly 1 (stock TRL, to the bit).
    """
    if window_rows is None:
        raise RuntimeError(
            "curation='self' with a sequence-averaged loss needs the kept-row count of the optimizer window, set "
            "when TRL splits a generation batch (_prepare_inputs); this micro-batch did not come from there."
        )
    numerator = rows * accumulation_steps * num_processes
    return 1.0 if numerator == window_rows else numerator / window_rows


@dataclass
class FusedGreedyRequest:
    """SELF's greedy rows to decode inside the next sampling call: one per distinct prompt of this process."""

    rows: list[int]
    examples: list[dict]
    pending: bool = True  # until the sampling call has taken it
    completion_ids: list[list[int]] | None = None  # the greedy completions, once decoded


@dataclass
class CurationBatch:
    """What curation knows about the generation batch being scored, from `begin_batch` to `close_batch`."""

    rows: np.ndarray  # prompt row of every completion of the global batch, in the order of `gather`
    step: int
    greedy: dict[int, bool] | None = None  # SELF: whether each prompt of the batch is solved greedily
    greedy_strategy: object = None  # SELF: the `trl_rlvr_ext.curation.greedy.GreedyStrategy` checking this batch
    fused: FusedGreedyRequest | None = None  # SELF, fused greedy decode: the request and its completions
    sample_correct: np.ndarray | None = None  # correctness of every completion (NaN: unscorable)
    keep: np.ndarray | None = None  # SELF: which completions enter the loss


class CurationController:
    """Online curation, configured by the ``curation*`` fields of `RLVRGRPOConfig` (see `from_config`).

    Args:
        mode: ``"self"`` or ``"pass_rate"``.
        correct_threshold: a reward at least this large counts as a correct answer.
        seed, recheck_steps, target, floor: the sampler's settings (`CurationSampler`).
        prior_alpha, prior_beta, decay: the pass-rate estimate's settings (`CurationState`).
    """

    def __init__(
        self,
        mode: str,
        *,
        correct_threshold: float = 1.0,
        seed: int = 0,
        recheck_steps: int = 0,
        target: str = "mid",
        floor: float = 0.05,
        prior_alpha: float = 1.0,
        prior_beta: float = 1.0,
        decay: float = 1.0,
    ):
        if mode not in ("self", "pass_rate"):
            raise ValueError(f"curation={mode!r} is not supported; use 'self' or 'pass_rate'.")
        self.mode = mode
        self.correct_threshold = correct_threshold
        self.sampler_settings = {"seed": seed, "recheck_steps": recheck_steps, "target": target, "floor": floor}
        self.state_settings = {"prior_alpha": prior_alpha, "prior_beta": prior_beta, "decay": decay}
        self.ids = None
        self.id_column = None
        self.state = None
        self.sampler = None
        self.batch = None  # the open `CurationBatch`
        self.window_kept = False  # whether a micro-batch of the current optimizer window kept a row (any process)
        self._pending_sampler_state = None

    @classmethod
    def from_config(cls, args) -> "CurationController":
        """A controller with the settings of an `RLVRGRPOConfig` (read by attribute)."""
        return cls(
            args.curation,
            correct_threshold=args.curation_correct_threshold,
            seed=args.curation_seed,
            recheck_steps=args.curation_self_recheck_steps,
            target=args.curation_pass_rate_target,
            floor=args.curation_pass_rate_floor,
            prior_alpha=args.curation_pass_rate_prior_alpha,
            prior_beta=args.curation_pass_rate_prior_beta,
            decay=args.curation_pass_rate_decay,
        )

    # ------------------------------------------------------------------ set-up
    def setup(self, ids: list, id_column: str) -> None:
        """Track the prompts ``ids`` (one unique id per training row, from column ``id_column``)."""
        if len(set(ids)) != len(ids):
            raise ValueError(
                f"The {id_column!r} column must hold a unique id per prompt; it has {len(ids) - len(set(ids))} "
                "duplicates. Deduplicate the prompts or leave curation_id_column unset."
            )
        self.ids = list(ids)
        self.id_column = id_column
        self._row_of_id = {id_: row for row, id_ in enumerate(self.ids)}
        self.state = CurationState(len(self.ids), **self.state_settings)

    def row(self, example: dict) -> int:
        """Training-set row of an example, by its id."""
        try:
            return self._row_of_id[example[self.id_column]]
        except KeyError as error:
            raise KeyError(
                f"A training example has no known {self.id_column!r} id; curation needs the column to reach the "
                "trainer (remove_unused_columns=False) and the ids of the training set it was built with."
            ) from error

    def make_sampler(
        self,
        num_rows: int,
        *,
        mini_repeat_count: int,
        batch_size: int,
        repeat_count: int,
        shuffle: bool = True,
        training: bool = True,
    ) -> CurationSampler:
        """A sampler with `RepeatSampler`'s batch structure over the shared statistics. ``training=True``: the training
        sampler, whose state is checkpointed and resumed; ``False``: another stream of the same kind (e.g. dynamic
        sampling's extra prompts), which neither takes a pending resumed state nor replaces the training sampler."""
        if num_rows != self.state.num_prompts:
            raise ValueError(
                f"The training set has {num_rows} rows but curation was set up for {self.state.num_prompts}; do not "
                "replace train_dataset after building the trainer."
            )
        settings = self.sampler_settings
        sampler = CurationSampler(
            num_rows,
            self.state,
            self.mode,
            mini_repeat_count=mini_repeat_count,
            batch_size=batch_size,
            repeat_count=repeat_count,
            seed=settings["seed"],
            shuffle=shuffle,
            recheck_steps=settings["recheck_steps"],
            target=settings["target"],
            floor=settings["floor"],
        )
        if not training:
            return sampler
        if self._pending_sampler_state is not None:
            sampler.load_state_dict(self._pending_sampler_state)
            self._pending_sampler_state = None
        self.sampler = sampler
        return sampler

    # ------------------------------------------------------------------ one generation batch
    def begin_batch(self, rows, step: int) -> CurationBatch:
        """Open the record of a generation batch: ``rows`` is the prompt row of every completion of the global batch
        (gathered), ``step`` the trainer's global step."""
        if self.batch is not None:
            raise RuntimeError("begin_batch: the previous generation batch was not closed (close_batch).")
        self.state.step = step
        self.batch = CurationBatch(rows=np.asarray(rows, dtype=np.int64), step=step)
        return self.batch

    def take_fused_request(self) -> FusedGreedyRequest | None:
        """SELF's fused greedy request of the open batch, once: the first sampling call after `begin_batch` takes it."""
        request = None if self.batch is None else self.batch.fused
        if request is None or not request.pending:
            return None
        request.pending = False
        return request

    def record_greedy(self, greedy: dict[int, bool]) -> None:
        """SELF: whether each prompt of the open batch is solved by a greedy decode (gathered: same on all ranks)."""
        self.batch.greedy = {int(row): bool(solved) for row, solved in greedy.items()}

    def record_rewards(self, rewards) -> np.ndarray | None:
        """Record the correctness rewards of the open batch (one per completion, gathered; NaN: unscorable) and return
        SELF's keep mask over the completions (None for pass-rate sampling, which keeps every completion)."""
        batch, state = self.batch, self.state
        rewards = np.asarray(rewards, dtype=np.float64)
        if len(batch.rows) != len(rewards):
            raise RuntimeError(f"Gathered {len(rewards)} rewards for {len(batch.rows)} curated rows.")
        correct = np.where(np.isnan(rewards), np.nan, (rewards >= self.correct_threshold).astype(float))
        state.update_samples(batch.rows, correct)
        batch.sample_correct = correct
        if self.mode != "self":
            return None
        if batch.greedy is None:
            raise RuntimeError("record_rewards: SELF needs the batch's greedy results first (record_greedy).")
        state.update_greedy(list(batch.greedy), list(batch.greedy.values()), state.step)
        batch.keep = np.array([not batch.greedy[int(r)] for r in batch.rows], dtype=bool)
        return batch.keep

    def close_batch(self) -> CurationBatch | None:
        """Close the open batch record (also after an error) and return it."""
        batch, self.batch = self.batch, None
        return batch

    def batch_metrics(self, batch: CurationBatch) -> dict[str, float]:
        """The ``curation/*`` metrics of a scored batch (names in `GAUGE_METRICS` are running totals)."""
        metrics = {}
        state = self.state
        unique_rows = np.unique(batch.rows)
        if batch.sample_correct is not None and not np.isnan(batch.sample_correct).all():
            metrics["curation/batch_pass_rate"] = float(np.nanmean(batch.sample_correct))
        seen = state.seen()
        if seen.any():
            metrics["curation/mean_pass_rate"] = float(state.pass_rate()[seen].mean())
        if self.mode != "self":
            metrics["curation/kept_prompts"] = float(len(unique_rows))
            return metrics
        solved = sum(batch.greedy[int(r)] for r in unique_rows)
        metrics["curation/greedy_solved_frac"] = solved / len(unique_rows)
        metrics["curation/kept_prompts"] = float(len(unique_rows) - solved)
        metrics["curation/skipped_steps"] = float(state.skipped_steps)
        return metrics

    # ------------------------------------------------------------------ SELF's greedy pre-pass
    def needs_prepass(self, enabled: bool) -> bool:
        return self.mode == "self" and enabled and not self.state.prepass_done

    def prepass_chunks(self, chunk: int) -> list[list[int]]:
        """The training rows in chunks of ``chunk`` prompts, in order: the pre-pass grades one chunk per call."""
        num = self.state.num_prompts
        return [list(range(start, min(start + chunk, num))) for start in range(0, num, chunk)]

    def record_prepass(self, greedy: dict[int, bool], step: int) -> None:
        self.state.update_greedy(list(greedy), list(greedy.values()), step)

    def finish_prepass(self) -> dict[str, float]:
        self.state.prepass_done = True
        return {"curation/prepass_solved_frac": float((self.state.greedy_correct == 1).mean())}

    # ------------------------------------------------------------------ optimizer windows (SELF)
    def record_micro_batch(self, max_kept_rows: int) -> None:
        """A micro-batch of the current window was computed; ``max_kept_rows`` is the largest kept-row count of any
        process (gathered, so every process reaches the same `end_window` decision)."""
        self.window_kept = self.window_kept or max_kept_rows > 0

    def end_window(self) -> bool:
        """End the current optimizer window; True when none of its micro-batches kept a row: skip the step."""
        skip = not self.window_kept
        if skip:
            self.state.skipped_steps += 1
        self.window_kept = False
        return skip

    def window_metrics(self, skipped: bool) -> dict[str, float]:
        return {"curation/skipped_steps": float(self.state.skipped_steps), "curation/step_skipped": float(skipped)}

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """JSON-serialisable: mode, prompt ids, statistics, and the sampler's RNG and position."""
        return {
            "version": STATE_VERSION,
            "mode": self.mode,
            "ids": self.ids,
            "state": self.state.state_dict(),
            "sampler": None if self.sampler is None else self.sampler.state_dict(),
        }

    def load_state_dict(self, payload: dict, source: str = "the checkpoint") -> None:
        """Restore `state_dict`'s output, checking it belongs to this run; the sampler state waits for `make_sampler`
        when the sampler does not exist yet."""
        if payload["mode"] != self.mode:
            raise ValueError(f"{source} was saved with curation={payload['mode']!r}, this run uses {self.mode!r}.")
        if payload["ids"] != self.ids:
            raise ValueError(
                f"{source} was saved for a different training set (prompt ids differ). Resume with the same data."
            )
        self.state.load_state_dict(payload["state"])
        if payload["sampler"] is not None:
            if self.sampler is not None:
                self.sampler.load_state_dict(payload["sampler"])
            else:
                self._pending_sampler_state = payload["sampler"]
