"""The matched-KL comparison of frontiers (`lab.studies.frontier`): interpolation by hand, no extrapolation,
and the seed-paired comparison on synthetic runs whose answer is known."""

import math

import numpy as np
import pytest

from lab.studies.frontier import (
    MatchedKLClaim,
    compare_at_kl,
    compare_records,
    gold_at_kl,
    matched_kl_table,
)


def _frontier(points):
    """``[(step, kl, greedy_acc)]`` -> frontier entries (pass1 = half the greedy accuracy)."""
    return [{"step": s, "kl": kl, "greedy_acc": g, "pass1": g / 2} for s, kl, g in points]


def test_gold_at_kl_interpolates_inside_reads_endpoints_and_never_extrapolates():
    run = _frontier([(4, 1.2, 0.2), (0, 0.0, 0.5), (2, 0.4, 0.6)])  # given out of order: read in step order
    # inside a segment: 0.5 + (0.25 - 0) / (0.4 - 0) * (0.6 - 0.5) = 0.5625
    assert gold_at_kl(run, 0.25) == pytest.approx(0.5625, abs=1e-12)
    # (0.8 - 0.4) / (1.2 - 0.4) = 0.5 of the way from 0.6 to 0.2
    assert gold_at_kl(run, 0.8) == pytest.approx(0.4, abs=1e-12)
    assert gold_at_kl(run, 0.8, key="pass1") == pytest.approx(0.2, abs=1e-12)
    # a measured point, and the range's two ends, give their own values
    assert gold_at_kl(run, 0.4) == pytest.approx(0.6, abs=1e-12)
    assert gold_at_kl(run, 0.0) == pytest.approx(0.5, abs=1e-12)
    assert gold_at_kl(run, 1.2) == pytest.approx(0.2, abs=1e-12)
    # outside the measured range: None, never a line drawn past the points
    assert gold_at_kl(run, 1.2000001) is None and gold_at_kl(run, -0.1) is None
    # a wobbling KL estimate: the first crossing in step order (0 -> 0.6 straddles 0.4), not a later one
    wobbly = _frontier([(0, 0.0, 0.5), (2, 0.6, 0.4), (4, 0.2, 0.9), (6, 1.0, 0.1)])
    assert gold_at_kl(wobbly, 0.4) == pytest.approx(0.5 + (0.4 / 0.6) * (0.4 - 0.5), abs=1e-12)
    # a run measured at one point only (the base) is defined at that KL alone
    assert (
        gold_at_kl(_frontier([(0, 0.0, 0.55)]), 0.0) == 0.55 and gold_at_kl(_frontier([(0, 0.0, 0.55)]), 0.1) is None
    )
    with pytest.raises(ValueError, match="finite"):
        gold_at_kl(run, math.nan)
    with pytest.raises(ValueError, match="empty frontier"):
        gold_at_kl([], 0.5)


def _two_point_run(kl_end, gold_start, gold_end):
    return _frontier([(0, 0.0, gold_start), (20, kl_end, gold_end)])


CLAIM = MatchedKLClaim("arm above base at matched KL", arm="a", baseline="b", smallest_effect=0.02)


def test_paired_comparison_hand_computed_interval():
    # At KL 0.5 each arm run is half-way along: arm = 0.5 + d / 2, baseline = 0.5, so the differences are d / 2.
    arm = {s: _two_point_run(1.0, 0.5, 0.5 + d) for s, d in zip((10, 11, 12), (0.2, 0.4, 0.6))}
    base = {s: _two_point_run(1.0, 0.5, 0.5) for s in (10, 11, 12)}
    (c,) = compare_at_kl(CLAIM, arm, base, [0.5])
    assert c.seeds == (10, 11, 12) and c.differences == pytest.approx((0.1, 0.2, 0.3), abs=1e-12)
    # mean 0.2, sd 0.1, t_{0.975, 2} = 4.302653 (to 6 decimals): half-width 4.302653 * 0.1 / sqrt(3) = 0.248414
    assert c.mean == pytest.approx(0.2, abs=1e-12)
    assert (c.low, c.high) == pytest.approx((0.2 - 0.248414, 0.2 + 0.248414), abs=1e-6)
    assert c.verdict == "inconclusive"  # the interval holds 0 and the smallest effect 0.02
    # the claimed direction -1 flips the signs
    (flipped,) = compare_at_kl(
        MatchedKLClaim("arm below", arm="a", baseline="b", direction=-1, smallest_effect=0.02), arm, base, [0.5]
    )
    assert flipped.mean == pytest.approx(-0.2, abs=1e-12) and flipped.high == pytest.approx(-0.2 + 0.248414, abs=1e-5)
    assert flipped.verdict == "inconclusive"  # its high end 0.048 is above the smallest effect 0.02


def test_paired_comparison_finds_an_effect_that_is_there_and_rejects_one_that_is_not():
    rng = np.random.default_rng(0)
    seeds = range(10, 15)
    # the baseline's gold falls with KL from its own per-seed level; each run reaches KL 2.0
    base = {s: _two_point_run(2.0, 0.55 + 0.02 * rng.standard_normal(), 0.25) for s in seeds}

    def shifted(run, shift, noise):
        return [{**e, "greedy_acc": e["greedy_acc"] + shift + noise * rng.standard_normal()} for e in run]

    there = {s: shifted(base[s], 0.10, 0.01) for s in seeds}  # +0.10 at every KL, paired by seed
    absent = {s: shifted(base[s], 0.0, 0.002) for s in seeds}
    grid = (0.25, 0.5, 1.0, 2.0)
    found = compare_at_kl(CLAIM, there, base, grid)
    assert [c.verdict for c in found] == ["reproduced"] * 4
    assert all(c.seeds == tuple(seeds) and c.low > 0 and c.mean == pytest.approx(0.1, abs=0.02) for c in found)
    nothing = compare_at_kl(CLAIM, absent, base, grid)
    assert [c.verdict for c in nothing] == ["not reproduced"] * 4
    assert all(c.high < 0.02 for c in nothing)


def test_too_few_seeds_at_a_kl_is_inconclusive_and_says_which_seeds_never_got_there():
    seeds = (10, 11, 12, 13, 14)
    base = {s: _two_point_run(2.0, 0.55, 0.25) for s in seeds}
    # the arm is far above the baseline, but only seed 10 reaches KL 1.0 (the others stop at 0.5)
    arm = {s: _two_point_run(2.0 if s == 10 else 0.5, 0.8, 0.8) for s in seeds}
    low_kl, high_kl = compare_at_kl(CLAIM, arm, base, [0.25, 1.0])
    assert low_kl.verdict == "reproduced" and low_kl.seeds == seeds
    assert high_kl.seeds == (10,) and high_kl.missing == (11, 12, 13, 14)
    assert high_kl.verdict == "inconclusive" and high_kl.low is None and high_kl.mean == pytest.approx(0.8 - 0.4)
    # seeds only one arm ran are not paired at all
    only_arm = compare_at_kl(CLAIM, {**arm, 99: arm[10]}, base, [0.25])[0]
    assert 99 not in only_arm.seeds + only_arm.missing
    with pytest.raises(ValueError, match="empty KL grid"):
        compare_at_kl(CLAIM, arm, base, [])


def test_records_grouping_and_the_table():
    records = [
        {"arm": arm, "seed": s, "frontier": _two_point_run(1.0, 0.5, value)}
        for s in (10, 11, 12)
        for arm, value in (("a", 0.5 + 0.01 * s), ("b", 0.5))
    ] + [{"arm": "c", "seed": 10, "frontier": []}]
    claims = [CLAIM, MatchedKLClaim("c vs b", arm="c", baseline="b", metric="pass1")]
    comparisons = compare_records(claims, records, (0.5, 1.5))
    assert [(c.claim.arm, c.kl) for c in comparisons] == [("a", 0.5), ("a", 1.5)]  # c has no frontier: no row
    table = matched_kl_table(comparisons)
    lines = table.splitlines()
    assert lines[0].startswith("| comparison | metric | KL | seeds | mean difference |") and len(lines) == 4
    assert "| (a − b) | greedy_acc | 0.5 | 3 (10, 11, 12) | +0.055 |" in table
    assert "| 1.5 | 0; not reached: 10, 11, 12 | - | - | inconclusive |" in table
    with pytest.raises(ValueError, match="not a frontier gold key"):
        MatchedKLClaim("bad", arm="a", baseline="b", metric="pass@1")
