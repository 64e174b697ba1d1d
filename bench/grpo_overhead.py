"""Per-step cost of NSR clip recovery against stock TRL GRPO, side by side in one process.

    python bench/grpo_overhead.py [--rounds 5] [--steps 10] [--repeats 30] [--hidden 64] [--layers 4]
    python bench/grpo_overhead.py --quick     # make bench-quick's run (bench/quick.py): 1 round of 4 steps, 5 loss-path repeats
    python bench/grpo_overhead.py --device cuda --dtype bf16 --shape qwen2-0.5b --completion-length 128   # a GPU

Two measurements, both stock `trl.GRPOTrainer` vs `RLVRGRPOTrainer` (``clip_recovery="nsr"`` and ``"nsr_expected"``)
on the same model, data and seed, with ``num_iterations=2`` so the importance ratio is not identically 1 and the clip
(hence the rescue) is active:

1. *Loss path, interleaved*: on one fixed generated batch, the loss computation (forward + backward, where NSR lives)
   of each arm is timed in turn, ``--repeats`` times; the ratio is the median of the per-repeat ratios. Interleaving
   on the same inputs cancels machine-load drift, which dominates on a shared CPU.
2. *Whole steps*: full training runs alternated arm by arm for ``--rounds`` rounds; per-round median step times and
   the median of the per-round ratios (noisier: generation dominates a step and varies with load).

The implied step ratio, 1 + (loss-path extra time) / (stock step time), is the figure compared with the target
(<= 1.03). On CUDA every timer synchronizes the device first (kernels run asynchronously). ``--dtype bf16`` loads the
model in bfloat16 and trains with ``bf16=True`` (as the bf16 recipes do); the default (``auto``) keeps TRL's defaults.
"""

import argparse
import gc
import os
import statistics
import tempfile
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
from datasets import Dataset
from transformers import PrinterCallback, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.grpo.method import HOOKS, active_methods
from trl_rlvr_ext.toy import save_tiny_model


try:  # run as a script (bench/ on sys.path) or imported as bench.grpo_overhead
    import quick
    from model_shapes import SHAPES, save_shaped_model
except ImportError:
    from bench import quick
    from bench.model_shapes import SHAPES, save_shaped_model


ARMS = ("stock", "nsr", "nsr_expected")
# The RLVRGRPOConfig options of each arm ("stock" is trl.GRPOTrainer itself); bench/acpo_overhead.py adds its arms.
ARM_OPTIONS = {
    "nsr": {"clip_recovery": "nsr"},
    "nsr_expected": {"clip_recovery": "nsr_expected"},
    "acpo": {"adaptive_clip": "acpo"},
    "acpo_nsr": {"adaptive_clip": "acpo", "clip_recovery": "nsr"},
    "diag": {"off_policy_diagnostics": True},
    "acpo_diag": {"adaptive_clip": "acpo", "off_policy_diagnostics": True},
    "delta": {"token_credit": "delta"},  # bench/delta_overhead.py
    # bench/rsi_overhead.py: the toy recipe's interval (ours), and quantile bounds gathered over processes
    "rsi": {"rsi_selection": "interval", "rsi_low": 0.25, "rsi_high": 3.0},
    "rsi_quantile": {"rsi_selection": "quantile", "rsi_quantile_low": 0.1, "rsi_quantile_high": 0.9},
    "popo": {"objective": "popo"},  # bench/popo_overhead.py: the authors' defaults
    # bench/poise_overhead.py: the probe fitted after the first batch, refitted after every batch (the steady state)
    "poise": {"value_baseline": "poise", "scale_rewards": "none", "poise_bootstrap_steps": 1, "poise_warmup_steps": 1},
}
_OFF = {
    "clip_recovery": "none",
    "adaptive_clip": "none",
    "off_policy_diagnostics": False,
    **dict.fromkeys(("rsi_low", "rsi_high", "rsi_quantile_low", "rsi_quantile_high")),
    "rsi_selection": "none",
}


def reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def synchronize():
    """Wait for queued CUDA kernels, so that a wall-clock timer measures them (a no-op without CUDA)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class StepTimer(TrainerCallback):
    def __init__(self):
        self.times, self._start = [], None

    def on_step_begin(self, args, state, control, **kwargs):
        synchronize()
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        synchronize()
        self.times.append(time.perf_counter() - self._start)


def make_trainer(
    arm: str,
    model_path: str,
    steps: int,
    out_dir: str,
    callbacks=None,
    device: str = "cpu",
    bf16: bool | None = None,
    batch: int = 32,
    num_generations: int = 8,
    completion_length: int = 16,
    model_dtype: str | None = None,
):
    """``bf16=None`` keeps TRL's default (``bf16=True`` unless fp16); ``model_dtype`` (e.g. ``"bfloat16"``) is the
    dtype the model loads in (None: TRL's default, float32). The other defaults are the recorded CPU runs'."""
    common = {
        "output_dir": out_dir,
        "per_device_train_batch_size": batch,
        "num_generations": num_generations,
        "max_completion_length": completion_length,
        "num_iterations": 2,
        "learning_rate": 1e-3,
        "max_steps": steps,
        "logging_steps": steps,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": device == "cpu",
        "gradient_checkpointing": False,
        "seed": 0,
        "epsilon_high": 0.28,
        "disable_tqdm": True,
    }
    if bf16 is not None:
        common["bf16"] = bf16
    if model_dtype is not None:
        common["model_init_kwargs"] = {"dtype": model_dtype}
    if arm == "stock":
        trainer_cls, args = GRPOTrainer, GRPOConfig(**common)
    else:
        trainer_cls, args = RLVRGRPOTrainer, RLVRGRPOConfig(**common, **ARM_OPTIONS[arm])
    dataset = Dataset.from_dict({"prompt": [f"{i}+{3 * i}=" for i in range(256)]})
    trainer = trainer_cls(model=model_path, reward_funcs=reward, args=args, train_dataset=dataset, callbacks=callbacks)
    trainer.remove_callback(PrinterCallback)
    return trainer


def loss_path_ratios(
    model_path: str, out_dir: str, repeats: int, arms: tuple[str, ...] = ARMS, **trainer_options
) -> dict[str, float]:
    """Interleaved timing of the loss computation (forward + backward) of each arm on one fixed batch.

    ``arms``: "stock" first, then keys of `ARM_OPTIONS`. ``trainer_options`` go to `make_trainer` (device, precision,
    batch and completion sizes)."""
    # one trainer for every arm (the options and the methods are switched per call); built with NSR on, so its seed
    # is set
    trainer = make_trainer("acpo_nsr", model_path, 2, out_dir, **trainer_options)
    trainer.train()  # moves the ratio away from 1 (two updates), so the clip is active on the next batch
    model = trainer.model
    model.train()
    batch = [trainer.train_dataset[i] for i in range(trainer.args.generation_batch_size)]
    inputs = trainer._generate_and_score_completions(batch)
    with torch.no_grad():  # make `old_per_token_logps` differ from the current policy: a perturbed copy
        inputs["old_per_token_logps"] = inputs.get("old_per_token_logps", None)
        if inputs["old_per_token_logps"] is None:
            prompt_completion = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
            mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
            logps, _, _ = trainer._get_per_token_logps_and_entropies(
                model, prompt_completion, mask, inputs["completion_ids"].size(1)
            )
            inputs["old_per_token_logps"] = logps + 0.3 * torch.randn_like(logps)

    def stock_loss(inp):
        return GRPOTrainer._compute_loss(trainer, model, inp)

    def arm_hooks(arm):
        """The methods' hooks of a trainer built with the arm's options (the trainer's own were built for one arm)."""
        for name, value in {**_OFF, **ARM_OPTIONS[arm]}.items():
            setattr(trainer.args, name, value)
        methods = [cls() for cls in active_methods(trainer.args)]
        for method in methods:
            method.setup(trainer)
        return {hook: [m for m in methods if hook in type(m).acts_on()] for hook in HOOKS}

    def arm_loss(arm):
        hooks = arm_hooks(arm)

        def fn(inp):
            for name, value in {**_OFF, **ARM_OPTIONS[arm]}.items():
                setattr(trainer.args, name, value)
            trainer._hooks = hooks
            return RLVRGRPOTrainer._compute_loss(trainer, model, inp)

        return fn

    functions = {"stock": stock_loss, **{arm: arm_loss(arm) for arm in arms[1:]}}
    times = {arm: [] for arm in arms}
    for r in range(repeats + 2):
        order = arms if r % 2 == 0 else arms[::-1]
        for arm in order:
            model.zero_grad(set_to_none=True)
            synchronize()
            start = time.perf_counter()
            functions[arm](inputs).backward()
            synchronize()
            elapsed = time.perf_counter() - start
            if r >= 2:  # warm-up repeats dropped
                times[arm].append(elapsed)
    stock_median = statistics.median(times["stock"])
    ratios = {arm: statistics.median(a / s for a, s in zip(times[arm], times["stock"])) for arm in arms[1:]}
    extra = {arm: statistics.median(times[arm]) - stock_median for arm in arms[1:]}
    return {"ratios": ratios, "extra_seconds": extra, "stock_seconds": stock_median}


def alternated_rounds(arms, model_path, steps, rounds, tmp, skip=1, aggregate=statistics.median, **options):
    """Whole steps of every arm ("stock" first), alternated arm by arm for ``rounds`` rounds (the order reversed every
    other round, so that load drifts hit both alike); per round, each arm's step time (``aggregate`` of its steps after
    the first ``skip``, the warm-up) and its ratio to stock's. Returns ({arm: [ratio per round]}, [stock seconds per
    round]). ``options`` go to `make_trainer`."""
    ratios, stock_steps = {arm: [] for arm in arms[1:]}, []
    for r in range(rounds):
        times = {}
        for arm in arms if r % 2 == 0 else arms[::-1]:
            timer = StepTimer()
            trainer = make_trainer(arm, model_path, steps, os.path.join(tmp, arm), callbacks=[timer], **options)
            trainer.train()
            times[arm] = aggregate(timer.times[skip:])
            del trainer
            gc.collect()
        stock_steps.append(times["stock"])
        for arm in arms[1:]:
            ratios[arm].append(times[arm] / times["stock"])
        summary = ", ".join(f"{a} x{ratios[a][-1]:.3f}" for a in arms[1:])
        print(f"round {r + 1}/{rounds}: {summary} (stock {times['stock'] * 1e3:.1f} ms/step)")
    return ratios, stock_steps


# --quick (`make bench-quick`, bench/quick.py): one round of whole steps past the warm-up cycle, a few loss-path repeats
QUICK = {"rounds": 1, "steps": 4, "repeats": 5}


def common_parser(
    doc: str, rounds: int, steps: int, repeats: int, quick_settings: dict | None = None
) -> argparse.ArgumentParser:
    """The options every step-time benchmark here shares (bench/acpo_overhead.py, bench/delta_overhead.py too);
    ``quick_settings``: those of ``--quick`` (default `QUICK`)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--hidden", type=int, default=64, help="tiny model's hidden size (--shape tiny)")
    parser.add_argument("--layers", type=int, default=4, help="tiny model's layers (--shape tiny)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--dtype",
        choices=["auto", "float32", "bf16"],
        default="auto",
        help="auto: float32 weights, TRL's default bf16 setting; float32: bf16=False; bf16: bf16 weights, bf16=True",
    )
    parser.add_argument("--shape", choices=["tiny", *SHAPES], default="tiny", help="tiny: --hidden x --layers")
    parser.add_argument("--completion-length", type=int, default=16)
    parser.add_argument("--batch", type=int, default=32, help="completions per step (groups of 8)")
    quick.quick_defaults(parser, None, **(QUICK if quick_settings is None else quick_settings))
    return parser


def setup(parser: argparse.ArgumentParser, args, tmp: str) -> tuple[dict, str, str]:
    """Threads and device checked, the trainer options, and the model saved under ``tmp``: (options, path, shape)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here.")
    options = {
        "device": args.device,
        "bf16": {"auto": None, "float32": False, "bf16": True}[args.dtype],
        "model_dtype": "bfloat16" if args.dtype == "bf16" else None,
        "completion_length": args.completion_length,
        "batch": args.batch,
    }
    if args.shape == "tiny":
        model_path = save_tiny_model(
            os.path.join(tmp, "model"),
            hidden_size=args.hidden,
            intermediate_size=4 * args.hidden,
            num_hidden_layers=args.layers,
        )
        return options, model_path, f"tiny Qwen2, hidden {args.hidden} x {args.layers} layers"
    weights = "bf16" if args.dtype == "bf16" else "float32"
    return options, save_shaped_model(os.path.join(tmp, "model"), args.shape, weights, device=args.device), args.shape


def main(arms: tuple[str, ...] = ARMS, name: str = "NSR", doc: str = __doc__):
    parser = common_parser(doc, rounds=5, steps=10, repeats=30)
    parser.add_argument(
        "--arms",
        default=None,
        help=f"comma-separated subset of {', '.join(arms[1:])} (stock always runs); default all",
    )
    args = parser.parse_args()
    if args.arms:
        unknown = set(args.arms.split(",")) - set(arms[1:])
        if unknown:
            parser.error(f"--arms: unknown {sorted(unknown)}; choose among {', '.join(arms[1:])}.")
        arms = (arms[0], *(arm for arm in arms[1:] if arm in args.arms.split(",")))
    # kept until the caller is done with the model (bench/acpo_overhead.py times more on it)
    tmp_dir = tempfile.TemporaryDirectory()
    tmp = tmp_dir.name
    options, model_path, shape = setup(parser, args, tmp)
    loss = loss_path_ratios(model_path, os.path.join(tmp, "loss"), args.repeats, arms, **options)

    step_ratio, stock_steps = alternated_rounds(arms, model_path, args.steps, args.rounds, tmp, **options)

    # without whole-step rounds (--rounds 0, for big shapes on a CPU) the implied ratio uses the loss path's stock time
    stock_step = statistics.median(stock_steps) if stock_steps else loss["stock_seconds"]
    where = f"CPU, {torch.get_num_threads()} threads" if args.device == "cpu" else torch.cuda.get_device_name()
    print(
        f"\n{name} vs stock TRL GRPO, {where}, {shape}, dtype {args.dtype}, "
        f"{args.batch} completions x {args.completion_length} tokens per step"
    )
    print(f"{'arm':<14}{'loss-path ratio':>17}{'implied step ratio':>20}{'whole-step ratio':>18}")
    worst = 0.0
    for arm in arms[1:]:
        implied = 1.0 + loss["extra_seconds"][arm] / stock_step
        worst = max(worst, implied)
        whole = f"{statistics.median(step_ratio[arm]):>18.3f}" if step_ratio[arm] else f"{'-':>18}"
        print(f"{arm:<14}{loss['ratios'][arm]:>17.3f}{implied:>20.3f}{whole}")
    print(
        f"(loss path: median of {args.repeats} interleaved repeats on one batch, stock {loss['stock_seconds'] * 1e3:.1f} "
        f"ms; whole steps: median of {args.rounds} alternated rounds x {args.steps} steps, stock {stock_step * 1e3:.0f} ms)"
    )
    print(f"target: step ratio <= 1.03 -> {'met' if worst <= 1.03 else 'NOT met'} (worst implied {worst:.3f})")
    return {"options": options, "model_path": model_path, "stock_step": stock_step, "cleanup": tmp_dir.cleanup}


if __name__ == "__main__":
    main()["cleanup"]()
