"""Held-out accuracy of a causal LM on a prompt/answer dataset: greedy accuracy and sampled pass@1, batched."""

from collections import defaultdict

from ..rewards.toy import toy_accuracy_reward
from ..sampling import SamplingSettings, TransformersBackend, sample_and_grade, sampling_from_keywords


def evaluate_accuracy(
    model,
    tokenizer,
    dataset,
    num_samples: int = 16,
    temperature: float = 1.0,
    batch_size: int = 64,
    seed: int = 0,
    max_new_tokens: int = 8,
    reward_func=toy_accuracy_reward,
    progress: bool = False,
    sampling: SamplingSettings | None = None,
) -> dict:
    """Greedy accuracy and sampled pass@1 of ``model`` on ``dataset`` (columns ``prompt`` and ``answer``).

    Sampling runs under `torch.random.fork_rng` with its own seed, so calling this inside a training run neither
    disturbs nor depends on the training RNG. The model is put in eval mode and its mode restored afterwards.

    Args:
        num_samples: completions sampled per problem (at ``temperature``) for pass@1 and pass@``num_samples``.
        batch_size: prompts per `generate` call (each sampled ``num_samples`` times).
        max_new_tokens: generation budget; the toy task needs answer digits + 2 markers + EOS.
        reward_func: a TRL-style reward ``f(completions, answer, **kw) -> list[float]``; 1.0 counts as correct.
        sampling (`trl_rlvr_ext.sampling.SamplingSettings`, *optional*): the sampling settings as one value, instead
            of ``num_samples``, ``temperature``, ``seed`` and ``max_new_tokens`` (which must then keep their defaults:
            giving a setting both ways is an error); it must be seeded and not greedy. Its ``top_p`` is used (the
            keyword form samples with top-p 1.0). The greedy pass uses its ``max_new_tokens``.

    Returns:
        A dict with ``greedy_accuracy`` (share of problems whose greedy completion is correct), ``pass@1`` (mean
        over problems and samples of the sampled correctness), ``pass@<num_samples>`` (share of problems solved by at
        least one sample), ``per_problem_pass_rate`` (list, one per problem), ``num_problems``, ``num_samples``, and
        ``pass@1_by_num_carries`` / ``greedy_by_num_carries`` when the dataset has a ``num_carries`` column.
    """
    sampling = sampling_from_keywords(
        sampling, evaluate_accuracy, locals(), needs_seed="the greedy pass is made in addition to the samples"
    )
    num_samples = sampling.num_samples
    if "prompt" not in dataset.column_names or "answer" not in dataset.column_names:
        raise ValueError(f"evaluate_accuracy needs 'prompt' and 'answer' columns, got {dataset.column_names}.")
    rows = [dict(row) for row in dataset]
    # One backend per pass, so that a `generate` call holds `batch_size` prompts in both (each sampled `num_samples`
    # times in the second): the batches, and with them the draws of the seeded RNG, are those of a loop over
    # `batch_size` prompts. The greedy pass draws nothing, so running it first leaves the sampled draws unchanged.
    greedy_backend = TransformersBackend(model, tokenizer, batch_size=batch_size, progress=progress)
    sampling_backend = TransformersBackend(model, tokenizer, batch_size=batch_size * num_samples, progress=progress)
    greedy = sample_and_grade(greedy_backend, tokenizer, rows, [reward_func], sampling.as_greedy()).correct[:, 0]
    correct = sample_and_grade(sampling_backend, tokenizer, rows, [reward_func], sampling).correct
    greedy = [float(g) for g in greedy]
    pass_rates = [float(c.sum()) / num_samples for c in correct]
    n = len(rows)
    result = {
        "greedy_accuracy": sum(greedy) / n,
        "pass@1": sum(pass_rates) / n,
        f"pass@{num_samples}": sum(r > 0 for r in pass_rates) / n,
        "per_problem_pass_rate": pass_rates,
        "num_problems": n,
        "num_samples": num_samples,
    }
    if "num_carries" in dataset.column_names:
        groups = defaultdict(list)
        for k, g, p in zip(dataset["num_carries"], greedy, pass_rates):
            groups[k].append((g, p))
        result["greedy_by_num_carries"] = {k: sum(g for g, _ in v) / len(v) for k, v in sorted(groups.items())}
        result["pass@1_by_num_carries"] = {k: sum(p for _, p in v) / len(v) for k, v in sorted(groups.items())}
    return result
