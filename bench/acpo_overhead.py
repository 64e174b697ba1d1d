"""Per-step cost of ACPO's variance-adaptive clip against stock TRL GRPO, side by side in one process.

    python bench/acpo_overhead.py [--rounds 5] [--steps 10] [--repeats 30] [--hidden 64] [--layers 4]
    python bench/acpo_overhead.py --quick     # make bench-quick's run (bench/quick.py): 1 round of 4 steps, 5 loss-path repeats
    python bench/acpo_overhead.py --shape qwen2-0.5b --rounds 0 --repeats 5 --batch 8    # Qwen2.5-0.5B's shape, CPU
    python bench/acpo_overhead.py --device cuda --dtype bf16 --shape qwen2-0.5b --completion-length 128   # a GPU

Three measurements, the first two those of bench/grpo_overhead.py (whose code this runs), with the arms stock
`trl.GRPOTrainer`, `RLVRGRPOTrainer` with ``adaptive_clip="acpo"`` (the paper's settings), ACPO with NSR on its
bounds (``clip_recovery="nsr"``) and the off-policy diagnostics alone (``off_policy_diagnostics=True``, "diag"):

1. *Loss path, interleaved*: forward + backward of each arm on one fixed batch whose old log-probs are perturbed (so
   the ratios spread and ACPO's bounds bind); the median of the per-repeat ratios.
2. *Whole steps*, alternated arm by arm (``--rounds 0`` skips them).
3. *Our own work*, alone: on that batch's log-probs, ratios and mask, the trainer's clipped objective with ACPO
   (binning, moments, bounds, per-token clip) and its `adaptive_clip/*` metrics, with the diagnostics (their
   `off_policy/*` metrics), and with both, each against the stock surrogate
   `min(r·A, clip(r)·A)` with TRL's float widths, interleaved ``--work-repeats`` times. Its median extra time over the
   stock step time is the least load-sensitive figure on a shared CPU, where the model's forward and backward (1, 2)
   vary by more than ACPO costs.

The figure compared with the target (<= 1.03) is the step ratio implied by 3: 1 + (ACPO's extra seconds) / (stock
step seconds, from 2, or from 1 with ``--rounds 0``).
"""

import os
import statistics
import sys
import tempfile
import time

import torch


try:  # run as a script (bench/ on sys.path) or imported as bench.acpo_overhead
    import grpo_overhead
except ImportError:
    from bench import grpo_overhead

from trl_rlvr_ext.losses import ppo_clipped_objective


ARMS = ("stock", "acpo", "acpo_nsr", "diag")
# the own-work variants: our clipped objective + metrics with these options, against the stock surrogate
WORK = ("acpo", "diag", "acpo_diag")


def acpo_work(model_path: str, out_dir: str, repeats: int, **trainer_options) -> dict[str, float]:
    """Median seconds of our clipped objective + metrics (each of `WORK`), and of the stock surrogate, on one batch."""
    trainer = grpo_overhead.make_trainer("acpo_diag", model_path, 2, out_dir, **trainer_options)
    trainer.train()
    model = trainer.model
    batch = [trainer.train_dataset[i] for i in range(trainer.args.generation_batch_size)]
    inputs = trainer._generate_and_score_completions(batch)
    with torch.no_grad():
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            model, ids, attention, inputs["completion_ids"].size(1)
        )
    log_ratio = 0.3 * torch.randn_like(logps)
    ratio = torch.exp(log_ratio)
    mask, advantages = inputs["completion_mask"], inputs["advantages"].unsqueeze(1)

    def global_masked_mean(x):  # TRL's, on one process
        totals = trainer.accelerator.reduce(torch.stack([(x * mask).sum(), mask.sum().float()]), reduction="sum")
        return (totals[0] / totals[1].clamp(min=1.0)).item()

    def ours(variant):
        def fn():
            for name, value in {**grpo_overhead._OFF, **grpo_overhead.ARM_OPTIONS[variant]}.items():
                setattr(trainer.args, name, value)
            # no DelTA here: the inputs (where its weights travel) are not read. ACPO's clamp of the log-ratio runs
            # first, as in TRL's loss (the `log_ratio` hook): it keeps the clamped tokens its metrics read
            trainer.method("clip_objective").log_ratio(log_ratio)
            loss, state = trainer._clip_objective_loss(ratio, advantages, logps, mask, {})
            trainer._log_clip_objective("train", state, mask, global_masked_mean)
            return loss

        return fn

    def stock():
        return -ppo_clipped_objective(ratio, advantages, trainer.epsilon_low, trainer.epsilon_high)[0]

    functions = [("stock", stock), *((variant, ours(variant)) for variant in WORK)]
    times = {name: [] for name, _ in functions}
    for r in range(repeats + 20):
        for name, fn in functions if r % 2 == 0 else functions[::-1]:
            grpo_overhead.synchronize()
            start = time.perf_counter()
            fn()
            grpo_overhead.synchronize()
            if r >= 20:  # warm-up calls dropped
                times[name].append(time.perf_counter() - start)
    trainer._metrics["train"].clear()
    bound = trainer.method("clip_objective").acpo_bins(logps, ratio, mask).bound
    _, clipped_low, clipped_high = ppo_clipped_objective(ratio, advantages, bound, bound)
    binds = bool((clipped_low | clipped_high).any())
    return {name: statistics.median(values) for name, values in times.items()} | {"clip_binds": binds}


def main():
    work_repeats = 300
    if "--work-repeats" in sys.argv:
        index = sys.argv.index("--work-repeats")
        work_repeats = int(sys.argv[index + 1])
        del sys.argv[index : index + 2]
    result = grpo_overhead.main(arms=ARMS, name="ACPO", doc=__doc__)
    options, model_path, stock_step = result["options"], result["model_path"], result["stock_step"]
    with tempfile.TemporaryDirectory() as tmp:
        work = acpo_work(model_path, os.path.join(tmp, "work"), work_repeats, **options)
    print(
        f"\nOwn work per loss computation (clipped objective + metrics; median of {work_repeats} interleaved calls; "
        f"stock surrogate {work['stock'] * 1e3:.3f} ms; ACPO's clip binds on the batch: {work['clip_binds']}):"
    )
    for variant in WORK:
        extra = work[variant] - work["stock"]
        implied = 1.0 + extra / stock_step
        print(
            f"{variant:<10} {work[variant] * 1e3:8.3f} ms, extra {extra * 1e3:7.3f} ms -> implied step ratio 1 + "
            f"{extra * 1e3:.3f} / {stock_step * 1e3:.1f} ms = {implied:.4f} ({'met' if implied <= 1.03 else 'NOT met'}"
            " against <= 1.03)"
        )
    result["cleanup"]()


if __name__ == "__main__":
    main()
