"""Held-out accuracy of a causal LM on a prompt/answer dataset: greedy accuracy and sampled pass@1, batched."""

from collections import defaultdict

import torch
from tqdm.auto import tqdm

from ..rewards.toy import toy_accuracy_reward


def _prompt_text(prompt, tokenizer) -> str:
    if isinstance(prompt, str):  # standard format
        return prompt
    return tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)  # conversational


@torch.no_grad()
def _generate(model, tokenizer, prompts: list[str], num_return_sequences: int, do_sample: bool, **gen_kwargs):
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    encoded = {k: v.to(model.device) for k, v in encoded.items()}
    output = model.generate(
        **encoded,
        do_sample=do_sample,
        num_return_sequences=num_return_sequences,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **gen_kwargs,
    )
    return tokenizer.batch_decode(output[:, encoded["input_ids"].size(1) :], skip_special_tokens=True)


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
) -> dict:
    """Greedy accuracy and sampled pass@1 of ``model`` on ``dataset`` (columns ``prompt`` and ``answer``).

    Sampling runs under `torch.random.fork_rng` with its own seed, so calling this inside a training run neither
    disturbs nor depends on the training RNG. The model is put in eval mode and its mode restored afterwards.

    Args:
        num_samples: completions sampled per problem (at ``temperature``) for pass@1 and pass@``num_samples``.
        batch_size: prompts per `generate` call (each sampled ``num_samples`` times).
        max_new_tokens: generation budget; the toy task needs answer digits + 2 markers + EOS.
        reward_func: a TRL-style reward ``f(completions, answer, **kw) -> list[float]``; 1.0 counts as correct.

    Returns:
        A dict with ``greedy_accuracy`` (share of problems whose greedy completion is correct), ``pass@1`` (mean
        over problems and samples of the sampled correctness), ``pass@<num_samples>`` (share of problems solved by at
        least one sample), ``per_problem_pass_rate`` (list, one per problem), ``num_problems``, ``num_samples``, and
        ``pass@1_by_num_carries`` / ``greedy_by_num_carries`` when the dataset has a ``num_carries`` column.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples={num_samples} must be at least 1.")
    if "prompt" not in dataset.column_names or "answer" not in dataset.column_names:
        raise ValueError(f"evaluate_accuracy needs 'prompt' and 'answer' columns, got {dataset.column_names}.")
    prompts = [_prompt_text(p, tokenizer) for p in dataset["prompt"]]
    answers = list(dataset["answer"])
    was_training = model.training
    model.eval()
    greedy, pass_rates = [], []
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for start in tqdm(range(0, len(prompts), batch_size), desc="Evaluating", disable=not progress):
                batch, gold = prompts[start : start + batch_size], answers[start : start + batch_size]
                completions = _generate(model, tokenizer, batch, 1, False, max_new_tokens=max_new_tokens)
                greedy.extend(reward_func(completions=completions, answer=gold))
                completions = _generate(
                    model,
                    tokenizer,
                    batch,
                    num_samples,
                    True,
                    max_new_tokens=max_new_tokens,
                    temperature=temperature,
                    top_k=0,
                    top_p=1.0,
                )
                rewards = reward_func(completions=completions, answer=[g for g in gold for _ in range(num_samples)])
                pass_rates.extend(
                    sum(rewards[i * num_samples : (i + 1) * num_samples]) / num_samples for i in range(len(batch))
                )
    finally:
        model.train(was_training)
    n = len(prompts)
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
