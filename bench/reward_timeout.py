"""Cost of bounded reward time on ordinary completions, against today's direct call, in one process.

Arms, interleaved call by call (rounds x arms) on the same batch of ordinary GSM8K/MATH-style completions, and
reported as the ratio of median call times against the direct call:

- ``math_accuracy``, direct: math-verify in this process on the main thread with its signal timeouts (the behaviour
  before bounded rewards; ``reward_timeout=None``);
- ``math_accuracy``, bounded (default): each completion verified in the persistent worker pool (2 workers) with a
  per-completion deadline;
- ``math_accuracy``, bounded with 1 worker: the pool's own cost (pickling, pipe transfers, the worker's
  scheduling), without the parallel speed-up; each worker's next completion waits in its pipe while it runs one,
  so no round trip separates two completions;
- the guard around a cheap reward (``toy_accuracy``): what `GuardedReward` adds to every reward call.

It also prints the pool's cost per completion on a task that does nothing (``abs``; the parent's dispatch work, as
the round trips overlap), and the latency of one pathological completion (a power tower) at ``reward_timeout=1``: the
timeout plus the worker's replacement. Defaults take about 20 s on 2 idle CPU cores; ``--quick`` is
`make bench-quick`'s run (bench/quick.py).
"""

import argparse
import random
import statistics
import time


try:  # run as a script (bench/ on sys.path) or imported as bench.reward_timeout
    from quick import quick_defaults, report
except ImportError:
    from bench.quick import quick_defaults, report


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="Interleaved rounds (each calls every arm once).")
    parser.add_argument("--batch", type=int, default=64, help="Completions per reward call (TRL: per process).")
    parser.add_argument("--seed", type=int, default=0)
    quick_defaults(parser, None, rounds=7, batch=32)
    return parser.parse_args()


def ordinary_batch(size: int, seed: int) -> tuple[list[str], list[str]]:
    """Chain-of-thought-like completions ending in a boxed answer: integers, fractions, expressions; ~half right."""
    rng = random.Random(seed)
    completions, answers = [], []
    for _ in range(size):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        kind = rng.choice(["int", "frac", "expr"])
        if kind == "int":
            gold, right, wrong = str(a * b), f"{a * b}", f"{a * b + 1}"
        elif kind == "frac":
            gold, right, wrong = f"\\frac{{{a}}}{{{b}}}", f"\\frac{{{2 * a}}}{{{2 * b}}}", f"\\frac{{{b}}}{{{a}}}"
        else:
            gold, right, wrong = f"{a}\\sqrt{{2}}", f"\\sqrt{{{2 * a * a}}}", f"{a}\\sqrt{{3}}"
        steps = " ".join(f"Step {i}: we compute {rng.randint(1, 999)} + {rng.randint(1, 999)}." for i in range(6))
        completions.append(f"{steps} Therefore the answer is $\\boxed{{{right if rng.random() < 0.5 else wrong}}}$.")
        answers.append(gold)
    return completions, answers


def main():
    args = parse_args()
    from trl_rlvr_ext.rewards import math as math_reward
    from trl_rlvr_ext.rewards.guard import guard_reward_func
    from trl_rlvr_ext.rewards.timeout import TimeoutPool
    from trl_rlvr_ext.rewards.toy import toy_accuracy_reward

    toy_completions = [f"[{a}]" if i % 2 else f"[{a}1]" for i, a in enumerate(range(args.batch))]
    toy_answers = [str(a) for a in range(args.batch)]
    guarded_toy = guard_reward_func(toy_accuracy_reward)
    one_worker = TimeoutPool(
        workers=1, preload=(math_reward._quiet_math_verify,), warmup=math_reward._math_pool()._warmup
    )

    def bounded_one_worker(completions, answers):
        rows = list(zip(completions, answers))
        return one_worker.map(math_reward.score_math_answer, rows, math_reward.DEFAULT_REWARD_TIMEOUT)

    arms = {
        "math direct (today)": lambda c, a: math_reward.math_accuracy_reward(c, answer=a, reward_timeout=None),
        "math bounded, 2 workers (default)": lambda c, a: math_reward.math_accuracy_reward(c, answer=a),
        "math bounded, 1 worker": bounded_one_worker,
        "toy direct": lambda c, a: toy_accuracy_reward(completions=toy_completions, answer=toy_answers),
        "toy guarded": lambda c, a: guarded_toy(
            prompts=[""] * args.batch, completions=toy_completions, answer=toy_answers
        ),
    }
    # Warm-up (worker start, imports) on a batch of its own; each round then scores a fresh batch (training never
    # repeats completions, so no arm profits from caches warmed by the previous round), the same for every arm.
    for arm in arms.values():
        arm(*ordinary_batch(args.batch, args.seed - 1))
    times = {name: [] for name in arms}
    for round_index in range(args.rounds):
        completions, answers = ordinary_batch(args.batch, args.seed + round_index)
        scores = {}
        for name, arm in arms.items():
            start = time.perf_counter()
            scores[name] = arm(completions, answers)
            times[name].append(time.perf_counter() - start)
        assert (
            scores["math bounded, 2 workers (default)"]
            == scores["math bounded, 1 worker"]
            == scores["math direct (today)"]
        ), "the bounded reward scored an ordinary completion differently"
    one_worker.close()

    medians = {name: statistics.median(values) for name, values in times.items()}
    pool = TimeoutPool(workers=1)
    pool.map(abs, [(0,)], 10.0)
    round_trips = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        pool.map(abs, [(i,) for i in range(args.batch)], 10.0)
        round_trips.append(time.perf_counter() - start)
    pool.close()
    print(
        f"pool cost alone (abs, pipelined): {statistics.median(round_trips) / args.batch * 1e6:.0f} us per completion"
    )
    print(f"batch of {args.batch} completions, {args.rounds} interleaved rounds, median seconds per call")
    for name, median in medians.items():
        base = medians["math direct (today)" if name.startswith("math") else "toy direct"]
        print(f"  {name:36s} {median * 1e3:9.2f} ms   ratio {median / base:6.3f}")
    if args.quick:  # bench/targets.py: the default bounded reward against the direct call
        report("reward_timeout", medians["math bounded, 2 workers (default)"] / medians["math direct (today)"])

    start = time.perf_counter()
    score = math_reward.math_accuracy_reward(["\\boxed{9^{9^{9^{9^{9}}}}}"], answer=["3"], reward_timeout=1.0)
    print(f"power tower at reward_timeout=1: scored {score} in {time.perf_counter() - start:.2f} s (call returns)")
    start = time.perf_counter()
    math_reward.math_accuracy_reward(*ordinary_batch(args.batch, args.seed))
    print(f"next ordinary call (while the killed worker is replaced): {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
