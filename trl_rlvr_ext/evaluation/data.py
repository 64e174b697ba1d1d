"""Loading a problem set for the command-line tools: a local folder or file, a hub dataset, or the toy task."""

from ..data import FILE_BUILDERS, TOY_DATASETS, load_split


def load_problems(spec: str, split: str = "test", config: str | None = None):
    """A `datasets.Dataset` of problems from ``spec`` (any name `trl_rlvr_ext.data` resolves):

    - ``"toy:arithmetic"``: the package's synthetic addition task (``split`` ``train`` or ``test``), offline;
    - a folder written by ``save_to_disk`` (a `Dataset`, or a `DatasetDict` from which ``split`` is taken);
    - a file of a type in `trl_rlvr_ext.data.FILE_BUILDERS` (used whole);
    - otherwise a hub dataset name (``config`` and ``split`` apply).
    """
    return load_split(spec, split, config)


def with_prompt_column(dataset, prompt_column: str = "prompt", template: str | None = None, chat: bool = False):
    """``dataset`` with the ``prompt`` column the tools need, built from another column or a template.

    Args:
        prompt_column: the column holding the problem text (default ``prompt``: used as it is).
        template: a `str.format` template over the row's columns, e.g.
            ``"{problem} Let's think step by step and output the final answer within \\boxed{{}}."``.
        chat: wrap the text as one user message (conversational format), so the model's chat template applies.
    """
    if template is None and prompt_column == "prompt" and not chat:
        if "prompt" not in dataset.column_names:
            raise ValueError(
                f"The dataset has no 'prompt' column (columns: {dataset.column_names}). Name the column with the "
                "problem text with --prompt_column, or build prompts with --prompt_template."
            )
        return dataset
    if template is None and prompt_column not in dataset.column_names:
        raise ValueError(f"No column {prompt_column!r} in the dataset (columns: {dataset.column_names}).")

    def build(row):
        try:
            text = template.format(**row) if template is not None else row[prompt_column]
        except KeyError as error:
            raise ValueError(f"The prompt template names {error}, which is not a column of the dataset.") from None
        return {"prompt": [{"role": "user", "content": text}] if chat else text}

    return dataset.map(build, desc="Building prompts")


def add_problem_arguments(parser) -> None:
    """The problem-set options shared by ``trl-rlvr-ext eval`` and ``trl-rlvr-ext curate``."""
    parser.add_argument(
        "--dataset",
        required=True,
        help=f"One of {sorted(TOY_DATASETS)}, reasoning_gym:<task>?<options> (extra [gym]), a save_to_disk folder, a {'/'.join(sorted(FILE_BUILDERS))} file, or a hub name.",
    )
    parser.add_argument("--dataset_config", default=None, help="Hub dataset configuration.")
    parser.add_argument("--prompt_column", default="prompt", help="Column with the problem text (default: prompt).")
    parser.add_argument(
        "--prompt_template",
        default=None,
        help="Build prompts from a str.format template over the columns, e.g. '{problem} Put the answer in \\boxed{{}}.'",
    )
    parser.add_argument("--chat", action="store_true", help="Send each prompt as one user message (chat template).")
