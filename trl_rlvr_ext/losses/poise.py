"""POISE: a value baseline read from the policy's own hidden states, fitted online, used across sibling rollouts.

Paper: "POISE: Policy Optimization with Internal State Value Estimation", 2026, https://arxiv.org/abs/2605.07579; the
authors' code: https://github.com/holi-lab/POISE @ 511641e (a verl fork): `src/poise/core.py`
(`compute_group_targets_and_cross_baselines`, `regression_diagnostic_values`), `src/poise/estimator.py`
(`fit_estimator`: sklearn PCA → StandardScaler → Ridge, predictions clipped), `src/poise/domain_estimator_bank.py` (the
FIFO buffer of prompt groups, the warm-up and refit rule), `src/poise/trainer.py` (the bootstrap), and
`vendor/verl/workers/actor/dp_actor.py` (last-n pooling of one decoder layer's output). The code is the spec: the
paper's body could not be read. This module is pure torch (no sklearn); docs/methods/poise.md lists where it departs.

For a group I of G rollouts of one prompt (G = 2 in the paper), rollout i with reward r_i and features z_i:

    z_i      = [ PCA_p(pool_n(h_prompt)) ; PCA_r(pool_n(h_response up to the last </think>)) ; s_i ]
               h: the output of decoder layer L; pool_n: the mean of the last n valid positions; s_i: scalar features
               (mean token entropy of the output, of the reasoning span, of the answer span)
    v_i      = clip( w · (z_i − μ_z) / σ_z + b, lo, hi )           the probe (ridge on standardised features)
    b_i      = (Σ_{j∈I} v_j − v_i) / (G − 1)                        the siblings' mean prediction: v_i never enters
                                                                   its own baseline, so b_i does not depend on
                                                                   rollout i's action and the estimator stays unbiased
    A_i      = r_i − b_i                                            no std normalisation
    target_i = (Σ_{j∈I} r_j − r_i) / (G − 1)                        the probe learns a sibling's reward from z_i
                                                                   ("other_rollout_correctness"; or "pair_average":
                                                                   the group's mean reward)

Bootstrap (scratch start, the first `bootstrap_steps` generation batches): A_i = r_i − target_i, the authors'
`_compute_bootstrap_rloo_advantages` (RLOO under "other_rollout_correctness"; r_i − mean_I(r) under "pair_average"),
while the rows (z_i, target_i) fill the buffer; after the last bootstrap batch the probe is fitted on the buffer.
Afterwards every batch's rows are appended (the oldest prompt groups dropped past `buffer_rows`) and the probe is
refitted from scratch on the whole buffer once `warmup_steps` batches have been observed (the bootstrap counts).

The fit (sklearn's, re-typed in float64): PCA by exact SVD (the authors use sklearn's randomized solver, seed 42: an
approximation of the same subspace; the probes' predictions differ by 0.013-0.157, within the spread of the authors'
own solver over seeds, see docs/methods/poise.md), with sklearn's sign rule (each component's largest entry positive);
StandardScaler with the population std, a constant column's scale set to 1 (sklearn's `_is_constant_feature` bound);
Ridge with an intercept: w = (Z̃ᵀZ̃ + αI)⁻¹ Z̃ᵀ(y − ȳ) on column-centred Z̃, b = ȳ − mean(Z_s)·w.
"""

from collections.abc import Sequence
from typing import NamedTuple

import torch


# The authors' Qwen3-4B profile (src/poise/config/*_qwen3_4b.json, scripts/train/_poise.sh): layer 19 of 36, last-10
# pooling, PCA 32 / 64, ridge α = 100, clip [0, 1], buffer 4096 rows (math), warm-up 8 batches, 16 bootstrap
# batches, G = 2. (OLMo-3-7B: layer 7, n = 32, PCA 16 / 128, α = 1000.)
POISE_PAPER_SETTINGS = {
    "layer_fraction": 19 / 36,
    "pool_n": 10,
    "prompt_pca": 32,
    "response_pca": 64,
    "alpha": 100.0,
    "clip_min": 0.0,
    "clip_max": 1.0,
    "buffer_rows": 4096,
    "warmup_steps": 8,
    "bootstrap_steps": 16,
    "target_mode": "other_rollout_correctness",
    "num_generations": 2,
}
POISE_TARGET_MODES = ("other_rollout_correctness", "pair_average")
# The authors' three scalar features (feature_builder_config_*.json: output / reasoning / answer mean token entropy)
POISE_SCALAR_FEATURES = ("output", "reasoning", "answer")
_F64_EPS = torch.finfo(torch.float64).eps


# ---------------------------------------------------------------- features
def pool_last_n(hidden: torch.Tensor, valid: torch.Tensor, n: int) -> torch.Tensor:
    """The mean of the last `n` valid positions of each row (all of them if fewer; zeros if none), float32.

    `hidden` (B, T, D), `valid` (B, T). The authors' `_pool_last_n_tokens`, vectorised: a position is kept when it is
    valid and at most n − 1 valid positions follow it."""
    if n < 1:
        raise ValueError(f"pool_last_n needs n >= 1, got {n}.")
    valid = valid.bool()
    from_end = valid.flip(-1).long().cumsum(-1).flip(-1)  # valid positions at or after t
    weight = (valid & (from_end <= n)).unsqueeze(-1).to(torch.float32)
    return (hidden.float() * weight).sum(1) / weight.sum(1).clamp(min=1.0)


def _find(seq: list[int], sub: Sequence[int], start: int = 0, last: bool = False) -> int | None:
    # index of the first (or last) occurrence of `sub` in `seq` at or after `start`
    k = len(sub)
    positions = range(len(seq) - k, start - 1, -1) if last else range(start, len(seq) - k + 1)
    for i in positions:
        if seq[i : i + k] == list(sub):
            return i
    return None


def _row_mask(valid_row: torch.Tensor, keep: list[int]) -> torch.Tensor:
    # a (T,) mask with True at the positions of the valid tokens numbered `keep`
    out = torch.zeros_like(valid_row)
    out[valid_row.nonzero().squeeze(-1)[keep]] = True
    return out


def truncate_after_last(ids: torch.Tensor, valid: torch.Tensor, sub: Sequence[int]) -> torch.Tensor:
    """`valid` (B, T) restricted to the valid tokens up to and including the last occurrence of the token sequence
    `sub` (e.g. `</think>`) among each row's valid tokens; rows without it (or an empty `sub`) are unchanged. The
    authors' response span before pooling (`_find_last_subsequence`)."""
    valid = valid.bool()
    if not sub:
        return valid
    out = valid.clone()
    for b in range(ids.shape[0]):
        seq = ids[b][valid[b]].tolist()
        at = _find(seq, sub, last=True)
        if at is not None:
            out[b] = _row_mask(valid[b], list(range(at + len(sub))))
    return out


def span_masks(
    ids: torch.Tensor,
    valid: torch.Tensor,
    think: tuple[Sequence[int], Sequence[int]] | None,
    answer: tuple[Sequence[int], Sequence[int]] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reasoning and the answer spans of each completion, as (B, T) masks over its valid tokens.

    reasoning: the tokens strictly between the first `think[0]` and the first `think[1]` after it (empty if either is
    missing); answer: strictly between the first `answer[0]` and the first `answer[1]` after it, else everything after
    the first `think[1]`, else empty. The authors find these spans with regexes on the decoded text
    (`<think>\\s*(.*?)\\s*</think>`, `<answer>…</answer>`) mapped back through the tokenizer's offsets; here they are
    found on the token ids, so whitespace tokens next to the tags count (a documented departure)."""
    valid = valid.bool()
    reasoning, answer_mask = torch.zeros_like(valid), torch.zeros_like(valid)
    for b in range(ids.shape[0]):
        seq = ids[b][valid[b]].tolist()
        think_end = None
        if think is not None:
            start = _find(seq, think[0])
            if start is not None:
                think_end = _find(seq, think[1], start + len(think[0]))
                if think_end is not None:
                    reasoning[b] = _row_mask(valid[b], list(range(start + len(think[0]), think_end)))
            if think_end is None:  # the answer fallback reads the first </think>, paired with <think> or not
                think_end = _find(seq, think[1])
        span = None
        if answer is not None:
            open_at = _find(seq, answer[0])
            close_at = None if open_at is None else _find(seq, answer[1], open_at + len(answer[0]))
            if close_at is not None:
                span = range(open_at + len(answer[0]), close_at)
        if span is None and think is not None and think_end is not None:
            span = range(think_end + len(think[1]), len(seq))
        if span is not None:
            answer_mask[b] = _row_mask(valid[b], list(span))
    return reasoning, answer_mask


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-row mean of `values` (B, T) over `mask`, float32; 0 for an empty row (the authors' empty-span value)."""
    m = mask.float()
    return (values.float() * m).sum(-1) / m.sum(-1).clamp(min=1.0)


# ---------------------------------------------------------------- advantages
def _groups(x: torch.Tensor, num_generations: int) -> torch.Tensor:
    if num_generations < 2:
        raise ValueError(f"POISE needs at least 2 rollouts per prompt (num_generations), got {num_generations}.")
    if x.dim() != 1 or x.numel() % num_generations:
        raise ValueError(
            f"POISE expects one value per rollout, grouped contiguously by prompt ({num_generations} each), got shape "
            f"{tuple(x.shape)}."
        )
    return x.float().view(-1, num_generations)


def _leave_one_out_mean(x: torch.Tensor) -> torch.Tensor:
    # (Σ_{j∈I} x_j − x_i) / (G − 1) for every row of the (groups, G) tensor
    return (x.sum(-1, keepdim=True) - x) / (x.shape[-1] - 1)


class PoiseAdvantages(NamedTuple):
    """Per rollout, float32 (B,): `advantages` r − b; `baselines` b; `targets` the probe's regression targets."""

    advantages: torch.Tensor
    baselines: torch.Tensor
    targets: torch.Tensor


def poise_targets(rewards: torch.Tensor, num_generations: int, target_mode: str) -> torch.Tensor:
    """The probe's target per rollout: the mean reward of its siblings ("other_rollout_correctness") or of its group
    ("pair_average")."""
    r = _groups(rewards, num_generations)
    if target_mode == "other_rollout_correctness":
        return _leave_one_out_mean(r).reshape(-1)
    if target_mode == "pair_average":
        return r.mean(-1, keepdim=True).expand_as(r).reshape(-1)
    raise ValueError(f"target_mode={target_mode!r} is not supported. Use one of {list(POISE_TARGET_MODES)}.")


def poise_advantages(
    rewards: torch.Tensor, predictions: torch.Tensor, num_generations: int, target_mode: str
) -> PoiseAdvantages:
    """POISE's cross-rollout advantages A_i = r_i − (Σ_{j∈I} v_j − v_i)/(G − 1), and the probe targets."""
    v = _groups(predictions, num_generations)
    baselines = _leave_one_out_mean(v).reshape(-1)
    targets = poise_targets(rewards, num_generations, target_mode)
    return PoiseAdvantages(rewards.float() - baselines, baselines, targets)


def poise_bootstrap_advantages(rewards: torch.Tensor, num_generations: int, target_mode: str) -> PoiseAdvantages:
    """The bootstrap's advantages A_i = r_i − target_i, the probe's own target as the baseline (the authors'
    `_compute_bootstrap_rloo_advantages`: their targets with zero predictions, subtracted from the rewards).

    "other_rollout_correctness": target_i = (Σ_{j∈I} r_j − r_i)/(G − 1), so A_i is RLOO's (G = 2: r_i − r_j).
    "pair_average": target_i = the group's mean reward, so A_i = r_i − mean_I(r) (G = 2: (r_i − r_j)/2, half RLOO's).
    """
    targets = poise_targets(rewards, num_generations, target_mode)
    return PoiseAdvantages(rewards.float() - targets, targets, targets)


# ---------------------------------------------------------------- the probe
def pca_fit(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """PCA of the rows of `x` (N, D) in float64: (mean (D,), components (min(k, N, D), D)), by exact SVD of the centred
    rows. Signs as sklearn's `svd_flip(u_based_decision=False)`: each component's entry of largest magnitude is
    positive, so the fit is deterministic. Components past the numerical rank are zero (see below)."""
    x = x.double()
    mean = x.mean(0)
    k = min(k, x.shape[0], x.shape[1])
    _, singular, vh = torch.linalg.svd(x - mean, full_matrices=False)
    components = vh[:k]
    # Past the numerical rank (fewer rows than components, e.g. early in a run) a component is an arbitrary direction
    # of the null space, along which every training row projects to 0 exactly: sklearn's scaler would then call the
    # column constant and the ridge give it weight 0, but in floating point it sees noise of 1e-16 and magnifies it.
    # Zeroing those components gives exactly the exact-arithmetic result, and a deterministic one.
    tol = max(x.shape) * _F64_EPS * singular[0] if singular.numel() else 0.0
    components = components * (singular[:k] > tol).unsqueeze(-1).to(components.dtype)
    largest = components.gather(1, components.abs().argmax(dim=1, keepdim=True))
    signs = torch.where(largest < 0, -1.0, 1.0).to(components.dtype)
    return mean, components * signs


def pca_transform(x: torch.Tensor, mean: torch.Tensor, components: torch.Tensor) -> torch.Tensor:
    """(x − mean) · componentsᵀ in float64 (sklearn's transform without whitening)."""
    return (x.double() - mean) @ components.T


_PROBE_KEYS = ("prompt_mean", "prompt_components", "response_mean", "response_components")
_PROBE_KEYS += ("scale_mean", "scale_std", "coef", "intercept")


class RidgeProbe:
    """The authors' estimator: PCA of the prompt and response features (a dimension of 0: the raw features), the scalar
    features appended, standardised, ridge regression with an intercept, predictions clipped to [clip_min, clip_max].
    Fitted in float64 on the CPU, so every process fitting the same rows gets the same probe, bit for bit."""

    def __init__(self, prompt_pca: int, response_pca: int, alpha: float, clip_min: float, clip_max: float):
        self.prompt_pca, self.response_pca, self.alpha = prompt_pca, response_pca, alpha
        self.clip_min, self.clip_max = clip_min, clip_max
        self.fitted: dict[str, torch.Tensor] | None = None

    def _features(self, prompt, response, scalars, fitted) -> torch.Tensor:
        parts = []
        for x, side in ((prompt, "prompt"), (response, "response")):
            components = fitted[f"{side}_components"]
            parts.append(
                x.double() if components.numel() == 0 else pca_transform(x, fitted[f"{side}_mean"], components)
            )
        return torch.cat([*parts, scalars.double().reshape(prompt.shape[0], -1)], dim=-1)

    def fit(self, prompt: torch.Tensor, response: torch.Tensor, scalars: torch.Tensor, targets: torch.Tensor):
        if prompt.shape[0] == 0:
            raise ValueError("The POISE probe cannot be fitted without rows.")
        prompt, response, scalars = prompt.cpu(), response.cpu(), scalars.cpu()
        fitted = {}
        for x, side, k in ((prompt, "prompt", self.prompt_pca), (response, "response", self.response_pca)):
            if k > 0:
                fitted[f"{side}_mean"], fitted[f"{side}_components"] = pca_fit(x, k)
            else:  # the authors' "no projection"
                fitted[f"{side}_mean"] = fitted[f"{side}_components"] = torch.zeros(0, dtype=torch.float64)
        z = self._features(prompt, response, scalars, fitted)
        n = z.shape[0]
        mean, var = z.mean(0), z.var(0, unbiased=False)
        # sklearn's StandardScaler: a column whose variance is within rounding of zero gets scale 1
        constant = var <= n * _F64_EPS * var + (n * mean * _F64_EPS) ** 2
        std = torch.where(constant, torch.ones_like(var), var.sqrt())
        zs = (z - mean) / std
        y = targets.cpu().double()
        z_offset, y_offset = zs.mean(0), y.mean()
        zc = zs - z_offset
        gram = zc.T @ zc + self.alpha * torch.eye(zc.shape[1], dtype=torch.float64)
        coef = torch.linalg.solve(gram, zc.T @ (y - y_offset))
        fitted.update(scale_mean=mean, scale_std=std, coef=coef, intercept=y_offset - z_offset @ coef)
        self.fitted = fitted
        return self

    def predict_unclipped(self, prompt: torch.Tensor, response: torch.Tensor, scalars: torch.Tensor) -> torch.Tensor:
        """w · standardise(z) + b, float64 on the CPU."""
        if self.fitted is None:
            raise RuntimeError("The POISE probe has not been fitted yet.")
        f = self.fitted
        z = self._features(prompt.cpu(), response.cpu(), scalars.cpu(), f)
        return ((z - f["scale_mean"]) / f["scale_std"]) @ f["coef"] + f["intercept"]

    def predict(self, prompt: torch.Tensor, response: torch.Tensor, scalars: torch.Tensor) -> torch.Tensor:
        """v = clip(w · standardise(z) + b, clip_min, clip_max), float32 on the CPU."""
        return self.predict_unclipped(prompt, response, scalars).clamp(self.clip_min, self.clip_max).float()

    def state_dict(self) -> dict | None:
        return None if self.fitted is None else {k: self.fitted[k].clone() for k in _PROBE_KEYS}

    def load_state_dict(self, state: dict | None) -> None:
        self.fitted = None if state is None else {k: state[k].to(torch.float64) for k in _PROBE_KEYS}


# ---------------------------------------------------------------- the online state: buffer, bootstrap, refits
_BUFFER_KEYS = ("prompt", "response", "scalars", "targets")


class PoiseValueBaseline:
    """POISE's online state: the FIFO buffer of (features, target) rows, the probe, and the step counters.

    Per generation batch: `advantages(...)` (r − target while bootstrapping, the probe's cross baselines after), then
    `update(...)` with the batch's rows. Rows are appended a prompt group at a time; past `buffer_rows` the oldest groups
    go first (`RecentDomainBuffer` / `_trim_buffer_rows`). The probe is fitted after the `bootstrap_steps`-th batch,
    then refitted from scratch after each batch once `warmup_steps` batches have been observed. One probe: the authors'
    per-domain routing (math / code / other by `data_source`) is not implemented."""

    def __init__(
        self,
        num_generations: int,
        prompt_pca: int = POISE_PAPER_SETTINGS["prompt_pca"],
        response_pca: int = POISE_PAPER_SETTINGS["response_pca"],
        alpha: float = POISE_PAPER_SETTINGS["alpha"],
        clip_min: float = POISE_PAPER_SETTINGS["clip_min"],
        clip_max: float = POISE_PAPER_SETTINGS["clip_max"],
        buffer_rows: int = POISE_PAPER_SETTINGS["buffer_rows"],
        warmup_steps: int = POISE_PAPER_SETTINGS["warmup_steps"],
        bootstrap_steps: int = POISE_PAPER_SETTINGS["bootstrap_steps"],
        target_mode: str = POISE_PAPER_SETTINGS["target_mode"],
    ):
        if buffer_rows < num_generations:
            raise ValueError(f"buffer_rows ({buffer_rows}) must hold at least one group ({num_generations} rows).")
        if bootstrap_steps < 1 or warmup_steps < 1:
            raise ValueError("POISE starts from scratch: bootstrap_steps and warmup_steps must be at least 1.")
        if target_mode not in POISE_TARGET_MODES:
            raise ValueError(f"target_mode={target_mode!r} is not supported. Use one of {list(POISE_TARGET_MODES)}.")
        self.num_generations, self.buffer_rows, self.target_mode = num_generations, buffer_rows, target_mode
        self.warmup_steps, self.bootstrap_steps = warmup_steps, bootstrap_steps
        self.probe = RidgeProbe(prompt_pca, response_pca, alpha, clip_min, clip_max)
        self.buffer: dict[str, torch.Tensor] | None = None
        self.steps = 0  # generation batches seen
        self.observed_steps = 0  # the authors' counter: set to the bootstrap length at the first fit
        self.retrain_count = 0

    @property
    def bootstrapping(self) -> bool:
        return self.probe.fitted is None

    def advantages(self, rewards, prompt, response, scalars) -> tuple[PoiseAdvantages, torch.Tensor | None]:
        """This batch's advantages and targets, and the probe's predictions v (None while bootstrapping)."""
        if self.bootstrapping:
            return poise_bootstrap_advantages(rewards, self.num_generations, self.target_mode), None
        predictions = self.probe.predict(prompt, response, scalars).to(rewards.device)
        return poise_advantages(rewards, predictions, self.num_generations, self.target_mode), predictions

    def update(self, prompt, response, scalars, targets) -> bool:
        """Append the batch's rows (float32, CPU), trim, and fit or refit the probe when due. Returns whether it was
        (re)fitted."""
        rows = {"prompt": prompt, "response": response, "scalars": scalars, "targets": targets}
        rows = {k: v.detach().float().cpu() for k, v in rows.items()}
        if self.buffer is None:
            self.buffer = rows
        else:
            self.buffer = {k: torch.cat([self.buffer[k], rows[k]]) for k in _BUFFER_KEYS}
        overflow = self.buffer["targets"].shape[0] - self.buffer_rows
        if overflow > 0:  # drop whole prompt groups, oldest first, until the limit holds
            drop = -(-overflow // self.num_generations) * self.num_generations
            self.buffer = {k: v[drop:] for k, v in self.buffer.items()}
        self.steps += 1
        if self.bootstrapping:
            if self.steps < self.bootstrap_steps:
                return False
            self.observed_steps = self.steps
        else:
            self.observed_steps += 1
            if self.observed_steps < self.warmup_steps:
                return False
        b = self.buffer
        self.probe.fit(b["prompt"], b["response"], b["scalars"], b["targets"])
        self.retrain_count += 1
        return True

    def state_dict(self) -> dict:
        return {
            "steps": self.steps,
            "observed_steps": self.observed_steps,
            "retrain_count": self.retrain_count,
            "buffer": None if self.buffer is None else {k: v.clone() for k, v in self.buffer.items()},
            "probe": self.probe.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        buffer = state["buffer"]
        if buffer is not None and buffer["targets"].shape[0] > self.buffer_rows:
            raise ValueError(
                f"The saved POISE buffer holds {buffer['targets'].shape[0]} rows, more than buffer_rows="
                f"{self.buffer_rows}: resume with the buffer size of the run that saved it."
            )
        self.steps, self.observed_steps = int(state["steps"]), int(state["observed_steps"])
        self.retrain_count = int(state["retrain_count"])
        self.buffer = None if buffer is None else {k: buffer[k].float() for k in _BUFFER_KEYS}
        self.probe.load_state_dict(state["probe"])


# ---------------------------------------------------------------- diagnostics
def poise_diagnostics(
    rewards: torch.Tensor, predictions: torch.Tensor, targets: torch.Tensor, num_generations: int, clip_min, clip_max
) -> dict[str, float]:
    """The authors' online regression diagnostics of the predictions v_i against the targets (`regression_diagnostic_
    values`: population std, Pearson 0 when either std is at most 1e-8, Brier skill 1 − MSE / Var(target), 0 when the
    variance is at most 1e-12) and `pairwise_sign_acc` (`cross_rollout_pairwise_sign_matches`, other_rollout_correctness:
    for each pair i < j of a group, sign(v_j − v_i) == sign(r_i − r_j), since v_i predicts the sibling's reward)."""
    v, y = predictions.double().reshape(-1), targets.double().reshape(-1)
    err = v - y
    mse = (err**2).mean()
    target_var = ((y - y.mean()) ** 2).mean()
    v_std, y_std = v.std(unbiased=False), y.std(unbiased=False)
    pearson = 0.0
    if v.numel() > 1 and v_std > 1e-8 and y_std > 1e-8:
        pearson = float(((v - v.mean()) * (y - y.mean())).mean() / (v_std * y_std))
    g = _groups(predictions, num_generations).double()
    r = _groups(rewards, num_generations).double()
    i, j = torch.triu_indices(num_generations, num_generations, offset=1)
    matches = torch.sign(g[:, j] - g[:, i]) == torch.sign(r[:, i] - r[:, j])
    return {
        "pred_mean": float(v.mean()),
        "target_mean": float(y.mean()),
        "mae": float(err.abs().mean()),
        "rmse": float(mse.sqrt()),
        "bias": float(err.mean()),
        "pearson": pearson,
        "brier_skill": float(1.0 - mse / target_var) if target_var > 1e-12 else 0.0,
        "pairwise_sign_acc": float(matches.double().mean()),
        "clip_frac_lo": float((v <= clip_min).double().mean()),
        "clip_frac_hi": float((v >= clip_max).double().mean()),
    }
