"""SELF's greedy check: is each prompt of a batch answered correctly by a greedy decode of the current policy?

Two strategies behind one interface (`GreedyStrategy`):

- `SeparateGreedy`: before sampling, one greedy generation call over the batch's distinct prompts (gathered, and
  sharded evenly over the processes); works with every generation backend (transformers, vLLM).
- `FusedGreedy`: the greedy rows ride along in the sampling `generate` call itself, one extra row per distinct prompt
  of the process, forced to decode greedily by the `GreedyRows` logits processor; graded when the rewards arrive.

Both talk to the trainer through a `GreedyHost` (generation, grading, gathering), so this module needs no trainer.
"""

import contextlib
from typing import Protocol

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from .controller import CurationBatch, FusedGreedyRequest


class GreedyHost(Protocol):
    """What the strategies need from a trainer; every list it gathers comes back concatenated over processes."""

    process_index: int
    num_processes: int

    def gather(self, items: list) -> list: ...

    def decode_and_grade(self, examples: list[dict]) -> list[bool]:
        """Greedy answer of each example (its own generation call), graded for correctness."""

    def grade(self, examples: list[dict], completion_ids: list[list[int]]) -> list[bool]:
        """Whether each completion (token ids) answers its example correctly."""


class GreedyRows(LogitsProcessor):
    """Make sampling pick the highest-scoring token in the rows where ``rows`` is True, so those rows decode greedily
    inside a sampling `generate` call. It runs after the sampling warpers (temperature, top-k, top-p, min-p), which all
    keep the top token, so the forced token is the model's argmax; the other rows are left untouched."""

    def __init__(self, rows: torch.Tensor):
        self.rows = rows

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        rows = self.rows.to(scores.device).unsqueeze(1)
        forced = torch.full_like(scores, float("-inf")).scatter(1, scores.argmax(dim=-1, keepdim=True), 0.0)
        return torch.where(rows, forced, scores)


def distinct_rows(rows: list[int], examples: list[dict]) -> dict[int, dict]:
    """The first example of each distinct row, in order of first appearance."""
    local = {}
    for row, example in zip(rows, examples):
        local.setdefault(row, example)
    return local


def grade_sharded(host: GreedyHost, rows: list[int], examples: dict[int, dict]) -> dict[int, bool]:
    """Grade ``rows`` (the same list on every rank) greedily, each rank one contiguous, equal-sized share (so every
    rank makes the same generation calls), and gather the results onto every rank."""
    rank, world = host.process_index, host.num_processes
    per_rank = -(-len(rows) // world)
    mine = rows[rank * per_rank : (rank + 1) * per_rank]
    padded = mine + [rows[-1]] * (per_rank - len(mine))
    correct = host.decode_and_grade([examples[r] for r in padded])
    return dict(host.gather([(int(r), bool(c)) for r, c in zip(mine, correct)]))


class GreedyStrategy:
    """`begin` runs when a batch opens (before sampling); `results` when its rewards arrive."""

    def begin(self, host: GreedyHost, batch: CurationBatch, rows: list[int], examples: list[dict]) -> None:
        raise NotImplementedError

    def results(self, host: GreedyHost, batch: CurationBatch) -> dict[int, bool]:
        raise NotImplementedError


class SeparateGreedy(GreedyStrategy):
    """A greedy generation call of its own, before sampling."""

    def begin(self, host, batch, rows, examples):
        examples_by_row = {}
        for row, example in host.gather(list(distinct_rows(rows, examples).items())):
            examples_by_row.setdefault(row, example)
        batch.greedy = grade_sharded(host, list(examples_by_row), examples_by_row)

    def results(self, host, batch):
        return batch.greedy


class FusedGreedy(GreedyStrategy):
    """Greedy rows decoded inside the sampling call (see `extend_sampling_call`)."""

    def begin(self, host, batch, rows, examples):
        local = distinct_rows(rows, examples)
        batch.fused = FusedGreedyRequest(rows=list(local), examples=list(local.values()))

    def results(self, host, batch):
        """Grade the fused greedy rows, and gather them (the first rank's answer wins for a prompt whose group
        straddles two ranks), so every rank holds the same results."""
        fused = batch.fused
        if fused is None or fused.completion_ids is None:
            raise RuntimeError("The fused greedy decode did not run; set curation_self_fused_greedy=False.")
        correct = host.grade(fused.examples, fused.completion_ids)
        greedy = {}
        for row, c in host.gather([(int(r), bool(c)) for r, c in zip(fused.rows, correct)]):
            greedy.setdefault(row, c)
        return greedy

    @staticmethod
    @contextlib.contextmanager
    def extend_sampling_call(model, num_sampled: int, num_greedy: int):
        """While active, ``model.generate`` decodes its last ``num_greedy`` rows greedily (after ``num_sampled``
        sampled rows): the sampling call's own logits processors run first, then `GreedyRows`."""
        rows = torch.tensor([False] * num_sampled + [True] * num_greedy)
        original = model.generate

        def generate(*args, **kwargs):
            processors = LogitsProcessorList([*(kwargs.pop("logits_processor", None) or []), GreedyRows(rows)])
            return original(*args, logits_processor=processors, **kwargs)

        model.generate = generate
        try:
            yield
        finally:
            del model.generate

    @staticmethod
    def split(request: FusedGreedyRequest, completion_ids: list, logprobs: list | None, num_sampled: int):
        """Keep the greedy completions in ``request``; return the sampled rows' completions and logprobs."""
        request.completion_ids = completion_ids[num_sampled:]
        return completion_ids[:num_sampled], None if logprobs is None else logprobs[:num_sampled]
