"""The command line hides the deprecation warnings and log lines of TRL, transformers and DeepSpeed that a user cannot
act on (they concern calls made inside those libraries). Only the command line: the library leaves Python's warnings
and the dependencies' loggers alone. Imports nothing heavy (every entry point calls it before parsing ``--help``)."""

import logging
import warnings


# Deprecation warnings raised inside TRL / transformers / DeepSpeed on every run, about calls the user does not make
_UNACTIONABLE_WARNINGS = (
    (FutureWarning, r"`is_gradient_checkpointing` is deprecated"),
    (FutureWarning, r"`gradient_checkpointing_enable` is deprecated"),
    (FutureWarning, r"`gradient_checkpointing_disable` is deprecated"),
)
# Log lines of the same kind: DeepSpeed says, whenever it is imported on a machine without a GPU, that it picked the CPU
_UNACTIONABLE_LOG_LINES = (("DeepSpeed", "Setting accelerator to CPU"),)


class _DropLogLines(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def quiet_dependency_warnings() -> None:
    """Hide the known deprecation warnings and log lines of TRL, transformers and DeepSpeed that a user of the command
    line cannot act on (they concern calls inside those libraries). Idempotent."""
    for category, message in _UNACTIONABLE_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    for logger_name, text in _UNACTIONABLE_LOG_LINES:
        logger = logging.getLogger(logger_name)
        if not any(isinstance(f, _DropLogLines) and f.text == text for f in logger.filters):
            logger.addFilter(_DropLogLines(text))
