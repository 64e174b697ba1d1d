"""Warm-started tiny base models for reasoning-gym tasks, built on CPU like the toy base (`trl_rlvr_ext.toy.warmstart`).

The tiny model and byte-level tokenizer of the toy (`trl_rlvr_ext.toy.make_model`/`make_tokenizer`) are given a short
supervised warm start on a ``reasoning_gym:`` dataset's **train** split (never on its held-out split): each
demonstration is the prompt followed by ``<answer>{gold}</answer>`` and EOS, the answer convention of the
``reasoning_gym`` reward. Stopped early, the model solves some problems always, some sometimes, some never: the spread
of per-problem pass rates RLVR learns from. `describe_base` measures that spread and the chance rate it must beat.

The model is cached under ``<cache root>/reasoning_gym/<hash of the settings and the reasoning-gym version>``, built
at most once, atomically, offline (`trl_rlvr_ext.warmstart`).

`PRESETS` are the tasks the studies use, with easy generator options a 0.66 M-parameter model learns by computing:
the answer is a function of the digits in the prompt, and the chance rate of guessing it from the answer distribution
is printed next to pass@k.
"""

import dataclasses
import hashlib
import json
import os
import random
from importlib.metadata import version
from pathlib import Path

from .warmstart import build_cached, is_built, resolve_settings, supervised_warm_start


_BUILD_VERSION = 1

# name -> dataset name. Stripped templates keep the prompts short for the tiny model (see strip_template).
PRESETS = {
    # two or three 1-digit terms, + or -: "4 - 1 - 7" -> "-4"
    "chain_sum": (
        "reasoning_gym:chain_sum?min_terms=2&max_terms=3&min_digits=1&max_digits=1&size=2000&test_size=300"
        "&strip_template=true"
    ),
    # three integers 0-99, sort ascending/descending: "ascending order: 9.0, 83.0, 25.0" -> "['9.0', '25.0', '83.0']"
    "number_sorting": (
        "reasoning_gym:number_sorting?min_numbers=3&max_numbers=3&min_decimals=0&max_decimals=0&min_value=0"
        "&max_value=99&size=2000&test_size=300&strip_template=true"
    ),
    # a mixture of both: shared surface form (digits), different skills
    "chain_sum+number_sorting": (
        "reasoning_gym:chain_sum+number_sorting?chain_sum.min_terms=2&chain_sum.max_terms=3&chain_sum.min_digits=1"
        "&chain_sum.max_digits=1&number_sorting.min_numbers=3&number_sorting.max_numbers=3"
        "&number_sorting.min_decimals=0&number_sorting.max_decimals=0&number_sorting.min_value=0"
        "&number_sorting.max_value=99&size=2000&test_size=300&strip_template=true"
    ),
    # three numbers 1-9 and a target 1-30, reach it with + - * / using each number once:
    # "Calculate 10 using all of these numbers: 2, 3, 4. ..." -> "4*3 - 2". Many expressions reach the target (median
    # 6 distinct solution strings per train problem, see trl_rlvr_ext.tasks.countdown), so a base warm-started on
    # varied solutions (demonstrations="varied") has uncertain tokens that are still rewarded. The problem space is
    # small (the 2000 train rows hold 927 distinct problems), so dedup=near: with exact de-duplication 82 of the first
    # 100 held-out problems were a train problem with another template or number order.
    "countdown": (
        "reasoning_gym:countdown?min_numbers=3&max_numbers=3&min_value=1&max_value=9&min_target=1&max_target=30"
        "&size=2000&test_size=300&strip_template=true&dedup=near"
    ),
    # countdown's problems (the same train and held-out entries) with the prompt cut to the problem's data,
    # "8 from 6, 4, 8" (compact=true). The countdown base writes numbers that are not in the prompt (on train
    # problems: "9 - 4 + 5" for 8 from 6, 4, 8): reasoning-gym's three templates put the numbers at varying places
    # behind about 40 characters of instructions, which the tiny model has not learnt to read.
    "countdown_compact": (
        "reasoning_gym:countdown?min_numbers=3&max_numbers=3&min_value=1&max_value=9&min_target=1&max_target=30"
        "&size=2000&test_size=300&compact=true&dedup=near"
    ),
}
# How a warm start writes a problem's demonstration: "gold" the dataset's one answer string; "varied" a solution
# drawn at random (uniformly among the distinct solutions) each time the problem is drawn, for tasks with many
# valid answers (see `varied_solutions`).
DEMONSTRATIONS = ("gold", "varied")


def resolve_dataset(name: str) -> str:
    """A preset's dataset name, or ``name`` itself when it is a ``reasoning_gym:`` name."""
    if name in PRESETS:
        return PRESETS[name]
    if not name.startswith("reasoning_gym:"):
        raise ValueError(f"{name!r} is neither a preset ({sorted(PRESETS)}) nor a reasoning_gym:<task> dataset name.")
    return name


@dataclasses.dataclass(frozen=True)
class GymWarmStartSettings:
    """Everything that determines a reasoning-gym base model; its hash (with the reasoning-gym version) names the cache.

    ``dataset``: a ``reasoning_gym:`` name or a key of `PRESETS` (its ``train`` split is the demonstrations). Model
    size as in `trl_rlvr_ext.toy.make_model`. Optimisation: ``num_steps`` AdamW steps of ``batch_size`` train
    problems drawn uniformly, peak ``learning_rate`` with ``warmup_steps`` of linear warm-up then cosine decay to 10 %,
    ``weight_decay``; ``seed``. ``demonstrations`` (see `DEMONSTRATIONS`): ``"gold"`` writes each problem's one
    gold answer; ``"varied"`` a random one of all its solutions each time the problem is drawn (countdown only), so
    that the base learns a distribution over the solutions instead of one string per problem, and its tokens stay
    uncertain where the task allows several answers.
    """

    dataset: str = "chain_sum"
    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 256
    num_steps: int = 1000
    batch_size: int = 64
    learning_rate: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.0
    seed: int = 0
    demonstrations: str = "gold"

    def __post_init__(self):
        resolve_dataset(self.dataset)
        if self.demonstrations not in DEMONSTRATIONS:
            raise ValueError(f"demonstrations={self.demonstrations!r} must be one of {DEMONSTRATIONS}.")
        for name in ("num_steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be a positive integer.")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate={self.learning_rate} must be positive.")

    def digest(self) -> str:
        payload = {"version": _BUILD_VERSION, "reasoning_gym": version("reasoning-gym"), **dataclasses.asdict(self)}
        payload["dataset"] = resolve_dataset(self.dataset)
        if self.demonstrations == "gold":
            # The field came after the first bases were cached: leaving its default out keeps their hashes.
            del payload["demonstrations"]
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def completion_of(answer: str) -> str:
    """The demonstration of a gold answer under the ``reasoning_gym`` reward's convention."""
    return f"<answer>{answer}</answer>"


def prompt_text(tokenizer, prompt) -> str:
    """A standard prompt as it is; a conversational one rendered by the chat template (with the generation prompt)."""
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)


def varied_solutions(train) -> list[list[str]]:
    """Per train row, every answer the task's verifier accepts (sorted): the pool ``demonstrations="varied"`` draws
    from. Only countdown has an enumerator (`trl_rlvr_ext.tasks.countdown`); each row's gold must be among its
    solutions, else the enumerator and the verifier disagree and the build stops."""
    from .tasks.countdown import entry_solutions

    pools = []
    for task, entry, gold in zip(train["task"], train["entry"], train["answer"]):
        if task != "countdown":
            raise ValueError(
                f'demonstrations="varied" needs every train problem\'s solutions; only countdown has an enumerator, '
                f'but a row is of the task {task!r}. Use demonstrations="gold" for it.'
            )
        solutions = entry_solutions(json.loads(entry))
        if gold not in solutions:
            raise ValueError(f"The gold {gold!r} of a countdown problem is not among its enumerated solutions.")
        pools.append(solutions)
    return pools


def demonstration_sampler(settings: GymWarmStartSettings, train, rng: random.Random):
    """``completion(row) -> str``: the demonstration of train row ``row`` under ``settings.demonstrations``. With
    ``"varied"`` every call draws again (from ``rng``), so the same problem is shown with different solutions."""
    if settings.demonstrations == "gold":
        completions = [completion_of(a) for a in train["answer"]]
        return completions.__getitem__
    pools = varied_solutions(train)
    return lambda row: completion_of(rng.choice(pools[row]))


def train_gym_base_model(settings: GymWarmStartSettings, progress: bool = True):
    """Run the warm start; returns ``(model, tokenizer, stats)``. Deterministic given the settings."""
    from .data import load_named_dataset
    from .toy.modeling import make_model_from_settings, make_tokenizer

    train = load_named_dataset(resolve_dataset(settings.dataset))["train"]
    tokenizer = make_tokenizer()
    prompts = [prompt_text(tokenizer, p) for p in train["prompt"]]
    model = make_model_from_settings(tokenizer, settings)
    rng = random.Random(f"gym-warmstart-{settings.seed}")
    # A separate stream for the varied solutions, so that the rows drawn are those of a gold warm start.
    completion = demonstration_sampler(settings, train, random.Random(f"gym-warmstart-solutions-{settings.seed}"))

    def next_batch():
        rows = [rng.randrange(len(prompts)) for _ in range(settings.batch_size)]
        return [prompts[i] for i in rows], [completion(i) for i in rows]

    stats = supervised_warm_start(
        model,
        tokenizer,
        next_batch,
        num_steps=settings.num_steps,
        learning_rate=settings.learning_rate,
        warmup_steps=settings.warmup_steps,
        weight_decay=settings.weight_decay,
        desc=f"Warm start ({settings.dataset})",
        progress=progress,
    )
    return model, tokenizer, stats


def _resolve(cache_dir, settings: dict) -> tuple[GymWarmStartSettings, Path]:
    # The toy's size preset (TRL_RLVR_EXT_TOY_SIZE=smoke) shrinks the defaults here too: settings not given take
    # the smoke model and warm start, so a tutorial or a study's --quick runs end to end in seconds.
    from .toy.size import default_warmstart_overrides

    settings = {**default_warmstart_overrides(), **settings}
    return resolve_settings(GymWarmStartSettings, "reasoning_gym", cache_dir, settings)


def is_gym_base_model_cached(cache_dir: str | os.PathLike | None = None, **settings) -> bool:
    """Whether `get_gym_base_model_path` with these arguments would load from the cache."""
    return is_built(_resolve(cache_dir, settings)[1])


def get_gym_base_model_path(cache_dir: str | os.PathLike | None = None, progress: bool = True, **settings) -> str:
    """The directory of a reasoning-gym base model (model + tokenizer), built on first use, then cached.

    Args:
        cache_dir: cache root (default ``$TRL_RLVR_EXT_CACHE``, else ``~/.cache/trl_rlvr_ext``); the model lives in
            ``<cache root>/reasoning_gym/<hash>``.
        progress: show a progress bar while building.
        **settings: fields of `GymWarmStartSettings` (``dataset``, model size, ``num_steps``, ...).
    """
    resolved, final = _resolve(cache_dir, settings)

    def build():
        model, tokenizer, stats = train_gym_base_model(resolved, progress=progress)
        metadata = {
            "settings": dataclasses.asdict(resolved),
            "dataset_name": resolve_dataset(resolved.dataset),
            "reasoning_gym_version": version("reasoning-gym"),
            "build_version": _BUILD_VERSION,
            **stats,
        }
        return model, tokenizer, metadata

    return build_cached(final, build)


def pass_rate_spread(num_correct, num_samples) -> dict[str, float]:
    """The spread of per-problem pass rates ``c / n`` (``n`` a number, or one per problem): the share of problems never solved (``"never"``), solved by
    more than 10 % and fewer than 90 % of the samples (``"mid"``: the problems on which GRPO's groups of a few
    completions mostly hold both rewards, what a base is warm-started for), and always solved (``"always"``)."""
    import numpy as np

    rates = np.asarray(num_correct, dtype=float) / num_samples
    if rates.ndim != 1 or rates.size == 0:
        raise ValueError(f"num_correct must be a non-empty list of per-problem counts, got shape {rates.shape}.")
    return {
        "never": float(np.mean(rates == 0)),
        "mid": float(np.mean((rates > 0.1) & (rates < 0.9))),
        "always": float(np.mean(rates == 1)),
    }


def chance_rates(train_answers, test_answers) -> list[float]:
    """Per held-out problem, the chance that one draw from the train answer distribution is its gold answer."""
    counts: dict[str, int] = {}
    for answer in train_answers:
        counts[answer] = counts.get(answer, 0) + 1
    return [counts.get(answer, 0) / len(train_answers) for answer in test_answers]


def _first_problems(dataset: str, split: str, num_problems: int):
    """``(splits, rows)``: a dataset's splits and the first ``num_problems`` rows of ``split`` (train or test)."""
    from .data import load_named_dataset

    if split not in ("train", "test"):
        raise ValueError(f"split={split!r} must be 'train' or 'test'.")
    splits = load_named_dataset(resolve_dataset(dataset))
    return splits, splits[split].select(range(min(num_problems, splits[split].num_rows)))


def describe_base(
    model_path: str, dataset: str, num_problems: int = 100, num_samples: int = 32, seed: int = 0, split: str = "test"
):
    """The regime a base model puts RLVR in: pass@k on held-out problems, the spread of per-problem pass rates, and
    the chance rate of guessing from the answer distribution (a pass@k far above it means computing, not guessing).

    Samples at temperature 1 (the policy's own distribution, as GRPO samples it). ``split="train"`` measures the
    same on the first train problems instead: what a setting may be chosen on without looking at held-out problems
    (the chance rate is then that of the train answers on themselves). Returns a dict.
    """
    import numpy as np

    from .evaluation import evaluate_pass_at_k
    from .rewards.reasoning_gym import reasoning_gym_reward
    from .sampling import SamplingSettings

    splits, test = _first_problems(dataset, split, num_problems)
    sampling = SamplingSettings(num_samples=num_samples, temperature=1.0, top_p=1.0, max_new_tokens=48, seed=seed)
    result = evaluate_pass_at_k(model_path, test, reasoning_gym_reward, sampling=sampling, progress=False)
    spread = pass_rate_spread(result.num_correct, result.num_samples)
    chance = np.array(chance_rates(splits["train"]["answer"], test["answer"]))
    return {
        "pass_at_k": result.pass_at_k,
        "chance_pass_at_k": {k: float(np.mean(1 - (1 - chance) ** k)) for k in result.pass_at_k},
        "frac_rate_0": spread["never"],
        "frac_rate_between_0.1_0.9": spread["mid"],
        "frac_rate_1": spread["always"],
        "num_problems": len(result.num_correct),
        "num_samples": num_samples,
    }


def sample_entropy(
    model_path: str,
    dataset: str,
    split: str = "train",
    num_problems: int = 100,
    num_samples: int = 8,
    max_new_tokens: int = 48,
    seed: int = 0,
) -> dict:
    """The mean entropy (nats) of a base model's next-token distribution over the tokens it samples itself at
    temperature 1 (no top-k, no top-p), up to and including EOS, on the first ``num_problems`` problems of
    ``split`` (``"train"`` by default: a number to choose a base by must not come from held-out problems).

    Why: a clip rule for reused rollouts only binds on tokens whose probability can move, and a token with p close
    to 1 (entropy near 0) cannot leave the trust region; this is the number that says whether a base has such
    tokens. Returns ``{"mean_token_entropy", "num_tokens", "num_problems", "num_samples"}``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rows = _first_problems(dataset, split, num_problems)[1]
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    torch.manual_seed(seed)
    total, count = 0.0, 0
    for prompt in rows["prompt"]:
        ids = tokenizer(prompt_text(tokenizer, prompt), add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = model.generate(
                ids.repeat(num_samples, 1),
                attention_mask=torch.ones(num_samples, ids.size(1), dtype=torch.long),
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_new_tokens,
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        logits = torch.stack(out.logits, dim=1).float()  # [samples, new tokens, vocab], before any processing
        entropy = -(logits.log_softmax(-1) * logits.softmax(-1)).sum(-1)
        generated = out.sequences[:, ids.size(1) :]
        # a token counts up to and including the first EOS (generate pads the finished rows after it)
        after_eos = (generated == tokenizer.eos_token_id).long().cumsum(-1)
        mask = (after_eos == 0) | ((after_eos == 1) & (generated == tokenizer.eos_token_id))
        total += float((entropy * mask).sum())
        count += int(mask.sum())
    return {
        "mean_token_entropy": total / count,
        "num_tokens": count,
        "num_problems": rows.num_rows,
        "num_samples": num_samples,
    }
