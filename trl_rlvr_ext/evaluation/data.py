"""Loading a problem set for the command-line tools: a local folder or file, a hub dataset, or the toy task."""

from ..data import load_split


def load_problems(spec: str, split: str | None = None, config: str | None = None):
    """A `datasets.Dataset` of problems from ``spec`` (resolved by `trl_rlvr_ext.data.load_split`):

    ``split=None``: the ``test`` split of a dataset with splits, all rows of a single file.

    - ``"toy:arithmetic"``: the package's synthetic addition task (``split`` ``train`` or ``test``), offline;
    - a folder written by ``save_to_disk`` (a `Dataset`, or a `DatasetDict` from which ``split`` is taken);
    - a ``.json``/``.jsonl``/``.parquet``/``.csv``/``.arrow`` file;
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
