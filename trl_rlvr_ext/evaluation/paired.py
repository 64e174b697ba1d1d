"""Resampling intervals of a paired seeds × problems table of differences (arm minus baseline, or after minus before).

Every seed is evaluated on the same problems, so a problem's effect is shared by every seed: the **crossed** bootstrap
draws the seeds with replacement and ONE problem draw, with replacement, shared by every drawn seed (redrawing the
problems within each seed instead would shrink the shared problem variance by the number of seeds). With one seed it
is the ordinary bootstrap over problems. numpy only.
"""

import numpy as np


def chunked_resample_means(differences, num_resamples: int, seed: int, resample) -> np.ndarray:
    """Means of ``num_resamples`` resamples of the seeds × problems table, drawn 1000 at a time (memory stays bounded)
    by ``resample(rng, size, num_seeds, num_problems, differences)``, which returns ``size`` resampled tables."""
    differences = np.asarray(differences, dtype=float)
    num_seeds, num_problems = differences.shape
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, num_resamples, 1000):
        size = min(1000, num_resamples - start)
        means.append(resample(rng, size, num_seeds, num_problems, differences).mean(axis=(1, 2)))
    return np.concatenate(means)


def _crossed(rng, size, num_seeds, num_problems, differences):
    seed_draws = rng.integers(0, num_seeds, size=(size, num_seeds))
    problem_draws = rng.integers(0, num_problems, size=(size, num_problems))
    return differences[seed_draws[:, :, None], problem_draws[:, None, :]]


def crossed_bootstrap(differences: np.ndarray, num_resamples: int = 10_000, seed: int = 0) -> np.ndarray:
    """Means of ``num_resamples`` crossed resamples of ``differences`` (seeds × problems): the seeds with replacement
    and one problem draw with replacement, the same for every drawn seed."""
    return chunked_resample_means(differences, num_resamples, seed, _crossed)


def crossed_percentile_interval(
    differences, level: float = 0.95, num_resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """The percentile interval of the mean of ``differences`` (seeds × problems) under `crossed_bootstrap`."""
    means = crossed_bootstrap(differences, num_resamples=num_resamples, seed=seed)
    tail = (1 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))
