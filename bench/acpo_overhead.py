"""Per-step cost of ACPO's variance-adaptive clip against stock TRL GRPO, side by side in one process.

    python bench/acpo_overhead.py [--rounds 5] [--steps 10] [--repeats 30] [--hidden 64] [--layers 4]
    python bench/acpo_overhead.py --shape qwen2-0.5b --rounds 0 --repeats 5 --batch 8    # Qwen2.5-0.5B's shape, CPU
    python bench/acpo_overhead.py --device cuda --dtype bf16 --shape qwen2-0.5b --completion-length 128   # a GPU

The measurements of bench/grpo_overhead.py (whose code this runs), with the arms stock `trl.GRPOTrainer`,
`RLVRGRPOTrainer` with ``adaptive_clip="acpo"`` (the paper's settings) and ACPO with NSR on its bounds
(``clip_recovery="nsr"``): the loss path (forward + backward) timed interleaved on one fixed batch whose old log-probs
are perturbed (so the ratios spread and ACPO's bounds bind), and whole training steps alternated arm by arm
(``--rounds 0`` skips them: the implied ratio then uses the loss path's stock time, a worst case since a step also
generates). The figure compared with the target (<= 1.03) is the implied step ratio, 1 + (loss-path extra time) /
(stock step time).
"""

try:  # run as a script (bench/ on sys.path) or imported as bench.acpo_overhead
    from grpo_overhead import main
except ImportError:
    from bench.grpo_overhead import main


ARMS = ("stock", "acpo", "acpo_nsr")


if __name__ == "__main__":
    main(arms=ARMS, name="ACPO", doc=__doc__)
