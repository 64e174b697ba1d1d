r"""Dynamic sampling (DAPO's online zero-variance filtering), trainer-free.

DAPO (https://huggingface.co/papers/2503.14476, Sec. 3.2) over-samples prompts and drops every group whose ``G``
completions all get the same reward: GRPO's advantage ``(r_i - mean(r)) / std(r)`` is then zero for the whole group,
so it costs a generation and adds no policy gradient. Generation continues until the batch is full of informative
groups (Eq. 11 of the paper: ``0 < |{o_i : is_equivalent(a, o_i)}| < G``).

This module holds the whole rule with no trainer in it:

- `group_reward_std` / `informative_groups`: which groups carry signal, from rewards *gathered* across processes, so
  every process takes the same decision;
- `GroupSelector`: the round accounting. Each process keeps the informative groups it generated itself, up to its
  share of the batch; rounds continue until every process has its share or the round bound is reached;
- `PromptStream`: the stream of extra prompts, drawn identically on every process, with a checkpointable state.

The trainer-side method (`trl_rlvr_ext.grpo.methods.dynamic_sampling`) only wires these into TRL's loop.
"""

import math

import torch


DYNAMIC_SAMPLING_STATE_VERSION = 1


def total_rewards(rewards_per_func: torch.Tensor, reward_weights: torch.Tensor) -> torch.Tensor:
    """The reward TRL's advantage is computed from (``multi_objective_aggregation="sum_then_normalize"``): the weighted
    sum over reward functions, a function's NaN (no reward for that row) left out; NaN where no function scored the
    row (a row curation dropped, or an unscorable one)."""
    weights = reward_weights.to(rewards_per_func.device).unsqueeze(0)
    rewards = (rewards_per_func * weights).nansum(dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return rewards


def group_reward_std(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    r"""
    Spread of each group's rewards: the unbiased standard deviation of its finite values (as TRL's ``nanstd``).

    ``rewards`` has one entry per completion, groups of ``num_generations`` consecutive entries. NaN entries
    (unscorable completions) are left out. A group whose finite values are all equal gets exactly ``0`` (not the
    round-off of ``sqrt(mean((r - mean(r))^2))``, which can be ~1e-17 for shaped rewards), and a group with fewer than
    two finite values gets NaN (its spread is unknown).
    """
    if rewards.dim() != 1 or rewards.numel() % num_generations:
        raise ValueError(
            f"Expected one reward per completion in groups of {num_generations}, got shape {tuple(rewards.shape)}."
        )
    grouped = rewards.double().view(-1, num_generations)
    finite = ~torch.isnan(grouped)
    count = finite.sum(dim=1)
    values = torch.where(finite, grouped, torch.zeros_like(grouped))
    mean = values.sum(dim=1, keepdim=True) / count.clamp(min=1).unsqueeze(1)
    squares = torch.where(finite, (grouped - mean) ** 2, torch.zeros_like(grouped)).sum(dim=1)
    std = torch.sqrt(squares / (count - 1).clamp(min=1))
    high = torch.where(finite, grouped, torch.full_like(grouped, -math.inf)).amax(dim=1)
    low = torch.where(finite, grouped, torch.full_like(grouped, math.inf)).amin(dim=1)
    std = torch.where(high == low, torch.zeros_like(std), std)
    return torch.where(count < 2, torch.full_like(std, math.nan), std)


def informative_groups(rewards: torch.Tensor, num_generations: int, min_std: float = 0.0) -> torch.Tensor:
    """Whether each group is informative: its reward spread (`group_reward_std`) is greater than ``min_std``. With
    ``min_std=0`` this is DAPO's rule (not all rewards equal); groups of unknown spread are not informative."""
    std = group_reward_std(rewards, num_generations)
    return ~torch.isnan(std) & (std > min_std)


class GroupSelector:
    r"""
    Round accounting of dynamic sampling for one generation batch.

    The generation batch holds ``groups_per_process`` groups on each of ``num_processes`` processes (TRL splits it
    contiguously across processes, so with whole groups per process each group lives on one process). A round
    generates ``n`` new groups on every process (the same ``n`` everywhere); `record_round` takes the gathered
    informative flags of that round, ``num_processes * n`` of them in process order. Each process keeps its own
    informative groups, in generation order, until it holds ``groups_per_process``; groups beyond that share are
    dropped. The batch is full when every process holds its share, and the rounds stop at ``max_rounds`` whatever
    happens (`bound_hit`). At the bound, a process that is short completes its share with the groups it generated
    but did not keep, in generation order (zero-variance groups: they have zero advantage, so they add no policy
    gradient; the batch keeps GRPO's size and its normalisers are GRPO's on the groups it holds).

    Kept groups are ``(round, group)`` pairs local to their process: ``group`` indexes the process's groups of that
    round.
    """

    def __init__(self, num_processes: int, groups_per_process: int, max_rounds: int):
        if num_processes < 1 or groups_per_process < 1:
            raise ValueError("num_processes and groups_per_process must be at least 1.")
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, got {max_rounds}.")
        self.num_processes, self.groups_per_process, self.max_rounds = num_processes, groups_per_process, max_rounds
        self.start()

    def start(self) -> None:
        """Forget the previous generation batch."""
        self.rounds = 0
        self.generated_groups = 0
        self.informative = 0
        self.kept: list[list[tuple[int, int]]] = [[] for _ in range(self.num_processes)]
        self._not_kept: list[list[tuple[int, int]]] = [[] for _ in range(self.num_processes)]
        self._finished = False

    def record_round(self, informative: torch.Tensor) -> None:
        """Take one round's gathered flags (``num_processes * n`` booleans, process-major)."""
        if self.done:
            raise RuntimeError("The batch is already complete (or the round bound was reached): call start().")
        flags = torch.as_tensor(informative, dtype=torch.bool).flatten()
        if flags.numel() == 0 or flags.numel() % self.num_processes:
            raise ValueError(f"Expected n flags per process for {self.num_processes} processes, got {flags.numel()}.")
        per_process = flags.view(self.num_processes, -1).tolist()
        round_index = self.rounds
        for rank, row in enumerate(per_process):
            for group, is_informative in enumerate(row):
                if is_informative and len(self.kept[rank]) < self.groups_per_process:
                    self.kept[rank].append((round_index, group))
                else:
                    self._not_kept[rank].append((round_index, group))
        self.rounds += 1
        self.generated_groups += flags.numel()
        self.informative += int(flags.sum())

    def deficits(self) -> list[int]:
        return [self.groups_per_process - len(kept) for kept in self.kept]

    @property
    def full(self) -> bool:
        """Every process holds its share of informative groups."""
        return max(self.deficits()) == 0

    @property
    def bound_hit(self) -> bool:
        """The rounds stopped at ``max_rounds`` with the batch not full."""
        return not self.full and self.rounds >= self.max_rounds

    @property
    def done(self) -> bool:
        return self.rounds > 0 and (self.full or self.rounds >= self.max_rounds)

    def next_round_groups(self) -> int:
        r"""
        Groups every process generates in the next round: the largest deficit ``D`` scaled by the inverse of the
        informative share seen so far in this batch, ``ceil(D / share)``, never more than a full share
        ``groups_per_process`` (the memory of one stock generation batch) and never fewer than ``D``.
        """
        if self.done:
            raise RuntimeError("No further round: the batch is complete or the round bound was reached.")
        deficit = max(self.deficits())
        if self.informative == 0:
            return self.groups_per_process
        share = self.informative / self.generated_groups
        return min(self.groups_per_process, max(deficit, math.ceil(deficit / share)))

    def candidates(self, rank: int) -> list[tuple[int, int]]:
        """The groups of process ``rank`` that `selection` may still return: its kept groups and its first
        ``groups_per_process`` groups not kept (the fillers at the bound). Everything else can be freed."""
        return self.kept[rank] + self._not_kept[rank][: self.groups_per_process]

    def selection(self, rank: int) -> list[tuple[int, int]]:
        """The groups process ``rank`` trains on: its kept groups, completed at the bound by the groups it generated
        but did not keep (in generation order)."""
        if not self.done:
            raise RuntimeError("The batch is not complete yet: record more rounds first.")
        kept = list(self.kept[rank])
        missing = self.groups_per_process - len(kept)
        return kept + self._not_kept[rank][:missing]

    def metrics(self) -> dict[str, float]:
        """The logged values of this generation batch (`dynamic_sampling/*`)."""
        kept = sum(len(k) for k in self.kept)
        return {
            "dynamic_sampling/rounds": float(self.rounds),
            "dynamic_sampling/generated_groups": float(self.generated_groups),
            "dynamic_sampling/kept_frac": kept / self.generated_groups if self.generated_groups else 0.0,
            "dynamic_sampling/bound_hit": float(self.bound_hit),
        }


class ShuffledOrder:
    """A chunk source for `PromptStream`: each chunk is one pass over ``num_prompts`` rows, in a random order drawn
    from its own seeded generator (the uniform sampling of TRL's `RepeatSampler`), or in row order."""

    def __init__(self, num_prompts: int, seed: int, shuffle: bool = True):
        if num_prompts < 1:
            raise ValueError("The training set is empty.")
        self.num_prompts, self.shuffle = num_prompts, shuffle
        self.generator = torch.Generator()
        self.generator.manual_seed(seed)

    def draw_chunk(self) -> list[int]:
        if self.shuffle:
            return torch.randperm(self.num_prompts, generator=self.generator).tolist()
        return list(range(self.num_prompts))

    def state_dict(self) -> dict:
        return {"num_prompts": self.num_prompts, "generator": self.generator.get_state().tolist()}

    def load_state_dict(self, state: dict) -> None:
        if state["num_prompts"] != self.num_prompts:
            raise ValueError(
                f"The saved prompt stream covers {state['num_prompts']} prompts, this training set has "
                f"{self.num_prompts}. Resume with the same data."
            )
        self.generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))


class PromptStream:
    """
    The extra prompts of dynamic sampling: row indices served from a buffer that a chunk source refills.

    The source is any object with ``draw_chunk() -> list[int]``, ``state_dict()`` and ``load_state_dict()``:
    `ShuffledOrder` for uniform sampling, or a curation sampler (`trl_rlvr_ext.curation.CurationSampler`), so that
    SELF's skipping and pass-rate weighting choose the extra prompts too. Every process owns a copy, draws the same
    counts in the same order, and so sees the same stream. `state_dict` holds the buffer and the source's state
    (its RNG): a resumed run continues the stream where the checkpoint left it.
    """

    def __init__(self, source):
        self.source = source
        self.buffer: list[int] = []
        self.drawn = 0

    def draw(self, n: int) -> list[int]:
        while len(self.buffer) < n:
            self.buffer.extend(int(i) for i in self.source.draw_chunk())
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        self.drawn += n
        return out

    def state_dict(self) -> dict:
        return {
            "version": DYNAMIC_SAMPLING_STATE_VERSION,
            "buffer": list(self.buffer),
            "drawn": self.drawn,
            "source": self.source.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") != DYNAMIC_SAMPLING_STATE_VERSION:
            raise ValueError(f"Unsupported dynamic sampling state version {state.get('version')!r}.")
        self.source.load_state_dict(state["source"])
        self.buffer, self.drawn = [int(i) for i in state["buffer"]], int(state["drawn"])
