"""Per-prompt curation statistics: greedy-solved flags (SELF) and running pass-rate estimates.

Pure numpy, no trainer: the trainer feeds it the *gathered* results of each generation batch, so every process holds
the same copy, and it (de)serialises to JSON for checkpoints.
"""

from collections.abc import Sequence

import numpy as np


UNKNOWN, WRONG, SOLVED = -1, 0, 1


class CurationState:
    r"""
    What the curation samplers know about each prompt (row ``i`` of the training set).

    - Greedy flags (SELF, https://huggingface.co/papers/2510.02230): ``greedy_correct[i]`` is ``1`` when the policy's
      greedy answer to prompt ``i`` was last found correct, ``0`` when wrong, ``-1`` when never checked;
      ``greedy_step[i]`` is the optimizer step of that check.
    - Pass rates: a Beta-Bernoulli estimate per prompt with exponential forgetting. Each time prompt ``i`` is sampled
      with ``t`` completions of which ``s`` are correct,

          S_i <- decay * S_i + s,    T_i <- decay * T_i + t,    p_i = (S_i + alpha) / (T_i + alpha + beta),

      so a prompt never sampled has the prior mean ``alpha / (alpha + beta)``, and ``decay < 1`` lets the estimate
      follow a policy that changes (the weight of an old batch halves every ``log(2) / -log(decay)`` updates).

    Args:
        num_prompts: number of prompts (rows of the training set).
        prior_alpha, prior_beta: Beta prior pseudo-counts (> 0).
        decay: forgetting factor in (0, 1] applied to a prompt's counts each time it is updated.
    """

    def __init__(self, num_prompts: int, prior_alpha: float = 1.0, prior_beta: float = 1.0, decay: float = 1.0):
        if num_prompts < 1:
            raise ValueError(f"num_prompts must be at least 1, got {num_prompts}.")
        if prior_alpha <= 0 or prior_beta <= 0:
            raise ValueError(f"The Beta prior needs alpha > 0 and beta > 0, got {prior_alpha} and {prior_beta}.")
        if not 0 < decay <= 1:
            raise ValueError(f"decay must be in (0, 1], got {decay}.")
        self.num_prompts = num_prompts
        self.prior_alpha, self.prior_beta, self.decay = float(prior_alpha), float(prior_beta), float(decay)
        self.successes = np.zeros(num_prompts, dtype=np.float64)
        self.trials = np.zeros(num_prompts, dtype=np.float64)
        self.greedy_correct = np.full(num_prompts, UNKNOWN, dtype=np.int8)
        self.greedy_step = np.full(num_prompts, -1, dtype=np.int64)
        self.step = 0  # the latest optimizer step the trainer reported
        self.skipped_steps = 0  # optimizer steps skipped because no prompt of their batch was kept
        self.prepass_done = False

    # ------------------------------------------------------------------ updates
    def _check_rows(self, rows) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= self.num_prompts):
            raise IndexError(f"Prompt rows must lie in [0, {self.num_prompts}), got {rows.min()}..{rows.max()}.")
        return rows

    def update_samples(self, rows: Sequence[int], correct: Sequence[float]) -> None:
        """Add sampled completions: ``rows[j]`` is the prompt of completion ``j``, ``correct[j]`` its correctness in
        {0, 1} (NaN: ungraded, ignored). A prompt listed several times is one update of its counts."""
        rows = self._check_rows(rows)
        correct = np.asarray(correct, dtype=np.float64)
        if rows.shape != correct.shape:
            raise ValueError(f"rows and correct must have the same length, got {rows.shape} and {correct.shape}.")
        valid = ~np.isnan(correct)
        rows, correct = rows[valid], correct[valid]
        if rows.size == 0:
            return
        unique, inverse = np.unique(rows, return_inverse=True)
        s = np.bincount(inverse, weights=correct, minlength=unique.size)
        t = np.bincount(inverse, minlength=unique.size).astype(np.float64)
        self.successes[unique] = self.decay * self.successes[unique] + s
        self.trials[unique] = self.decay * self.trials[unique] + t

    def update_greedy(self, rows: Sequence[int], correct: Sequence[bool], step: int) -> None:
        """Record the greedy check of ``rows`` at optimizer step ``step`` (``correct[j]`` for ``rows[j]``)."""
        rows = self._check_rows(rows)
        correct = np.asarray(correct, dtype=bool)
        if rows.shape != correct.shape:
            raise ValueError(f"rows and correct must have the same length, got {rows.shape} and {correct.shape}.")
        self.greedy_correct[rows] = np.where(correct, SOLVED, WRONG)
        self.greedy_step[rows] = step

    # ------------------------------------------------------------------ queries
    def pass_rate(self, rows: Sequence[int] | None = None) -> np.ndarray:
        """Posterior-mean pass rate of ``rows`` (default: every prompt)."""
        s, t = (self.successes, self.trials) if rows is None else (self.successes[rows], self.trials[rows])
        return (s + self.prior_alpha) / (t + self.prior_alpha + self.prior_beta)

    def seen(self) -> np.ndarray:
        """Whether each prompt has been sampled at least once."""
        return self.trials > 0

    def known_solved(self, step: int, recheck_steps: int) -> np.ndarray:
        """Prompts whose greedy answer was correct at a check less than ``recheck_steps`` steps before ``step``; the
        SELF sampler leaves them out until that many steps have passed (0: never left out)."""
        if recheck_steps <= 0:
            return np.zeros(self.num_prompts, dtype=bool)
        return (self.greedy_correct == SOLVED) & (step - self.greedy_step < recheck_steps)

    # ------------------------------------------------------------------ (de)serialisation
    def state_dict(self) -> dict:
        return {
            "num_prompts": self.num_prompts,
            "prior_alpha": self.prior_alpha,
            "prior_beta": self.prior_beta,
            "decay": self.decay,
            "successes": self.successes.tolist(),
            "trials": self.trials.tolist(),
            "greedy_correct": self.greedy_correct.tolist(),
            "greedy_step": self.greedy_step.tolist(),
            "step": self.step,
            "skipped_steps": self.skipped_steps,
            "prepass_done": self.prepass_done,
        }

    def load_state_dict(self, state: dict) -> None:
        if state["num_prompts"] != self.num_prompts:
            raise ValueError(
                f"The saved curation state covers {state['num_prompts']} prompts but this training set has "
                f"{self.num_prompts}. Resume with the same training set."
            )
        self.prior_alpha, self.prior_beta, self.decay = state["prior_alpha"], state["prior_beta"], state["decay"]
        self.successes = np.asarray(state["successes"], dtype=np.float64)
        self.trials = np.asarray(state["trials"], dtype=np.float64)
        self.greedy_correct = np.asarray(state["greedy_correct"], dtype=np.int8)
        self.greedy_step = np.asarray(state["greedy_step"], dtype=np.int64)
        self.step, self.skipped_steps = int(state["step"]), int(state["skipped_steps"])
        self.prepass_done = bool(state["prepass_done"])

    def __eq__(self, other) -> bool:
        if not isinstance(other, CurationState):
            return NotImplemented
        return self.state_dict() == other.state_dict()
