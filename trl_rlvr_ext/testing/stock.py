"""``assert_stock_when_off``: a method with its options off trains exactly as stock ``trl.GRPOTrainer``, to the bit."""

import fnmatch
import math
import tempfile
from pathlib import Path
from typing import NamedTuple

from .runs import digit_reward, grpo_kwargs, prompt_dataset, tiny_model


# Wall-clock values: the only logged values two identical runs may differ in
TIMING = ("runtime", "per_second", "step_time")
# Checkpoint files compared as loaded objects (their pickles may hold addresses); the rest byte for byte, but the
# trainer state (its log history holds the step times; the logs are compared on their own) and the pickled config
# (the method's config is another class, with its fields)
LOADED = ("optimizer.pt", "scheduler.pt", "rng_state.pth")
SKIPPED = ("trainer_state.json", "training_args.bin")
MAX_LISTED = 8


class Run(NamedTuple):
    """A trained trainer and its trainable parameters before and after training."""

    trainer: object
    before: dict
    after: dict


def train(trainer_cls, config_cls, model, output_dir, *, reward_funcs=digit_reward, train_dataset=None, **settings):
    """Train ``trainer_cls`` with ``config_cls(**grpo_kwargs(output_dir, **settings))`` (`trl_rlvr_ext.testing.runs`)
    on ``train_dataset`` (default: 16 prompts). ``config_cls`` may be any callable that builds the config from its
    keyword arguments (a factory)."""
    args = config_cls(**grpo_kwargs(output_dir, **settings))
    dataset = prompt_dataset() if train_dataset is None else train_dataset
    trainer = trainer_cls(model=model, reward_funcs=reward_funcs, args=args, train_dataset=dataset)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    after = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    return Run(trainer, before, after)


def step_logs(trainer) -> list[dict]:
    """The per-step logs of a trained trainer (the entries holding a loss)."""
    return [log for log in trainer.state.log_history if "loss" in log]


def _same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def listed(items: list[str]) -> str:
    more = f" (and {len(items) - MAX_LISTED} more)" if len(items) > MAX_LISTED else ""
    return "; ".join(items[:MAX_LISTED]) + more


def log_differences(stock: list[dict], ours: list[dict], extra_metrics=()) -> list[str]:
    """How two log histories differ, timing values aside; ``ours`` may add metrics named ``extra_metrics`` prefixes."""
    if len(stock) != len(ours):
        return [f"{len(ours)} log entries instead of stock's {len(stock)}"]
    if not any("loss" in log for log in stock):
        return ["stock TRL logged no training step (logging_steps): the comparison is void"]
    found = []
    for index, (a, b) in enumerate(zip(stock, ours)):
        where = f"step {a.get('step', index)}"
        a = {k: v for k, v in a.items() if not any(t in k for t in TIMING)}
        b = {k: v for k, v in b.items() if not any(t in k for t in TIMING) and not k.startswith(tuple(extra_metrics))}
        if set(a) != set(b):
            found.append(f"{where}: only stock logs {sorted(set(a) - set(b))}, only ours {sorted(set(b) - set(a))}")
        found += [
            f"{where}: {k} = {b[k]!r} instead of stock's {a[k]!r}"
            for k in sorted(a.keys() & b.keys())
            if not _same(a[k], b[k])
        ]
    return found


def parameter_differences(stock: dict, ours: dict) -> list[str]:
    import torch

    if stock.keys() != ours.keys():
        return [f"parameter names differ: {sorted(stock.keys() ^ ours.keys())}"]
    return [
        f"parameter {n} differs (max |diff| {(stock[n].double() - ours[n].double()).abs().max().item():.3g})"
        for n in stock
        if not torch.equal(stock[n], ours[n])
    ]


def checkpoint_differences(stock: Path, ours: Path, extra_files=(), reference: str = "stock") -> list[str]:
    """How two checkpoint folders differ: their file names (``ours`` may add ``extra_files`` glob patterns), the
    weights and method state byte for byte, the optimizer, scheduler and RNG states as loaded objects (``reference``
    names ``stock``'s run in the messages)."""
    import torch

    names = {p.name for p in stock.iterdir()}
    mine = {p.name for p in ours.iterdir() if not any(fnmatch.fnmatch(p.name, g) for g in extra_files)}
    found = []
    if names != mine:
        found.append(
            f"checkpoint files: only {reference} has {sorted(names - mine)}, only ours {sorted(mine - names)}"
        )
    for name in sorted(names & mine):
        if name in SKIPPED or (stock / name).is_dir():
            continue
        if name in LOADED:
            a, b = (repr(torch.load(folder / name, weights_only=False)) for folder in (stock, ours))
        else:
            a, b = (stock / name).read_bytes(), (ours / name).read_bytes()
        if a != b:
            found.append(f"checkpoint file {name} differs from {reference}'s")
    return found


def assert_same_run(stock: Run, ours: Run, extra_metrics=()) -> None:
    """Every logged value and every trainable parameter of ``ours`` equals ``stock``'s, to the bit."""
    found = log_differences(stock.trainer.state.log_history, ours.trainer.state.log_history, extra_metrics)
    found += parameter_differences(stock.after, ours.after)
    assert not found, "The run differs from stock TRL's: " + listed(found)


class StockComparison(NamedTuple):
    """The two runs of `assert_stock_when_off`, for further checks (e.g. of the method's own metrics)."""

    stock: Run
    ours: Run


def assert_stock_when_off(
    off_options: dict | None = None,
    *,
    output_dir=None,
    model: str | None = None,
    config_cls=None,
    trainer_cls=None,
    training_args: dict | None = None,
    stock_options: dict | None = None,
    reward_funcs=digit_reward,
    train_dataset=None,
    extra_metrics=(),
    extra_files=(),
    checkpoint: bool = True,
    require_clipping: bool = True,
) -> StockComparison:
    """Train stock ``trl.GRPOTrainer`` and ``trainer_cls`` with ``off_options`` (the method's options at their off
    values; default: the config's defaults) the same few steps, and assert that they are the same run to the bit.

    Both runs reuse each generation batch (``num_iterations=2``), so the importance ratio moves off 1 and TRL's clip
    binds (``require_clipping`` asserts that it did: a comparison where nothing is clipped proves less). Compared:
    every logged value (the step times aside), every trainable parameter, and (``checkpoint``) the files of the last
    step's checkpoint: the weights, optimizer, scheduler and RNG states, and the file names. Every difference found
    is listed in the failure.

    Args:
        off_options: the method's config fields, as ``{field: off value}``.
        output_dir: where both runs write (``stock/``, ``ours/``); default: a temporary folder.
        model: a model path; default: the toy's tiny model (`trl_rlvr_ext.testing.runs.tiny_model`).
        config_cls, trainer_cls: the config (or a callable building it from keyword arguments) and the trainer to
            check; default: `RLVRGRPOConfig` and `RLVRGRPOTrainer`.
        training_args: settings for both runs, over `trl_rlvr_ext.testing.runs.grpo_kwargs`.
        stock_options: settings for the stock run only (e.g. the TRL option a degenerate setting reduces to).
        extra_metrics: prefixes of metrics only ``trainer_cls`` logs (when the options are on in a setting that must
            reduce to stock, e.g. ``("adaptive_clip/",)``); off, a method logs nothing of its own.
        extra_files: glob patterns of checkpoint files only ``trainer_cls`` writes (the same remark applies).

    Returns:
        the two runs (`StockComparison`).
    """
    from trl import GRPOConfig, GRPOTrainer

    from ..grpo.grpo_config import RLVRGRPOConfig
    from ..grpo.grpo_trainer import RLVRGRPOTrainer

    if output_dir is None:
        output_dir = tempfile.mkdtemp(prefix="trl_rlvr_ext_stock_")
    output_dir, model = Path(output_dir), model or tiny_model()
    settings = dict(training_args or {})
    if checkpoint:
        steps = settings.get("max_steps", grpo_kwargs(output_dir)["max_steps"])
        settings.update(save_strategy="steps", save_steps=steps)
    common = {"reward_funcs": reward_funcs, "train_dataset": train_dataset, **settings}
    stock = train(GRPOTrainer, GRPOConfig, model, output_dir / "stock", **common, **(stock_options or {}))
    ours = train(
        trainer_cls or RLVRGRPOTrainer,
        config_cls or RLVRGRPOConfig,
        model,
        output_dir / "ours",
        **common,
        **(off_options or {}),
    )
    if require_clipping:
        clipped = [log.get("clip_ratio/region_mean", 0) for log in step_logs(stock.trainer)]
        assert max(clipped, default=0) > 0, (
            "TRL's clip never bound in the stock run, so the comparison is void: raise the learning rate or keep "
            "num_iterations > 1 in training_args (or pass require_clipping=False where the setting cannot clip)."
        )
    found = {
        "logged values": log_differences(
            stock.trainer.state.log_history, ours.trainer.state.log_history, extra_metrics
        ),
        "parameters": parameter_differences(stock.after, ours.after),
    }
    if checkpoint:
        name = f"checkpoint-{stock.trainer.state.global_step}"
        found["checkpoint"] = checkpoint_differences(
            output_dir / "stock" / name, output_dir / "ours" / name, extra_files
        )
    report = "\n".join(f"- {what}: {listed(items)}" for what, items in found.items() if items)
    assert not report, f"With {off_options or 'the default options'}, the run differs from stock TRL's:\n{report}"
    return StockComparison(stock, ours)
