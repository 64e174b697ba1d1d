"""What a run's records say about its clip: the share of completion tokens it cut (`clipped_share`), and the share a
clip-rule claim needs before it is judged (`CLIP_TARGET`). Shared by the NSR study (its regime choice) and the
pretrained study (the mechanism gate of its NSR claim), so neither study imports the other.
"""

import math

from .design import train_log_series


# A clip rule has something to act on once the clip cuts at least this share of the tokens: the NSR study's regime
# requirement (`choose_clip_regime`), and the minimum of the pretrained study's mechanism gate on NSR's claim.
CLIP_TARGET = 0.05


def _finite(result: dict, key: str) -> list[float]:
    return [v for _, v in train_log_series(result, key) if v is not None and not math.isnan(v)]


def _two_sided_share(result: dict, low_key: str, high_key: str) -> float | None:
    """Mean over logged steps of the low side's share plus the high side's (``None`` where neither is logged). The
    trainer logs both sides at the same steps; a record where they differ is malformed, and is refused, not read."""
    low, high = _finite(result, low_key), _finite(result, high_key)
    if not low and not high:
        return None
    if len(low) != len(high):
        raise ValueError(
            f"The record ({result.get('task')}, {result.get('arm')}, seed {result.get('seed')}) logs {low_key} and "
            f"{high_key} at different steps ({len(low)} vs {len(high)} values); re-export it from its run's "
            "result.json."
        )
    return sum(a + b for a, b in zip(low, high)) / len(low)


def clipped_share(result: dict) -> float | None:
    """Mean share of completion tokens the clip cut off, under the bounds the run trained with: for ACPO arms the sum
    of ``adaptive_clip/clip_ratio_low`` and ``_high`` (its per-token bounds; TRL's ``clip_ratio/*`` keep measuring
    against the fixed ε there), for the other hard-clip losses TRL's ``clip_ratio/region_mean``, and for CISPO its
    ``cispo_clip_ratio`` (IS weight capped at ε_max). ``None`` for SAPO, which has no hard clip."""
    acpo = _two_sided_share(result, "adaptive_clip/clip_ratio_low", "adaptive_clip/clip_ratio_high")
    if acpo is not None:
        return acpo
    for key in ("clip_ratio/region_mean", "cispo_clip_ratio"):
        values = _finite(result, key)
        if values:
            return sum(values) / len(values)
    return None
