"""The verdict rule on synthetic records with a known answer: an effect that is there, one that is not, one too small
to tell; the hierarchical interval; the rule itself at its edges."""

import numpy as np
import pytest

from trl_rlvr_ext.studies.verdicts import Claim, decide, hierarchical_bootstrap, judge, minimum_detectable_effect


def _records(effect: float, num_seeds: int, num_problems: int, seed_sd: float, problem_sd: float, rng_seed=0):
    """Per-seed, per-problem metric values of a baseline and an arm whose true mean is ``effect`` higher."""
    rng = np.random.default_rng(rng_seed)
    difficulty = rng.uniform(0.2, 0.8, size=num_problems)
    baseline, arm = {}, {}
    for s in range(num_seeds):
        baseline[s] = np.clip(difficulty + rng.normal(0, seed_sd) + rng.normal(0, problem_sd, num_problems), 0, 1)
        arm[s] = np.clip(baseline[s] + effect + rng.normal(0, seed_sd) + rng.normal(0, problem_sd, num_problems), 0, 1)
    return arm, baseline


CLAIM = Claim("arm raises pass@1", arm="arm", baseline="base", metric="pass@1", paper_effect=0.05)


def test_an_effect_that_is_there_is_reproduced():
    arm, baseline = _records(0.10, num_seeds=5, num_problems=200, seed_sd=0.01, problem_sd=0.05)
    judgement = judge(CLAIM, arm, baseline, num_resamples=2000)
    assert judgement.verdict == "reproduced" and judgement.low > 0
    assert judgement.low < judgement.effect < judgement.high and abs(judgement.effect - 0.10) < 0.02


def test_no_effect_with_enough_data_is_not_reproduced():
    arm, baseline = _records(0.0, num_seeds=8, num_problems=400, seed_sd=0.005, problem_sd=0.03)
    judgement = judge(CLAIM, arm, baseline, num_resamples=2000)
    assert judgement.verdict == "not reproduced" and judgement.high < 0.05
    assert judgement.minimum_detectable_effect < 0.05  # this design could have seen the paper's effect


def test_too_little_data_is_inconclusive():
    arm, baseline = _records(0.02, num_seeds=2, num_problems=20, seed_sd=0.05, problem_sd=0.2)
    judgement = judge(CLAIM, arm, baseline, num_resamples=2000)
    assert judgement.verdict == "inconclusive"
    assert judgement.low <= 0 and judgement.high >= 0.05  # contains both 0 and the paper's effect
    assert judgement.minimum_detectable_effect > 0.05  # the design cannot tell the paper's effect from none


def test_the_claimed_direction_signs_the_effect():
    arm, baseline = _records(-0.10, num_seeds=5, num_problems=200, seed_sd=0.01, problem_sd=0.05)
    lower = Claim("arm lowers pass@256", "arm", "base", "pass@256", direction=-1, smallest_effect=0.03)
    assert judge(lower, arm, baseline, num_resamples=2000).verdict == "reproduced"
    assert judge(CLAIM, arm, baseline, num_resamples=2000).verdict == "not reproduced"  # the opposite of the claim


def test_the_rule_at_its_edges():
    assert decide(0.001, 0.2, 0.05) == "reproduced"
    assert decide(0.0, 0.2, 0.05) == "inconclusive"  # touching 0 does not exclude it
    assert decide(-0.1, 0.049, 0.05) == "not reproduced"
    assert decide(-0.1, 0.05, 0.05) == "inconclusive"  # touching the paper's effect does not exclude it
    assert decide(0.01, 0.03, 0.05) == "reproduced"  # an effect smaller than the paper's is still one
    with pytest.raises(ValueError, match="low <= high"):
        decide(0.2, 0.1, 0.05)


def test_the_bootstrap_resamples_seeds_and_problems():
    """With one seed's values all shifted, the interval widens only when seeds are resampled (the seed level is
    real), and a constant difference has a zero-width interval."""
    constant = np.full((3, 50), 0.1)
    assert np.allclose(hierarchical_bootstrap(constant, 500), 0.1)
    shifted = np.zeros((4, 50))
    shifted[0] += 0.4  # one seed differs: only seed resampling moves the mean
    means = hierarchical_bootstrap(shifted, 2000)
    assert means.std() > 0.05 and set(np.round(np.unique(means), 6)) <= {0.0, 0.1, 0.2, 0.3, 0.4}


def test_claims_and_pairing_are_checked():
    with pytest.raises(ValueError, match="paper_effect or smallest_effect"):
        Claim("c", "a", "b", "pass@1")
    with pytest.raises(ValueError, match="direction must be"):
        Claim("c", "a", "b", "pass@1", direction=2, smallest_effect=0.1)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        judge(CLAIM, {0: [1.0]}, {0: [0.0]})
    with pytest.raises(ValueError, match="they must pair"):
        judge(CLAIM, {0: [1.0], 1: [1.0, 0.0]}, {0: [0.0], 1: [0.0]})
    assert minimum_detectable_effect(0.01) == pytest.approx((1.959964 + 0.841621) * 0.01, rel=1e-5)


def test_the_rule_reads_the_hull_of_the_bootstrap_and_seed_t_intervals_and_the_metric_k():
    """The t interval over seeds is wider than the bootstrap's at 3 seeds, and centred on the mean per-seed
    difference; the decision interval is the hull of both, so a verdict the bootstrap alone would give can fall to
    inconclusive; a claim's k is read from its metric."""
    from trl_rlvr_ext.studies.verdicts import seed_t_detectable_effect, seed_t_interval

    differences = np.array([[0.0] * 10, [0.1] * 10, [0.2] * 10])
    low, high = seed_t_interval(differences)
    assert (low + high) / 2 == pytest.approx(0.1)
    assert high - 0.1 == pytest.approx(4.303 * 0.1 / np.sqrt(3), rel=1e-3)  # t_{0.975, 2} * sd / sqrt(n)
    judgement = judge(CLAIM, {s: differences[s] for s in range(3)}, {s: np.zeros(10) for s in range(3)})
    assert judgement.seed_t_low < judgement.bootstrap_low and judgement.bootstrap_high < judgement.seed_t_high
    assert (judgement.low, judgement.high) == (judgement.seed_t_low, judgement.seed_t_high)  # here the hull is t's
    # the bootstrap alone excludes 0 (every resample of these seeds has a mean >= 0, most > 0) ...
    assert judgement.bootstrap_low >= 0
    # ... but the seed-level interval does not (sd 0.1 over 3 seeds): the rule says inconclusive, not reproduced
    assert judgement.low < 0 and judgement.verdict == "inconclusive"
    assert judgement.minimum_detectable_effect == pytest.approx(seed_t_detectable_effect(differences))
    assert seed_t_detectable_effect(differences) == pytest.approx((4.303 + 0.8416) * 0.1 / np.sqrt(3), rel=1e-3)
    assert Claim("c", "a", "b", "pass@256", smallest_effect=0.1).k == 256
    with pytest.raises(ValueError, match="not 'pass@<k>'"):
        _ = Claim("c", "a", "b", "greedy", smallest_effect=0.1).k
    with pytest.raises(ValueError, match="at least 2 seeds"):
        seed_t_interval(differences[:1])
