"""The toy *base model*: a short supervised warm start of the tiny model on the toy task, cached on disk.

RLVR only learns from prompts whose sampled completions disagree (a group with all-equal rewards has zero advantage),
so a base model that solves everything or nothing teaches it nothing. The warm start therefore makes a base with a
wide spread of per-problem pass rates, by design and in a way that is easy to state:

* it is trained on the task's train partition (never on held-out problems) to write ``"[<sum>]"`` and stop;
* in its demonstrations each carry is **forgotten independently with probability** ``forget_carry_prob`` (a planted,
  systematic misconception, `trl_rlvr_ext.toy.task.forgetful_sum`). The base then samples the right answer of a
  problem with ``k`` carries with probability about ``(1 - forget_carry_prob) ** k``: carry-free problems are easy,
  problems with 1, 2, 3 carries are sometimes solved, and the wrong mode (the forgotten carry) is systematic.

With ``forget_carry_prob > 0.5`` the most likely answer of a problem with a carry is by design the wrong one, so greedy
accuracy starts near the share of carry-free problems, and RLVR has a clear, honest job: the verifier rewards the carried answers that
the base already samples sometimes, and the policy learns to carry on problems it never trained on.

The result is cached under ``<cache root>/toy/<hash of the settings>`` and built at most once; the build writes into a
temporary directory renamed into place at the end, so an interrupted build never leaves a half cache.
"""

import dataclasses
import hashlib
import json
import os
import random
from pathlib import Path

# CACHE_ENV_VAR and default_cache_root stay importable from here (public names of this module).
from ..warmstart import (  # noqa: F401 -- CACHE_ENV_VAR and default_cache_root stay importable from here
    CACHE_ENV_VAR,
    build_cached,
    default_cache_root,
    is_built,
    resolve_settings,
    supervised_warm_start,
)
from .modeling import make_model_from_settings, make_tokenizer
from .size import default_warmstart_overrides
from .task import _check_digits, forgetful_sum, format_answer, format_completion, format_prompt, sample_operands


# Bump when the build changes in a way the settings do not capture, so that old caches are not reused.
_BUILD_VERSION = 2


@dataclasses.dataclass(frozen=True)
class WarmStartSettings:
    """Everything that determines the base model; its hash names the cache directory.

    Model size (see `trl_rlvr_ext.toy.make_model`): ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
    ``num_key_value_heads``, ``intermediate_size``. Task: ``min_digits``, ``max_digits`` (as in
    `trl_rlvr_ext.toy.make_task_datasets`). Misconception: ``forget_carry_prob`` (chance that a demonstration drops
    each carry). Optimisation: ``num_steps`` AdamW steps of ``batch_size`` fresh problems, peak ``learning_rate``
    with ``warmup_steps`` of linear warm-up then cosine decay to 10 %, ``weight_decay``; ``seed``.
    """

    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 256
    min_digits: int = 2
    max_digits: int = 3
    forget_carry_prob: float = 0.6
    num_steps: int = 1500
    batch_size: int = 128
    learning_rate: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.0
    seed: int = 0

    def __post_init__(self):
        if not 0.0 <= self.forget_carry_prob < 1.0:
            raise ValueError(
                f"forget_carry_prob={self.forget_carry_prob} must be in [0, 1): it is the chance that a demonstration "
                "drops each carry (0 = always correct demonstrations)."
            )
        for name in ("num_steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be a positive integer.")
        _check_digits(self.min_digits, self.max_digits)
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate={self.learning_rate} must be positive.")

    def digest(self) -> str:
        payload = json.dumps({"version": _BUILD_VERSION, **dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _demonstration_batch(tokenizer, settings: WarmStartSettings, rng: random.Random):
    """Prompts and marked (possibly forgetful) answers of one batch of fresh train problems."""
    prompts, completions = [], []
    for _ in range(settings.batch_size):
        a, b = sample_operands(rng, settings.min_digits, settings.max_digits, held_out=False)
        prompts.append(format_prompt(a, b, settings.max_digits))
        total = forgetful_sum(a, b, settings.forget_carry_prob, rng)
        completions.append(format_completion(format_answer(total, settings.max_digits)))
    return prompts, completions


def train_base_model(settings: WarmStartSettings, progress: bool = True):
    """Run the warm start; returns ``(model, tokenizer, stats)``. Plain PyTorch, deterministic given the settings."""
    tokenizer = make_tokenizer()
    model = make_model_from_settings(tokenizer, settings)
    rng = random.Random(f"warmstart-{settings.seed}")
    stats = supervised_warm_start(
        model,
        tokenizer,
        lambda: _demonstration_batch(tokenizer, settings, rng),
        num_steps=settings.num_steps,
        learning_rate=settings.learning_rate,
        warmup_steps=settings.warmup_steps,
        weight_decay=settings.weight_decay,
        desc="Warm start (toy base model)",
        progress=progress,
    )
    return model, tokenizer, stats


def _resolve(cache_dir, settings: dict) -> tuple[WarmStartSettings, Path]:
    # The size preset ($TRL_RLVR_EXT_TOY_SIZE) replaces defaults only: settings given by the caller always win.
    settings = {**default_warmstart_overrides(), **settings}
    return resolve_settings(WarmStartSettings, "toy", cache_dir, settings)


def is_base_model_cached(cache_dir: str | os.PathLike | None = None, **settings) -> bool:
    """Whether `get_base_model_path` with these arguments (and the same size preset) would load from the cache."""
    return is_built(_resolve(cache_dir, settings)[1])


def get_base_model_path(cache_dir: str | os.PathLike | None = None, progress: bool = True, **settings) -> str:
    """The directory of the toy base model (model + tokenizer), built by the warm start on first use, then cached.

    Loads offline with `AutoModelForCausalLM.from_pretrained(path)` / `AutoTokenizer.from_pretrained(path)`.

    Args:
        cache_dir: cache root; defaults to ``$TRL_RLVR_EXT_CACHE``, else ``~/.cache/trl_rlvr_ext``. The model lives in
            ``<cache root>/toy/<hash of the settings>``.
        progress: show a tqdm progress bar while building.
        **settings: fields of `WarmStartSettings` (model size, task digits, ``forget_carry_prob``, ``num_steps``, ...).
            Unknown names raise a `TypeError`. Fields not given take the `WarmStartSettings` defaults, or, with
            ``TRL_RLVR_EXT_TOY_SIZE=smoke``, those of `trl_rlvr_ext.toy.size.SMOKE_WARMSTART` (a small model
            warm-started in seconds, for quick end-to-end checks; its accuracy means nothing).
    """
    resolved, final = _resolve(cache_dir, settings)

    def build():
        model, tokenizer, stats = train_base_model(resolved, progress=progress)
        return model, tokenizer, {"settings": dataclasses.asdict(resolved), "build_version": _BUILD_VERSION, **stats}

    return build_cached(final, build)
