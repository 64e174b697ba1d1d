"""Curation samplers with TRL's GRPO batch structure.

TRL's `RepeatSampler` yields "chunks" of ``batch_size`` distinct prompts (one chunk = one global generation batch),
each chunk ``repeat_count`` times and each prompt of it ``mini_repeat_count`` (= ``num_generations``) times in a row.
`CurationSampler` keeps exactly that structure and length; only *which* prompts form the next chunk changes:

- ``"self"`` (SELF, https://huggingface.co/papers/2510.02230): walk a shuffled order of the training set, skipping
  prompts the policy is known to solve greedily until they are due for a re-check;
- ``"pass_rate"``: draw the chunk without replacement with probabilities proportional to `pass_rate_weights`.

Chunks are drawn lazily, when the dataloader asks for them, from the shared `CurationState` that the trainer updates
with gathered results: every process runs its own copy of the sampler and draws the identical stream. The state it
sees may lag the newest results by the dataloader's prefetch (one generation batch or so), by design.

Resume: the sampler's state holds its RNG, its position, and the chunks drawn so far in the current pass over the
data ("epoch"). After `load_state_dict`, the pass that was interrupted is replayed chunk for chunk (the trainer skips
the batches it already trained on) and then continues from the saved RNG, so a resumed run sees the index stream of
an uninterrupted one.
"""

import numpy as np
import torch
from torch.utils.data import Sampler

from .state import CurationState


CURATION_MODES = ("self", "pass_rate")
PASS_RATE_TARGETS = ("low", "mid")


def pass_rate_weights(pass_rates, target: str = "mid", floor: float = 0.05) -> np.ndarray:
    r"""
    Unnormalised sampling weight of each prompt from its estimated pass rate ``p``:

    - ``"mid"``: ``w = max(4 p (1 - p), floor)``, highest at p = 0.5 and small near 0 and 1, where all ``G``
      completions of a group tend to get the same reward and GRPO's advantage (hence gradient) vanishes;
    - ``"low"``: ``w = max(1 - p, floor)``, favouring the prompts the policy fails most.

    The floor keeps every prompt drawable: with ``N`` prompts, each has probability at least
    ``floor / sum(w) >= floor / N`` of being any given pick.
    """
    p = np.asarray(pass_rates, dtype=np.float64)
    if np.any((p < 0) | (p > 1)) or np.any(np.isnan(p)):
        raise ValueError("Pass rates must lie in [0, 1].")
    if not 0 < floor <= 1:
        raise ValueError(f"floor must be in (0, 1], got {floor}.")
    if target == "mid":
        score = 4.0 * p * (1.0 - p)
    elif target == "low":
        score = 1.0 - p
    else:
        raise ValueError(f"Unknown pass-rate target {target!r}; use one of {list(PASS_RATE_TARGETS)}.")
    return np.maximum(score, floor)


class CurationSampler(Sampler[int]):
    r"""
    Sampler for curated GRPO training (see the module docstring).

    Args:
        num_prompts: rows of the training set.
        state: the shared `CurationState` (updated by the trainer).
        mode: ``"self"`` or ``"pass_rate"``.
        mini_repeat_count: times each index is repeated in a row (``num_generations``).
        batch_size: distinct prompts per chunk (``generation_batch_size // num_generations``).
        repeat_count: times each chunk is repeated (``num_iterations * steps_per_generation``).
        seed: seed of the sampler's own generator (the global RNG is never used).
        shuffle: ``"self"`` walks a random order when True, the dataset order when False.
        recheck_steps: ``"self"``: a prompt found solved is left out for this many optimizer steps, then checked
            again (0: never left out).
        target, floor: ``"pass_rate"``: see `pass_rate_weights`.
    """

    def __init__(
        self,
        num_prompts: int,
        state: CurationState,
        mode: str,
        mini_repeat_count: int,
        batch_size: int = 1,
        repeat_count: int = 1,
        seed: int = 0,
        shuffle: bool = True,
        recheck_steps: int = 0,
        target: str = "mid",
        floor: float = 0.05,
    ):
        if mode not in CURATION_MODES:
            raise ValueError(f"Unknown curation mode {mode!r}; use one of {list(CURATION_MODES)}.")
        if not 1 <= batch_size <= num_prompts:
            raise ValueError(
                f"A generation batch needs {batch_size} distinct prompts but the training set has {num_prompts}. "
                "Use more prompts or a smaller generation_batch_size."
            )
        if state.num_prompts != num_prompts:
            raise ValueError(f"The state covers {state.num_prompts} prompts, the sampler {num_prompts}.")
        if recheck_steps < 0:
            raise ValueError(f"recheck_steps must be >= 0, got {recheck_steps}.")
        pass_rate_weights(np.array([0.5]), target, floor)  # validates target and floor
        self.num_prompts, self.state, self.mode = num_prompts, state, mode
        self.mini_repeat_count, self.batch_size, self.repeat_count = mini_repeat_count, batch_size, repeat_count
        self.seed, self.shuffle, self.recheck_steps = seed, shuffle, recheck_steps
        self.target, self.floor = target, floor
        self.num_chunks = num_prompts // batch_size  # per pass, as RepeatSampler (an incomplete last chunk is dropped)
        self.generator = torch.Generator()
        self.generator.manual_seed(seed)
        self._order: list[int] = []  # "self": the current walk over the data
        self._pos = 0
        self.epoch = -1  # passes started
        self.epoch_chunks: list[list[int]] = []  # chunks drawn in the current pass
        self.chunks_drawn = 0
        self._requested_epoch: int | None = None
        self._replay: dict | None = None

    def __len__(self) -> int:
        return self.num_chunks * self.batch_size * self.mini_repeat_count * self.repeat_count

    def set_epoch(self, epoch: int) -> None:
        """Called by the trainer before each pass; lets a resumed run tell a new pass from the interrupted one."""
        self._requested_epoch = epoch

    def __iter__(self):
        if self._requested_epoch is not None:
            epoch = self._requested_epoch
        elif self._replay is not None and len(self._replay["chunks"]) < self.num_chunks:
            epoch = self._replay["epoch"]  # resumed without `set_epoch`: an unfinished pass continues
        else:
            epoch = self.epoch + 1
        self._requested_epoch = None
        replay = []
        if self._replay is not None:
            if self._replay["epoch"] == epoch:
                replay = [list(chunk) for chunk in self._replay["chunks"]]
            self._replay = None
        self.epoch = epoch
        self.epoch_chunks = list(replay)
        for c in range(self.num_chunks):
            if c < len(replay):
                chunk = replay[c]
            else:
                chunk = self.draw_chunk()
                self.epoch_chunks.append(chunk)
            for _ in range(self.repeat_count):
                for index in chunk:
                    for _ in range(self.mini_repeat_count):
                        yield index

    # ------------------------------------------------------------------ drawing
    def draw_chunk(self) -> list[int]:
        """The next chunk of ``batch_size`` distinct prompts, from the current state."""
        chunk = self._draw_self() if self.mode == "self" else self._draw_pass_rate()
        self.chunks_drawn += 1
        return chunk

    def _next_in_order(self) -> int:
        if self._pos >= len(self._order):
            if self.shuffle:
                self._order = torch.randperm(self.num_prompts, generator=self.generator).tolist()
            else:
                self._order = list(range(self.num_prompts))
            self._pos = 0
        index = self._order[self._pos]
        self._pos += 1
        return index

    def _draw_self(self) -> list[int]:
        skip = self.state.known_solved(self.state.step, self.recheck_steps)
        chunk, taken = [], set()
        # Two walks' worth of positions visit every prompt at least once: if the chunk is still short after that,
        # fewer than batch_size prompts are eligible.
        for _ in range(2 * self.num_prompts):
            if len(chunk) == self.batch_size:
                break
            index = self._next_in_order()
            if not skip[index] and index not in taken:
                chunk.append(index)
                taken.add(index)
        if len(chunk) < self.batch_size:
            # Keep the batch shape: fill with the solved prompts checked longest ago (re-checking them early).
            solved = [i for i in np.lexsort((np.arange(self.num_prompts), self.state.greedy_step)) if i not in taken]
            chunk.extend(int(i) for i in solved[: self.batch_size - len(chunk)])
        return chunk

    def _draw_pass_rate(self) -> list[int]:
        weights = torch.as_tensor(self.probabilities(), dtype=torch.float64)
        return torch.multinomial(weights, self.batch_size, replacement=False, generator=self.generator).tolist()

    def probabilities(self) -> np.ndarray:
        """``"pass_rate"``: the probability of each prompt being the first pick of the next chunk."""
        weights = pass_rate_weights(self.state.pass_rate(), self.target, self.floor)
        return weights / weights.sum()

    # ------------------------------------------------------------------ (de)serialisation
    def state_dict(self) -> dict:
        return {
            "mode": self.mode,
            "num_prompts": self.num_prompts,
            "batch_size": self.batch_size,
            "generator": self.generator.get_state().tolist(),
            "order": list(self._order),
            "pos": self._pos,
            "epoch": self.epoch,
            "epoch_chunks": [list(chunk) for chunk in self.epoch_chunks],
            "chunks_drawn": self.chunks_drawn,
        }

    def load_state_dict(self, state: dict) -> None:
        for key in ("mode", "num_prompts", "batch_size"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"The saved sampler has {key}={state[key]!r} but this run has {getattr(self, key)!r}; resume with "
                    "the same curation mode, training set and generation batch size."
                )
        self.generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))
        self._order, self._pos = list(state["order"]), int(state["pos"])
        self.epoch, self.chunks_drawn = int(state["epoch"]), int(state["chunks_drawn"])
        self.epoch_chunks = [list(chunk) for chunk in state["epoch_chunks"]]
        # The pass that was interrupted is replayed if the trainer resumes inside it (see __iter__).
        self._replay = {"epoch": self.epoch, "chunks": self.epoch_chunks}
        self._requested_epoch = None
