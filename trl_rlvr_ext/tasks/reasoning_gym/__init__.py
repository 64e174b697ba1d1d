r"""reasoning-gym tasks as TRL prompt-only datasets (optional extra ``[gym]``: ``pip install -e ".[gym]"``).

`reasoning-gym <https://github.com/open-thought/reasoning-gym>`_ has about a hundred procedural task generators, each
with its own verifier (``score_answer``). A dataset name of the form

    reasoning_gym:<task>[+<task>...][?<option>=<value>&...]

resolves through `trl_rlvr_ext.data`, so it works wherever a dataset name is accepted (the GRPO/DPO scripts and
recipes, ``trl-rlvr-ext eval``/``curate``, `trl_rlvr_ext.data.load_named_dataset`). Examples::

    reasoning_gym:count_bits?size=2000&seed=1&max_n=255
    reasoning_gym:chain_sum?min_terms=2&max_terms=2&max_digits=2&strip_template=true
    reasoning_gym:chain_sum+count_bits?chain_sum.max_digits=1&count_bits.max_n=63&count_bits.weight=2

Options (everything after ``?``, ``&``-separated):

- ``size`` (default 1000): train problems; ``test_size`` (default 200): held-out problems.
- ``seed`` (default 0): the train split is reasoning-gym's dataset at this seed.
- ``format``: ``standard`` (default; the prompt is the question text), ``conversational`` (a system message with
  reasoning-gym's default system prompt, which asks for ``<answer>...</answer>``, then the question as a user message)
  or ``chat`` (the question as the only, user, message: the model's chat template adds its own system prompt; for
  instruction-tuned models that do not follow reasoning-gym's answer-tag instruction, with a lenient ``answer``).
- ``answer`` (default ``tags``): how the reward reads a completion's answer (`ANSWER_FORMATS`). ``tags`` is
  reasoning-gym's convention, one final ``<answer>...</answer>`` block. ``first_number`` / ``last_number`` read the
  first / last number written anywhere in the completion (`trl_rlvr_ext.rewards.reasoning_gym.extract_answer`): a
  lenient, explicit option for tasks whose gold answer is one number (a name whose gold answers are not all single
  numbers fails), so a model that answers "3 * 4 = 12" is graded on what it wrote. It adds an ``answer_format``
  column; compare results only under one format, against trivial policies graded the same way.
- ``strip_template`` (default false): remove the constant text every question of a task starts and ends with
  (reasoning-gym prompts carry a fixed natural-language prefix, e.g. ``"State the final answer to the following
  arithmetic problem: "``), leaving the varying part (``"4 - 1 - 7 ="``). The constant part is the longest common
  prefix (and suffix) of the task's train questions, cut at whitespace; train and test are stripped identically.
  Meant for tiny models with a short context; the task itself is unchanged.
- ``compact`` (default false): the prompt is the problem's data alone, written by the task's compact renderer
  (`COMPACT_QUESTIONS`; countdown: ``"8 from 6, 4, 8"``), instead of reasoning-gym's question. For tasks whose
  question comes in several templates (countdown has three), which ``strip_template`` cannot shorten. The verifier
  and the ``entry`` column are unchanged: only the prompt is rewritten. Needs ``dedup=near`` (two questions that
  differ only in their template become one prompt, and the near-duplicate key is what identifies the problem) and
  excludes ``strip_template`` (nothing is left to strip).
- any other ``key=value`` is a generator option of the task (a field of its reasoning-gym config, e.g. ``max_n`` of
  ``count_bits``). In a mixture, write ``<task>.<key>=value``; ``<task>.weight`` sets its sampling weight (default 1).
  Values parse as ``true``/``false``, integers, floats, or text; ``a,b,c`` is a tuple (``operators=+,-``).

- ``dedup`` (default ``exact``): which held-out problems are dropped as copies of train ones. ``exact``: the same
  question. ``near``: also the same problem up to a reordering (`near_duplicate_key`: chain_sum the multiset of
  signed terms, number_sorting the multiset of numbers, countdown the multiset of numbers and the target, any other task its question with case and whitespace
  normalised; products the multiset of factors), so ``"3 + 4 - 1"`` is dropped when ``"4 - 1 + 3"`` is a train problem.
- ``stratify`` (default false): draw the held-out split with the train split's composition over the generator's own
  options (`problem_stratum`: the task of a mixture, and the per-problem values of the options reasoning-gym lists
  as the problem's difficulty, e.g. chain_sum's ``num_terms`` and ``num_digits``): each stratum gets its share of
  ``test_size`` (largest remainders). A stratum the train split has exhausted fails the name, naming it.

The splits share no problem: reasoning-gym draws item ``i`` of ``create_dataset(task, size, seed)`` from an RNG seeded
with ``seed + i``, so two seeds closer than the sizes share items. The held-out split is therefore drawn at
``seed + TEST_SEED_OFFSET`` (far beyond any train size), and every held-out question that also occurs in the train
split is dropped (and the held-out split keeps each question once), drawing on until ``test_size`` remain.
`split_composition` reports what a name's splits hold (strata, dropped problems, near duplicates left in).

Columns: ``prompt``; ``answer`` (the gold answer string); ``task`` (the reasoning-gym task of the row); ``entry``
(the reasoning-gym entry, question/answer/metadata, as JSON); ``task_options`` (the task's generator options, JSON);
``idx`` (the row's position in its split); with a lenient ``answer``, ``answer_format``. The reward `trl_rlvr_ext.rewards.reasoning_gym.reasoning_gym_reward` reads
``task``, ``entry``, ``task_options`` (and ``answer_format``) and grades with the task's own ``score_answer``.
"""

# The module was one file: every name it defined stays importable from here (only `__all__` is documented).
from .datasets import load_reasoning_gym, make_reasoning_gym_datasets
from .names import (  # noqa: F401
    ANSWER_FORMATS,
    COMPACT_QUESTIONS,
    DEDUP_MODES,
    FORMATS,
    INSTALL_HINT,
    NUMBER,
    PREFIX,
    RESERVED_OPTIONS,
    TEST_SEED_OFFSET,
    ReasoningGymSpec,
    import_reasoning_gym,
    parse_name,
    parse_value,
    task_names,
)
from .problems import (  # noqa: F401
    NEAR_DUPLICATE_KEYS,
    near_duplicate_key,
    problem_stratum,
    signed_terms,
    stratum_label,
)
from .splits import (
    SplitDraw,
    composition_markdown,
    draw_splits,
    near_duplicate_flags,
    split_composition,
    split_composition_markdown,
)


__all__ = [
    "ANSWER_FORMATS",
    "INSTALL_HINT",
    "NUMBER",
    "PREFIX",
    "TEST_SEED_OFFSET",
    "ReasoningGymSpec",
    "SplitDraw",
    "composition_markdown",
    "draw_splits",
    "load_reasoning_gym",
    "make_reasoning_gym_datasets",
    "near_duplicate_flags",
    "near_duplicate_key",
    "parse_name",
    "problem_stratum",
    "split_composition",
    "split_composition_markdown",
    "task_names",
]
