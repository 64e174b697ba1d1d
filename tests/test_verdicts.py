"""The verdict rule on synthetic records with a known answer: an effect that is there, one that is not, one too small
to tell; the crossed interval and its coverage in simulation; identical arms; Holm over a grid; Student's t; the rule
itself at its edges."""

import math

import numpy as np
import pytest

from lab.studies.coverage import COVERAGE_DESIGNS, pass_at_k_values, simulate_binomial, true_effect
from lab.studies.student_t import student_t_cdf, student_t_quantile
from lab.studies.verdicts import (
    Claim,
    crossed_bootstrap,
    crossed_standard_error,
    crossed_t_interval,
    decide,
    decide_non_inferior,
    hierarchical_bootstrap,
    holm_decisions,
    judge,
    minimum_detectable_effect,
    seed_t_interval,
)


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
    opposite = judge(CLAIM, arm, baseline, num_resamples=2000)  # the opposite of the claim, significantly
    assert (opposite.verdict, opposite.interval_verdict) == ("reversed", "not reproduced")


def test_the_rule_at_its_edges():
    assert decide(0.001, 0.2, 0.05) == "reproduced"
    assert decide(0.0, 0.2, 0.05) == "inconclusive"  # touching 0 does not exclude it
    assert decide(-0.1, 0.049, 0.05) == "not reproduced"
    assert decide(-0.1, 0.05, 0.05) == "inconclusive"  # touching the paper's effect does not exclude it
    assert decide(0.01, 0.03, 0.05) == "reproduced"  # an effect smaller than the paper's is still one
    with pytest.raises(ValueError, match="low <= high"):
        decide(0.2, 0.1, 0.05)


def test_the_non_inferiority_rule_at_its_edges():
    assert decide_non_inferior(-0.029, 0.05, 0.03) == "reproduced"  # excludes a loss of the margin
    assert decide_non_inferior(-0.03, 0.05, 0.03) == "inconclusive"  # touching -margin does not exclude it
    assert decide_non_inferior(-0.2, -0.031, 0.03) == "not reproduced"  # wholly worse by more than the margin
    assert decide_non_inferior(-0.2, -0.03, 0.03) == "inconclusive"
    assert decide_non_inferior(-0.01, -0.001, 0.03) == "reproduced"  # a small, sure loss is within the margin
    with pytest.raises(ValueError, match="low <= high"):
        decide_non_inferior(0.2, 0.1, 0.03)
    with pytest.raises(ValueError, match="margin must be > 0"):
        decide_non_inferior(0.0, 0.1, 0.0)


def test_a_non_inferiority_claim_is_judged_by_its_margin():
    matches = Claim("arm matches base", "arm", "base", "pass@1", margin=0.03)
    assert matches.threshold is None and matches.to_exclude == "-0.030 (margin)"
    assert CLAIM.to_exclude == "0.050 (paper)"
    # a true effect of -0.01 with a tight interval: within the margin, so it matches (a superiority claim fails)
    arm, baseline = _records(-0.01, num_seeds=5, num_problems=400, seed_sd=0.001, problem_sd=0.01)
    j = judge(matches, arm, baseline, num_resamples=2000)
    assert -0.03 < j.low < j.high < 0 and j.verdict == "reproduced"
    assert j.measurably_below  # within the margin, yet the interval excludes 0 below: the page says so
    assert judge(CLAIM, arm, baseline, num_resamples=2000).verdict == "reversed"
    # a true loss of 0.1: worse by more than the margin
    arm, baseline = _records(-0.10, num_seeds=5, num_problems=400, seed_sd=0.001, problem_sd=0.01)
    assert judge(matches, arm, baseline, num_resamples=2000).verdict == "not reproduced"
    with pytest.raises(ValueError, match="one or the other"):
        Claim("c", "a", "b", "pass@1", margin=0.03, smallest_effect=0.1)
    with pytest.raises(ValueError, match="margin must be > 0"):
        Claim("c", "a", "b", "pass@1", margin=-0.03)


def test_the_bootstrap_resamples_seeds_and_one_shared_problem_draw():
    """With one seed's values all shifted, only seed resampling moves the mean; with one problem's values shifted on
    every seed, the crossed draw moves all seeds together (the nested draw averages it away over seeds)."""
    constant = np.full((3, 50), 0.1)
    assert np.allclose(crossed_bootstrap(constant, 500), 0.1)
    shifted = np.zeros((4, 50))
    shifted[0] += 0.4  # one seed differs: only seed resampling moves the mean
    means = crossed_bootstrap(shifted, 2000)
    assert means.std() > 0.05 and set(np.round(np.unique(means), 6)) <= {0.0, 0.1, 0.2, 0.3, 0.4}
    problem = np.zeros((5, 20))
    problem[:, 0] = 1.0  # a problem every seed gains on: a shared effect
    crossed, nested = crossed_bootstrap(problem, 4000), hierarchical_bootstrap(problem, 4000)
    # the crossed replicate mean is (count of problem 0 in the one draw) / 20: sd = sqrt(20 * (1/20)(19/20)) / 20
    assert crossed.std() == pytest.approx(math.sqrt(20 * (1 / 20) * (19 / 20)) / 20, rel=0.06)
    assert nested.std() == pytest.approx(crossed.std() / math.sqrt(5), rel=0.1)  # shrunk by the seed count


def test_the_crossed_standard_error_by_hand():
    # d = grand 0.2 + seed effects (-0.1, +0.1) + problem effects (-0.05, 0, +0.05) + no residual
    d = 0.2 + np.array([[-0.1], [0.1]]) + np.array([[-0.05, 0.0, 0.05]])
    se, df = crossed_standard_error(d)
    ms_seed = 3 * (0.1**2 + 0.1**2) / 1  # P * sum of squared seed-mean deviations / (S - 1) = 0.06
    ms_problem = 2 * (0.05**2 + 0 + 0.05**2) / 2  # S * ... / (P - 1) = 0.005
    assert se == pytest.approx(math.sqrt((ms_seed + ms_problem) / 6))  # MS_residual = 0
    assert df == pytest.approx((ms_seed + ms_problem) ** 2 / (ms_seed**2 / 1 + ms_problem**2 / 2))
    low, high, nu = crossed_t_interval(d)
    assert nu == df and (low + high) / 2 == pytest.approx(0.2)
    assert high - 0.2 == pytest.approx(student_t_quantile(0.975, df) * se)
    # a table whose seeds all agree and problems vary: the seed-t interval sees no spread, the crossed one does
    shared = np.tile(np.linspace(-0.3, 0.5, 30), (4, 1))
    assert seed_t_interval(shared) == pytest.approx((0.1, 0.1))
    low, high, _ = crossed_t_interval(shared)
    assert high - low > 0.1


def _crossed_table(rng, mu, num_seeds, num_problems, seed_sd, problem_sd, residual_sd):
    return (
        mu
        + rng.normal(0, seed_sd, (num_seeds, 1))
        + rng.normal(0, problem_sd, (1, num_problems))
        + rng.normal(0, residual_sd, (num_seeds, num_problems))
    )


@pytest.mark.parametrize(
    "design, num_seeds, num_problems, seed_sd, problem_sd, residual_sd",
    [
        ("gaussian_problem", 5, 40, 0.01, 0.2, 0.1),
        ("gaussian_three_seeds", 3, 60, 0.05, 0.1, 0.1),
        ("gaussian_residual", 5, 30, 0.03, 0.03, 0.2),
    ],
)
def test_the_interval_covers_a_known_effect_about_95_percent_of_the_time(
    design, num_seeds, num_problems, seed_sd, problem_sd, residual_sd
):
    """Synthetic crossed tables with a known mean effect: the rule's interval (the hull) holds it in about 95 % of
    tables, exactly the share the index renders (`coverage.COVERAGE_DESIGNS`); the nested rule it replaces
    undercovers where the shared problem term dominates."""
    declared = {d.name: d for d in COVERAGE_DESIGNS}[design]
    rng = np.random.default_rng(1)
    mu, sims, claim = 0.05, declared.tables, Claim("c", "a", "b", "pass@1", smallest_effect=0.1)
    covered, nested_covered, upper, lower = 0, 0, 0, 0
    for sim in range(sims):
        d = _crossed_table(rng, mu, num_seeds, num_problems, seed_sd, problem_sd, residual_sd)
        j = judge(
            claim,
            {s: d[s] for s in range(num_seeds)},
            {s: np.zeros(num_problems) for s in range(num_seeds)},
            num_resamples=1000,
            seed=sim,
        )
        covered += j.low <= mu <= j.high
        upper += j.high < mu
        lower += j.low > mu
        nested = hierarchical_bootstrap(d, 1000, seed=sim)
        low, high = seed_t_interval(d)
        nested_low, nested_high = min(np.quantile(nested, 0.025), low), max(np.quantile(nested, 0.975), high)
        nested_covered += nested_low <= mu <= nested_high
    assert 0.93 <= covered / sims <= 0.995, covered / sims
    measured = (round(covered / sims, 4), round(upper / sims, 4), round(lower / sims, 4))
    assert measured == (declared.coverage, declared.upper_miss, declared.lower_miss)
    if problem_sd > residual_sd:  # the shared problem term dominates: the old rule's interval was too narrow
        assert nested_covered / sims < 0.85, nested_covered / sims


@pytest.mark.parametrize("design", [d for d in COVERAGE_DESIGNS if d.binomial], ids=lambda d: d.name)
def test_the_interval_coverage_on_binomial_tables_is_what_the_index_says(design):
    """The binomial designs of `coverage.COVERAGE_DESIGNS` (pass@16 near the ceiling, 3 seeds dominated by the seed,
    pass@1 near the floor), simulated again from their seed: the coverage, the misses at each end and the share of
    identical-arm tables the index renders are what the simulation measures. Near the floor the misses fall on the
    high end only (the effect above the interval, 4 % against 2.5 % nominal); with 3 seeds dominated by the seed,
    coverage is under 95 %."""
    assert simulate_binomial(design) == design
    if design.name == "binomial_floor":
        assert design.upper_miss > 0.025 and design.lower_miss == 0
    if design.name == "binomial_seeds":
        assert design.coverage < 0.95


def test_the_true_effect_of_the_binomial_model_by_hand():
    """`coverage.true_effect` against a direct Monte Carlo mean (the quadrature's law), and pass@k's values at c."""
    rng = np.random.default_rng(0)
    logits = rng.normal(-1.0, math.sqrt(0.5**2 + 0.3**2), 400_000)
    sig = 1 / (1 + np.exp(-logits))
    by_hand = float(np.mean((1 - (1 - 1 / (1 + np.exp(-(logits + 0.7)))) ** 4) - (1 - (1 - sig) ** 4)))
    assert true_effect(-1.0, 0.5, 0.3, 0.7, 4) == pytest.approx(by_hand, abs=2e-3)
    assert pass_at_k_values(4, 4).tolist() == [0, 1, 1, 1, 1]
    assert pass_at_k_values(4, 1).tolist() == [0, 0.25, 0.5, 0.75, 1]
    assert pass_at_k_values(4, 2)[1] == pytest.approx(1 - 3 / 6)  # C(3, 2) / C(4, 2)


def test_identical_arms_are_no_test():
    ceiling = {s: np.ones(12) for s in range(3)}
    j = judge(CLAIM, ceiling, ceiling)
    assert j.verdict == "no test" and (j.low, j.high, j.effect) == (0.0, 0.0, 0.0)
    assert math.isnan(j.minimum_detectable_effect)
    # one problem of one seed differs: a test again (a narrow interval, but one that measured something)
    arm = {s: np.ones(12) for s in range(3)}
    arm[1] = np.r_[np.zeros(1), np.ones(11)]
    assert judge(CLAIM, arm, ceiling, num_resamples=500, headroom=False).verdict != "no test"
    # with the headroom rule (the baseline at the ceiling on every cell) no arm could come out above it: no test
    j = judge(CLAIM, arm, ceiling, num_resamples=500)
    assert (j.verdict, j.interval_verdict, j.headroom) == ("no test", "inconclusive", 1.0)


def test_the_detectable_effect_uses_t_quantiles():
    assert minimum_detectable_effect(0.01) == pytest.approx((1.959964 + 0.841621) * 0.01, rel=1e-5)
    assert minimum_detectable_effect(0.01, 4) == pytest.approx((2.776445 + 0.940965) * 0.01, rel=1e-5)
    d = _crossed_table(np.random.default_rng(0), 0.05, 4, 30, 0.05, 0.1, 0.1)
    j = judge(CLAIM, {s: d[s] for s in range(4)}, {s: np.zeros(30) for s in range(4)}, num_resamples=2000)
    se, df = crossed_standard_error(d)
    assert j.degrees_of_freedom == df
    assert j.minimum_detectable_effect >= minimum_detectable_effect(se, df) * (1 - 1e-12)


def test_student_t_against_tables():
    # t_{0.975, df} from printed tables, and the normal limit
    for df, value in [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (9, 2.262), (29, 2.045)]:
        assert student_t_quantile(0.975, df) == pytest.approx(value, abs=5e-4)
    assert student_t_quantile(0.8, 4) == pytest.approx(0.9410, abs=1e-4)
    assert student_t_quantile(0.975, math.inf) == pytest.approx(1.959964, abs=1e-6)
    assert student_t_quantile(0.025, 5) == pytest.approx(-student_t_quantile(0.975, 5))
    assert student_t_cdf(0.0, 3) == 0.5 and student_t_cdf(2.776445, 4) == pytest.approx(0.975, abs=1e-6)
    # a fractional (Satterthwaite) df: the cdf against a numerical integral of the density
    df, x = 2.5, 1.7
    grid = np.linspace(0.0, x, 200_001)
    density = (
        math.gamma((df + 1) / 2)
        / (math.sqrt(df * math.pi) * math.gamma(df / 2))
        * (1 + grid**2 / df) ** (-(df + 1) / 2)
    )
    assert student_t_cdf(x, df) == pytest.approx(0.5 + float(np.trapezoid(density, grid)), abs=1e-9)
    assert student_t_cdf(student_t_quantile(0.975, df), df) == pytest.approx(0.975, abs=1e-10)
    with pytest.raises(ValueError, match="0 < p < 1"):
        student_t_quantile(1.0, 3)


def test_holm_over_a_grid():
    # one point: Holm is the t interval's rule
    for mean in (0.3, 0.0, -0.3):
        low, high = mean - student_t_quantile(0.975, 4) * 0.1, mean + student_t_quantile(0.975, 4) * 0.1
        assert holm_decisions([mean], [0.1], [4], threshold=0.2) == [decide(low, high, 0.2)]
    # three points, each alone just past 0 at 95 % (p ~ 0.02): uncorrected all reproduced; Holm keeps only the
    # strongest (p 0.001 <= 0.025/3), then stops (0.02 > 0.025/2)
    t = student_t_quantile(0.98, 4)  # p = 0.02 at se 0.1
    means = [0.1 * student_t_quantile(0.999, 4), 0.1 * t, 0.1 * t]
    assert [decide(m - student_t_quantile(0.975, 4) * 0.1, 1.0, 5.0) for m in means] == ["reproduced"] * 3
    assert holm_decisions(means, [0.1] * 3, [4] * 3, threshold=0.35) == ["reproduced", "inconclusive", "inconclusive"]
    # the other family: far below the effect to exclude, at every point, is "not reproduced" even after Holm
    assert holm_decisions([-0.5, -0.4], [0.05, 0.05], [4, 4], threshold=0.2) == ["not reproduced"] * 2
    with pytest.raises(ValueError, match="one entry per grid point"):
        holm_decisions([0.1, 0.2], [0.1], [4, 4], threshold=0.2)


def test_claims_and_pairing_are_checked():
    with pytest.raises(ValueError, match="paper_effect or smallest_effect"):
        Claim("c", "a", "b", "pass@1")
    with pytest.raises(ValueError, match="direction must be"):
        Claim("c", "a", "b", "pass@1", direction=2, smallest_effect=0.1)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        judge(CLAIM, {0: [1.0]}, {0: [0.0]})
    with pytest.raises(ValueError, match="they must pair"):
        judge(CLAIM, {0: [1.0], 1: [1.0, 0.0]}, {0: [0.0], 1: [0.0]})


def test_the_rule_reads_the_hull_of_the_bootstrap_and_t_intervals_and_the_metric_k():
    """At 3 seeds that disagree, the crossed t interval (few degrees of freedom) is wider than the bootstrap's; the
    decision interval is the hull of both, so a verdict the bootstrap alone would give can fall to inconclusive; a
    claim's k is read from its metric."""
    differences = np.array([[0.0] * 10, [0.1] * 10, [0.2] * 10])
    judgement = judge(CLAIM, {s: differences[s] for s in range(3)}, {s: np.zeros(10) for s in range(3)})
    assert judgement.t_low < judgement.bootstrap_low and judgement.bootstrap_high < judgement.t_high
    assert (judgement.low, judgement.high) == (judgement.t_low, judgement.t_high)  # here the hull is t's
    # no problem variation: the crossed t interval is the seed-t interval (sd 0.1 over 3 seeds, 2 df)
    assert judgement.degrees_of_freedom == pytest.approx(2)
    assert judgement.t_high - 0.1 == pytest.approx(4.303 * 0.1 / np.sqrt(3), rel=1e-3)
    # the bootstrap alone excludes 0 (every resample of these seeds has a mean >= 0, most > 0) ...
    assert judgement.bootstrap_low >= 0
    # ... but the t interval does not: the rule says inconclusive, not reproduced
    assert judgement.low < 0 and judgement.verdict == "inconclusive"
    assert Claim("c", "a", "b", "pass@256", smallest_effect=0.1).k == 256
    with pytest.raises(ValueError, match="not 'pass@<k>'"):
        _ = Claim("c", "a", "b", "greedy", smallest_effect=0.1).k
    with pytest.raises(ValueError, match="at least 2 seeds"):
        seed_t_interval(differences[:1])


def test_power_at_the_paper_effect_is_the_two_sided_shifted_t():
    from lab.studies.verdicts import power_at

    phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    # the normal limit, by hand: Φ(0.05 / 0.02 − 1.959964) + Φ(−0.05 / 0.02 − 1.959964)
    expected = phi(2.5 - 1.959964) + phi(-2.5 - 1.959964)
    assert power_at(0.05, 0.02) == pytest.approx(expected, abs=1e-6)
    assert power_at(-0.05, 0.02) == power_at(0.05, 0.02)  # |δ|: the sign does not matter
    assert power_at(0.0, 0.02) == pytest.approx(0.05, abs=1e-6)  # no effect: the test's level
    # at the minimum detectable effect the power is the MDE's 80 % plus the far tail, at any ν (the same t)
    for df in (4.0, 9.5, math.inf):
        mde = minimum_detectable_effect(0.013, df)
        far = student_t_cdf(-mde / 0.013 - student_t_quantile(0.975, df), df)
        assert power_at(mde, 0.013, df) == pytest.approx(0.8 + far, abs=1e-9)
    assert math.isnan(power_at(0.05, 0.0))  # no spread measured: no power to state


def test_a_judgement_states_its_power_and_underpowered_only_beside_a_miss():
    arm, baseline = _records(0.0, num_seeds=3, num_problems=30, seed_sd=0.05, problem_sd=0.2)
    j = judge(CLAIM, arm, baseline, num_resamples=2000)
    se = (j.minimum_detectable_effect) / (
        student_t_quantile(0.975, j.degrees_of_freedom) + student_t_quantile(0.8, j.degrees_of_freedom)
    )
    from lab.studies.verdicts import power_at

    assert j.power == pytest.approx(power_at(0.05, se, j.degrees_of_freedom), rel=1e-9)
    assert j.verdict == "inconclusive" and j.power < 0.5 and j.underpowered
    # a stated smallest effect: the power there; a non-inferiority claim: none
    stated = Claim("s", "arm", "base", "pass@1", smallest_effect=0.05)
    assert judge(stated, arm, baseline, num_resamples=2000).power == pytest.approx(j.power, rel=1e-9)
    from lab.studies.verdicts import non_inferiority_power

    matches = Claim("m", "arm", "base", "pass@1", margin=0.03)
    k = judge(matches, arm, baseline, num_resamples=2000)
    assert k.power == pytest.approx(non_inferiority_power(0.03, se, j.degrees_of_freedom), rel=1e-9)
    # by hand, the normal limit: Φ(0.03 / 0.01 − 1.959964)
    assert non_inferiority_power(0.03, 0.01) == pytest.approx(0.5 * (1 + math.erf(1.040036 / math.sqrt(2))), abs=1e-6)
    # a large, sure effect: reproduced, and "underpowered" never sits beside a found effect
    arm, baseline = _records(0.10, num_seeds=5, num_problems=200, seed_sd=0.01, problem_sd=0.05)
    small = Claim("tiny", "arm", "base", "pass@1", paper_effect=0.001)
    j = judge(small, arm, baseline, num_resamples=2000)
    assert j.verdict == "reproduced" and j.power < 0.5 and not j.underpowered


def test_reversed_only_where_the_interval_excludes_zero_on_the_wrong_side():
    arm, baseline = _records(-0.10, num_seeds=5, num_problems=200, seed_sd=0.01, problem_sd=0.05)
    j = judge(CLAIM, arm, baseline, num_resamples=2000)
    assert j.high < 0 and (j.verdict, j.interval_verdict) == ("reversed", "not reproduced")
    # below the paper's effect but not below 0: not reproduced, not reversed (the rule must not fire)
    arm, baseline = _records(0.0, num_seeds=5, num_problems=400, seed_sd=0.001, problem_sd=0.01)
    j = judge(CLAIM, arm, baseline, num_resamples=2000)
    assert j.low < 0 < j.high < 0.05 and j.verdict == "not reproduced"
    # a non-inferiority claim is never "reversed": below 0 it is measurably below, its verdict from the margin
    matches = Claim("m", "arm", "base", "pass@1", margin=0.03)
    arm, baseline = _records(-0.10, num_seeds=5, num_problems=400, seed_sd=0.001, problem_sd=0.01)
    j = judge(matches, arm, baseline, num_resamples=2000)
    assert (j.verdict, j.measurably_below) == ("not reproduced", True)


def _at_bound(share_at_bound: float, value: float, num_seeds=4, num_problems=40):
    """A baseline at ``value`` on ``share_at_bound`` of its seed × problem cells (else 0.5), and an arm a little
    off it on every cell (so the arms are not identical)."""
    cells = num_seeds * num_problems
    at = round(share_at_bound * cells)
    flat = np.r_[np.full(at, value), np.full(cells - at, 0.5)]
    baseline = {s: flat[s * num_problems : (s + 1) * num_problems] for s in range(num_seeds)}
    rng = np.random.default_rng(1)
    arm = {s: np.clip(b + rng.normal(0, 0.05, num_problems) * (1 - 2 * value), 0, 1) for s, b in baseline.items()}
    return arm, baseline


def test_the_headroom_rule_fires_at_its_declared_share_and_not_below():
    from lab.studies.verdicts import HEADROOM_SHARE

    assert HEADROOM_SHARE == 0.95
    higher = Claim("higher", "arm", "base", "pass@32", smallest_effect=0.03)
    arm, baseline = _at_bound(0.95, 1.0)  # 152 of 160 cells at pass = 1
    j = judge(higher, arm, baseline, num_resamples=2000)
    assert (j.verdict, j.headroom) == ("no test", 0.95) and j.no_test.startswith("no headroom")
    assert j.interval_verdict != "reproduced"  # the interval's own verdict is kept, for the rule changes list
    arm, baseline = _at_bound(0.94375, 1.0)  # 151 of 160: below the share, judged
    assert judge(higher, arm, baseline, num_resamples=2000).verdict != "no test"
    # a claim that the arm is lower has no room where the baseline sits at the floor, and room at the ceiling
    lower = Claim("lower", "arm", "base", "pass@32", direction=-1, smallest_effect=0.03)
    arm, baseline = _at_bound(1.0, 0.0)
    assert judge(lower, arm, baseline, num_resamples=2000).no_test.startswith("no headroom: the baseline at pass = 0")
    arm, baseline = _at_bound(1.0, 1.0)
    assert judge(lower, arm, baseline, num_resamples=2000).verdict != "no test"
    # switched off (a trivial-policy baseline): the interval's verdict
    arm, baseline = _at_bound(1.0, 1.0)
    j = judge(higher, arm, baseline, num_resamples=2000, headroom=False)
    assert (j.verdict, j.interval_verdict, j.no_test) == ("reversed", "not reproduced", "")  # the arm fell off it


def test_the_headroom_rule_does_not_override_a_reproduced_interval():
    higher = Claim("higher", "arm", "base", "pass@32", smallest_effect=0.03)
    baseline = {s: np.r_[np.ones(144), np.zeros(6)] for s in range(4)}  # 96 % of the cells at the ceiling
    arm = {s: np.ones(150) for s in range(4)}  # the arm solves the 6 problems left, on every seed
    j = judge(higher, arm, baseline, num_resamples=2000)
    assert j.headroom == 0.96 and j.low > 0 and j.verdict == "reproduced" and j.no_test == ""
