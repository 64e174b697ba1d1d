"""What every warm-started base model shares: the cache, the atomic build, and the supervised loop.

A *base model* here is a tiny model given a short supervised warm start on a task's train partition, so that RLVR
has a policy with a spread of per-problem pass rates to learn from. The toy base (`trl_rlvr_ext.toy.warmstart`) and
the reasoning-gym bases (`trl_rlvr_ext.gym_bases`) differ only in their demonstrations; both are built
here:

* `supervised_warm_start`: plain PyTorch AdamW on (prompt, completion) demonstrations, loss on the completion only,
  linear warm-up then cosine decay to 10 %, deterministic given the model, the batches and the settings;
* `build_cached`: build into a temporary directory and rename it into place at the end, so an interrupted build
  never leaves a half cache and concurrent builders do not clash; a ``warmstart.json`` written last marks a
  complete build.
"""

import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm.auto import tqdm


CACHE_ENV_VAR = "TRL_RLVR_EXT_CACHE"
METADATA_FILE = "warmstart.json"


def default_cache_root() -> Path:
    """``$TRL_RLVR_EXT_CACHE`` if set, else ``~/.cache/trl_rlvr_ext``."""
    return Path(os.environ.get(CACHE_ENV_VAR) or Path.home() / ".cache" / "trl_rlvr_ext").expanduser()


def pack_demonstrations(tokenizer, prompts: list[str], completions: list[str]):
    """Right-padded ``(input_ids, attention_mask, labels)`` of prompt + completion + EOS, with the loss on the
    completion and EOS only (the prompt tokens are labelled -100)."""
    prompt_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(completions, add_special_tokens=False)["input_ids"]
    sequences = [p + c + [tokenizer.eos_token_id] for p, c in zip(prompt_ids, completion_ids)]
    length = max(map(len, sequences))
    input_ids = torch.full((len(sequences), length), tokenizer.pad_token_id)
    attention_mask = torch.zeros_like(input_ids)
    labels = torch.full_like(input_ids, -100)
    for i, (p, seq) in enumerate(zip(prompt_ids, sequences)):
        input_ids[i, : len(seq)] = torch.tensor(seq)
        attention_mask[i, : len(seq)] = 1
        labels[i, len(p) : len(seq)] = torch.tensor(seq[len(p) :])
    return input_ids, attention_mask, labels


def lr_factor(step: int, num_steps: int, warmup_steps: int) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine decay from 1 to 0.1 at ``num_steps``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, num_steps - warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


def supervised_warm_start(
    model,
    tokenizer,
    next_batch: Callable[[], tuple[list[str], list[str]]],
    *,
    num_steps: int,
    learning_rate: float,
    warmup_steps: int,
    weight_decay: float = 0.0,
    desc: str = "Warm start",
    progress: bool = True,
) -> dict:
    """Train ``model`` in place for ``num_steps`` AdamW steps, each on the ``(prompts, completions)`` that
    ``next_batch()`` returns; leaves it in eval mode. Returns ``{"final_loss_ema", "train_seconds"}``."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=weight_decay, betas=(0.9, 0.98))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, num_steps, warmup_steps))
    start, running = time.perf_counter(), None
    bar = tqdm(range(num_steps), desc=desc, disable=not progress)
    for _ in bar:
        input_ids, attention_mask, labels = pack_demonstrations(tokenizer, *next_batch())
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        running = loss.item() if running is None else 0.98 * running + 0.02 * loss.item()
        bar.set_postfix(loss=f"{running:.3f}")
    model.eval()
    return {"final_loss_ema": running, "train_seconds": round(time.perf_counter() - start, 1)}


def resolve_settings(settings_cls, subdir: str, cache_dir, settings: dict):
    """``(settings_cls(**settings), <cache root>/<subdir>/<digest>)``: the resolved settings of a base model and the
    directory its build is cached in. An unknown setting is a `TypeError` listing the valid ones."""
    import dataclasses

    try:
        resolved = settings_cls(**settings)
    except TypeError as err:
        fields = [f.name for f in dataclasses.fields(settings_cls)]
        raise TypeError(f"{err}. The base model's settings are {fields} (plus cache_dir, progress).") from None
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
    return resolved, root / subdir / resolved.digest()


def is_built(final: Path, metadata_file: str = METADATA_FILE) -> bool:
    """Whether ``final`` holds a complete build (its metadata file, written last, is there)."""
    return (Path(final) / metadata_file).is_file()


def build_cached(
    final: Path,
    build: Callable[[], tuple[object, object, dict]],
    metadata_file: str = METADATA_FILE,
    extra_files: Callable[[Path], None] | None = None,
) -> str:
    """The directory ``final``, built by ``build() -> (model, tokenizer, metadata)`` if it is not there yet.

    The build writes into a temporary sibling directory renamed into place at the end; ``extra_files(folder)``, if
    given, adds files to it (licences, notices); the metadata file is written last, so its presence marks a complete
    build.
    """
    final = Path(final)
    if is_built(final, metadata_file):
        return str(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-building-", dir=final.parent))
    try:
        model, tokenizer, metadata = build()
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if extra_files is not None:
            extra_files(tmp)
        (tmp / metadata_file).write_text(json.dumps(metadata, indent=2))
        try:
            os.rename(tmp, final)
        except OSError as err:
            if not is_built(final, metadata_file):  # not a concurrent build that finished first: a real problem
                raise RuntimeError(
                    f"Could not move the new model into {final}: {err}. If that directory exists, it is not a "
                    f"complete build (it has no {metadata_file}): delete it and run again."
                ) from err
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return str(final)
