"""Per-step cost of RSI-S token selection (`rsi_selection`) against stock TRL GRPO, side by side in one process.

    python bench/rsi_overhead.py [--rounds 5] [--steps 10] [--repeats 30] [--hidden 64] [--layers 4]
    python bench/rsi_overhead.py --quick     # make bench-quick's run (bench/quick.py): 1 round of 4 steps, 5 loss-path repeats
    python bench/rsi_overhead.py --shape qwen2-0.5b --rounds 0 --repeats 5 --batch 8    # Qwen2.5-0.5B's shape, CPU
    python bench/rsi_overhead.py --device cuda --dtype bf16 --shape qwen2-0.5b --completion-length 128   # a GPU

The measurements of bench/grpo_overhead.py (whose code this runs), with the arms stock `trl.GRPOTrainer`,
`RLVRGRPOTrainer` with ``rsi_selection="interval"`` (``rsi_low=0.25``, ``rsi_high=3.0``: the toy recipe's) and with
``rsi_selection="quantile"`` (0.1 / 0.9): the loss path (forward + backward) interleaved on one fixed batch, and whole
steps alternated arm by arm. RSI-S's work is all in the loss path: the RSI of the tokens (from the log-probabilities
and entropies TRL's loss forward already computes), one gather of every process's RSI values, the mask, one
all-reduce of its counts and the `rsi/*` metrics; it runs no extra forward pass. The figure compared with the target
(<= 1.03) is the implied step ratio, 1 + (loss-path extra seconds) / (stock step seconds).
"""

try:  # run as a script (bench/ on sys.path) or imported as bench.rsi_overhead
    import grpo_overhead
except ImportError:
    from bench import grpo_overhead


ARMS = ("stock", "rsi", "rsi_quantile")


if __name__ == "__main__":
    grpo_overhead.main(arms=ARMS, name="RSI-S", doc=__doc__)["cleanup"]()
