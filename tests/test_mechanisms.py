"""SELF's mechanisms judged by prediction (`lab.studies.mechanisms`): the unbiased winner-take-all on
hand-computed records, the regression to the mean it avoids, and the prediction verdict on units with a known answer."""

import math
from statistics import NormalDist

import numpy as np
import pytest

from lab.studies.mechanisms import (
    difficulty_ranks,
    prediction,
    prediction_rule_changes,
    prediction_table_markdown,
    quintile_deltas,
    quintile_table_markdown,
    units_from_records,
    winner_take_all,
)


MAIN = {"max_steps": 100, "learning_rate": 5e-5}
PROVOKE = {"max_steps": 200, "learning_rate": 2e-4}
SETTINGS = [("main", MAIN), ("provoke", PROVOKE)]


def _record(arm, seed, counts, n=10, sizes=MAIN, task="t", boundary=None):
    return {
        "task": task,
        "arm": arm,
        "seed": seed,
        "sizes": dict(sizes),
        "num_correct": [int(c) for c in counts],
        "num_samples": n,
        "boundary": boundary or [],
    }


# 10 problems, 10 samples: the other seeds (1, 2) say problems 0-4 are easy and 5-9 hard; seed 0's own base says the
# opposite order (0 hardest), so ranking by seed 0 itself would give other groups
BASES = [
    _record("base", 0, range(10)),
    _record("base", 1, [10] * 5 + [0] * 5),
    _record("base", 2, [8] * 5 + [2] * 5),
]


def test_difficulty_ranks_pool_the_other_seeds_only():
    np.testing.assert_allclose(difficulty_ranks(BASES, exclude_seed=0), [0.9] * 5 + [0.1] * 5)
    np.testing.assert_allclose(
        difficulty_ranks(BASES, exclude_seed=1), (np.arange(10) + np.array([8] * 5 + [2] * 5)) / 20
    )
    # the same base evaluation recorded twice (two settings' files) counts once
    np.testing.assert_allclose(difficulty_ranks(BASES + [dict(BASES[1], sizes=PROVOKE)], 0), [0.9] * 5 + [0.1] * 5)


def test_difficulty_ranks_refuse_a_single_base_seed_and_conflicting_records():
    with pytest.raises(ValueError, match=">= 2 base seeds"):
        difficulty_ranks(BASES[:1], exclude_seed=0)
    with pytest.raises(ValueError, match="Two different base records"):
        difficulty_ranks(BASES + [_record("base", 1, [3] * 10)], exclude_seed=0)


def test_quintile_deltas_and_winner_take_all_by_hand():
    arm = _record("grpo", 0, [5] * 10)  # Δ = 0.5 − seed-0 base = 0.5, 0.4, ..., −0.4
    # bottom group (5-9 by seeds 1, 2): mean(0, −.1, −.2, −.3, −.4) = −0.2; top (0-4): mean(.5, .4, .3, .2, .1) = 0.3
    np.testing.assert_allclose(quintile_deltas(arm, BASES, num_groups=2), [-0.2, 0.3])
    assert winner_take_all(arm, BASES, num_groups=2) == pytest.approx(0.5)
    np.testing.assert_allclose(quintile_deltas(arm, BASES), [-0.05, -0.25, 0.05, 0.35, 0.15])  # groups of 2
    with pytest.raises(ValueError, match="No base record of seed 7"):
        quintile_deltas(_record("grpo", 7, [5] * 10), BASES)


def test_ties_in_the_base_pass_rate_are_broken_by_problem_index():
    bases = [_record("base", 0, [0] * 10), _record("base", 1, [5] * 10), _record("base", 2, [5] * 10)]
    arm = _record("grpo", 0, [1, 2, 3, 4, 5, 0, 0, 0, 0, 10])  # all tie on seeds 1, 2: groups are 0-4 and 5-9
    np.testing.assert_allclose(quintile_deltas(arm, bases, num_groups=2), [0.3, 0.2])


def _noisy(rng, seed, p, n, arm="base"):
    return _record(arm, seed, rng.binomial(n, p), n=n)


def test_ranking_by_the_same_seed_creates_a_spurious_effect_the_other_seeds_do_not():
    """Every problem has the same true pass rate and training changes nothing: any winner-take-all is noise."""
    rng = np.random.default_rng(0)
    p, n, num_problems = 0.5, 16, 500
    bases = [_noisy(rng, s, np.full(num_problems, p), n) for s in range(3)]
    arm = _noisy(rng, 0, np.full(num_problems, p), n, arm="grpo")
    # sd of a top-minus-bottom under the null: each Δ_i has variance 2p(1−p)/n, each group holds num_problems / 5
    sigma = math.sqrt(2 * p * (1 - p) / n / (num_problems / 5) * 2)
    independent = winner_take_all(arm, bases)
    assert abs(independent) < 4 * sigma, (independent, sigma)
    # the naive ranking: seed 0's own base samples, passed as the "other" seed
    same_seed = winner_take_all(arm, [bases[0], dict(bases[0], seed=99)])
    z = NormalDist().inv_cdf(0.8)
    expected = -2 * NormalDist().pdf(z) / 0.2 * math.sqrt(p * (1 - p) / n)  # −2 · E[top fifth of N(0,1)] · sd
    assert expected == pytest.approx(-0.35, abs=0.01)
    assert abs(same_seed - expected) < 4 * sigma and same_seed < -10 * sigma, (same_seed, expected, sigma)


@pytest.mark.parametrize("sign", [1, -1])
def test_a_real_winner_take_all_is_seen_with_its_sign(sign):
    rng = np.random.default_rng(1)
    n, num_problems = 64, 500
    true = rng.uniform(0.2, 0.8, num_problems)
    bases = [_noisy(rng, s, true, n) for s in range(3)]
    arm = _noisy(rng, 0, true + sign * 0.3 * (true - 0.5), n, arm="grpo")
    # expected: 0.3 · (mean of the top fifth − mean of the bottom fifth of U(0.2, 0.8)) = 0.3 · 0.48 = 0.144
    assert sign * winner_take_all(arm, bases) == pytest.approx(0.144, abs=0.04)


def _units(metric, shrink):
    return [{"task": f"t{i}", "m": m, "shrink": s} for i, (m, s) in enumerate(zip(metric, shrink))]


def test_prediction_of_a_strong_negative_correlation_is_reproduced():
    rng = np.random.default_rng(2)
    metric = np.linspace(0, 1, 12)
    result = prediction(_units(metric, -metric + rng.normal(0, 0.05, 12)), "m")
    assert result.verdict == "reproduced" and result.rho < -0.8 and result.high < 0 and result.num_units == 12


def test_prediction_of_a_positive_correlation_is_reversed():
    """The claims' rule (`verdicts.with_reversal`): an interval of ρ wholly above 0, the wrong side of the claimed
    ρ < 0, is reversed (its interval alone says not reproduced); one that excludes ρ <= −0.3 but not 0 stays not
    reproduced; and the list of rule changes names the moved metric only."""
    metric = np.linspace(0, 1, 12)
    result = prediction(_units(metric, metric), "m")
    assert result.rho == pytest.approx(1.0) and result.low > 0
    assert (result.verdict, result.interval_verdict) == ("reversed", "not reproduced")
    # a weak positive ρ: its interval holds 0 and excludes −0.3
    rng = np.random.default_rng(3)
    weak = rng.normal(0, 1, 40)
    near_zero = prediction(_units(weak, 0.15 * weak + rng.normal(0, 1, 40)), "m")
    assert near_zero.low < 0 < near_zero.high and near_zero.low > -0.3, (near_zero.low, near_zero.high)
    assert near_zero.verdict == near_zero.interval_verdict == "not reproduced"
    changes = prediction_rule_changes([result, near_zero], "Claim", "[p](p.md)").splitlines()
    assert changes[0] == "- *Claim* ([p](p.md)), by prediction:" and len(changes) == 2
    assert changes[1].startswith("    - m: not reproduced → reversed (")
    assert prediction_rule_changes([near_zero], "Claim", "[p](p.md)") == "- none"


def test_prediction_with_few_or_noisy_units_is_inconclusive():
    few = prediction(_units([1, 2, 3], [3, 2, 1]), "m")
    assert few.verdict == "inconclusive" and "3 units" in few.reason and math.isnan(few.low)
    assert few.rho == pytest.approx(-1.0)
    noisy = prediction(_units([1, 2, 3, 4, 5, 6], [3, 6, 1, 5, 2, 4]), "m")
    assert noisy.verdict == "inconclusive" and noisy.low < -0.3 < 0 < noisy.high
    constant = prediction(_units([0.1] * 6, range(6)), "m")
    assert constant.verdict == "inconclusive" and "constant" in constant.reason
    nan = prediction(_units([float("nan")] * 5 + [1], range(6)), "m")  # units without a probe are left out
    assert nan.num_units == 1 and nan.verdict == "inconclusive"


def test_prediction_uses_average_ranks_and_survives_constant_resamples():
    assert prediction(_units([1, 2, 2, 3], [1, 3, 2, 4]), "m").rho == pytest.approx(4.5 / math.sqrt(22.5))
    tied = prediction(_units([0, 0, 0, 1], [0.1, 0.2, 0.3, -0.5]), "m")  # drawing only the 0s: no ρ
    assert tied.degenerate_resamples > 0 and np.isfinite([tied.low, tied.high]).all()


def test_the_bootstrap_interval_is_deterministic_given_its_seed():
    rng = np.random.default_rng(3)
    units = _units(rng.normal(size=8), rng.normal(size=8))
    first, again, other = prediction(units, "m"), prediction(units, "m"), prediction(units, "m", seed=1)
    assert (first.low, first.high) == (again.low, again.high)
    assert (first.low, first.high) != (other.low, other.high)


def _probe(step, interference, wta=-0.5):
    return {"step": step, "boundary/interference_frac": interference, "boundary/winner_take_all": wta}


def test_units_from_records_pair_seeds_and_settings():
    records = BASES + [
        _record("grpo", 0, [5] * 10, boundary=[_probe(100, 0.3), _probe(0, 0.0)]),
        _record("grpo", 0, [5] * 10, boundary=[_probe(100, 0.3), _probe(0, 0.0)]),  # recorded twice: once
        _record("grpo", 1, [0] + [10] * 9, boundary=[_probe(0, 0.0), _probe(100, 0.1)]),
        _record("grpo", 0, [5] * 10, sizes=PROVOKE),  # one seed: no unit
        _record("self", 0, [1] * 10),  # no probe
        _record("self", 1, [1] * 10),
        _record("self", 5, [1] * 10),  # no base of seed 5: left out
        # the same evaluations as grpo on every seed (the same model, e.g. a same-budget arm that stopped where grpo
        # did): not a unit of its own; one seed differing makes it one
        _record("grpo_same_budget", 0, [5] * 10),
        _record("grpo_same_budget", 1, [0] + [10] * 9),
        _record("short", 0, [5] * 10),
        _record("short", 1, [0] * 10),
    ]
    units = {(u["setting"], u["arm"]): u for u in units_from_records(records, SETTINGS)}
    assert sorted(units) == [("main", "grpo"), ("main", "self"), ("main", "short")]
    grpo = units["main", "grpo"]
    assert grpo["seeds"] == [0, 1] and grpo["interference_frac"] == pytest.approx(0.2)
    # pass@10: seed 0 base 0.9 (problem 0 never solved), arm 1.0; seed 1 base 0.5, arm 0.9 -> mean (0.1 + 0.4) / 2
    assert grpo["shrink"] == pytest.approx(0.25) and grpo["probe_winner_take_all"] == pytest.approx(-0.5)
    assert units["main", "self"]["seeds"] == [0, 1] and math.isnan(units["main", "self"]["interference_frac"])
    assert units["main", "self"]["shrink"] == pytest.approx(((1 - 0.9) + (1 - 0.5)) / 2)


def test_markdown_tables():
    records = BASES + [_record("grpo", 0, [5] * 10), _record("grpo", 1, [10] * 10)]
    table = quintile_table_markdown(records, num_groups=2)
    # seed 0: [−0.2, 0.3] (by hand above); seed 1: Δ = 0 on 0-4 and 1 on 5-9, and bases 0, 2 rank 5, 0, 6, 1, 7 low
    # (ties by index): [0.6, 0.4]
    assert "| grpo | 0,1 | +0.200 ± 0.566 | +0.350 ± 0.071 | +0.150 ± 0.495 |" in table
    assert "| base (pass@1 level, not Δ) | 0,1,2 |" in table
    with pytest.raises(ValueError, match="one setting"):
        quintile_table_markdown(records + [_record("grpo", 2, [5] * 10, sizes=PROVOKE)])
    results = [prediction(_units([1, 2, 3], [3, 2, 1]), "m"), prediction(_units(range(12), range(12)), "m")]
    lines = prediction_table_markdown(results).splitlines()
    assert lines[2] == "| m | 3 | -1.00 | — | inconclusive (3 units: a rank correlation needs >= 4) |"
    assert lines[3].startswith("| m | 12 | +1.00 | [+1.00, +1.00] | reversed |")


def test_a_run_probed_only_at_step_0_has_no_end_of_training_probe():
    from lab.studies.mechanisms import _last_probe
    from lab.studies.records import end_probe

    probed = {
        "boundary": [{"step": 0, "boundary/interference_frac": 0.0}, {"step": 20, "boundary/interference_frac": 0.3}]
    }
    assert end_probe(probed) == {"step": 20, "boundary/interference_frac": 0.3}
    assert _last_probe(probed, "boundary/interference_frac") == 0.3
    # a 14-step run with a probe every 20 steps: its one probe is step 0, where every change is 0 by definition
    short = {"boundary": [{"step": 0, "boundary/interference_frac": 0.0}]}
    assert end_probe(short) is None and math.isnan(_last_probe(short, "boundary/interference_frac"))
    assert end_probe({"boundary": []}) is None and end_probe({}) is None
