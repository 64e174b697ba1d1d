"""Off-policy diagnostics of PPO's clipped objective: how far the ratios have moved, and what the clip cuts.

Over the completion tokens with a non-zero advantage (the only ones with a policy gradient):

    percentiles   p ∈ {1, 10, 50, 90, 99} of r = π_θ / π_old (linear interpolation, as `torch.quantile`)
    clipped share low:  #{A < 0, r < 1 − ε_l} / #tokens,   high: #{A > 0, r > 1 + ε_h} / #tokens

overall and per probability bin (ACPO's bins, `acpo_bin_index`); and how far past its bound each clipped token is,
as a histogram of r / (1 − ε_l) on the low side and r / (1 + ε_h) on the high side (`clipped_ratio_histogram`). The
counts are returned as sums, so that several processes can add them before dividing.
"""

import math

import torch


RATIO_PERCENTILES = (1, 10, 50, 90, 99)
# Bins of a clipped token's ratio as a multiple of the bound it passed. Low side (A < 0, r < 1 − ε_l): r / (1 − ε_l)
# lies in [0, 1), near 1 is "just past the clip"; high side (A > 0, r > 1 + ε_h): r / (1 + ε_h) lies in (1, ∞).
# Fixed edges, so that runs with different ε (or ACPO's per-token bounds) share one histogram.
CLIPPED_LOW_EDGES = (0.0, 0.25, 0.5, 0.75, 0.9, 1.0)
CLIPPED_HIGH_EDGES = (1.0, 1.1, 1.25, 1.5, 2.0, math.inf)


def ratio_percentiles(values: torch.Tensor, percentiles: tuple[int, ...] = RATIO_PERCENTILES) -> torch.Tensor:
    """The ``percentiles`` of the non-NaN entries of ``values`` (any shape), in float32; NaN where there are none.

    NaN entries are padding (e.g. from gathering different numbers of tokens from several processes) and are left
    out."""
    flat = values.detach().reshape(-1).to(torch.float32)
    flat = flat[~flat.isnan()]
    q = torch.tensor([p / 100.0 for p in percentiles], dtype=torch.float32, device=flat.device)
    if flat.numel() == 0:
        return torch.full_like(q, float("nan"))
    return torch.quantile(flat, q)


def clipped_counts(
    clipped_low: torch.Tensor, clipped_high: torch.Tensor, bin_index: torch.Tensor, num_bins: int
) -> torch.Tensor:
    """``(3, num_bins + 1)`` float64 counts [tokens, clipped low, clipped high] per bin, the last column all bins.

    ``bin_index`` (from `acpo_bin_index` with the selection as its mask) is −1 for tokens outside the selection, which
    are not counted."""
    one_hot = (bin_index.reshape(-1, 1) == torch.arange(num_bins, device=bin_index.device)).to(torch.float64)
    per_bin = torch.stack(
        [
            one_hot.sum(0),
            clipped_low.reshape(-1).to(torch.float64) @ one_hot,
            clipped_high.reshape(-1).to(torch.float64) @ one_hot,
        ]
    )
    return torch.cat([per_bin, per_bin.sum(1, keepdim=True)], dim=1)


def clipped_ratio_histogram(
    ratio: torch.Tensor, clipped: torch.Tensor, bound: torch.Tensor | float, edges: tuple[float, ...]
) -> torch.Tensor:
    """``(len(edges) - 1,)`` float64 counts of the ``clipped`` tokens by ``ratio / bound``: bin ``i`` holds
    ``edges[i] <= x < edges[i + 1]`` (a value beyond the outer edges counts in the outer bin).

    ``bound`` is the clip bound each token passed, ``1 − ε_l`` (low side) or ``1 + ε_h`` (high side): a float, or a
    tensor that broadcasts to ``ratio`` (ACPO's per-token bounds)."""
    x = (ratio.detach().to(torch.float64) / bound)[clipped.bool().expand_as(ratio)]
    inner = torch.tensor(edges[1:-1], dtype=torch.float64, device=x.device)
    index = torch.bucketize(x, inner, right=True)
    return torch.bincount(index, minlength=len(edges) - 1).to(torch.float64)
