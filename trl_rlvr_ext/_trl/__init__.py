"""Guarded copies of TRL methods, one sub-package per TRL version whose copied source differs.

TRL has no hook between some of its loss computations and their reductions (and its maintainers keep trainers
self-contained), so a few methods are copied here verbatim, with our code inserted between
``# --- <feature> begin`` / ``# --- <feature> end`` markers. Everything else of the package stays out of this folder.

- ``v1_16/``: TRL 1.16.0's source; TRL 1.15.0's copied methods are the same text, so 1.15 uses it too.
- ``v1_14/``: TRL 1.14.2's source (GRPO's `_compute_loss` differs by a comment, DPO's by ~150 lines).

Each ``vX_Y/<trainer>.py`` holds one class, ``<Trainer>Copy``, whose methods are TRL's with our marked blocks. A
trainer calls them as plain functions (``GRPOTrainerCopy._compute_loss(self, model, inputs)``) and only when one of
our options is on; with every option off it calls TRL's own method (``super()``), so it is stock TRL to the bit.

Guards (tests/test_trl_copies.py): each copy with its marked blocks removed equals ``inspect.getsource`` of the
installed TRL's method, character for character; the signatures of every TRL / transformers method we override are
pinned. ``python -m trl_rlvr_ext.scripts.reapply_trl`` re-applies the marked blocks to another TRL's source (see
CONTRIBUTING.md, "Admitting a new TRL minor").
"""

import importlib

from packaging.version import Version


# TRL minor -> the sub-package holding its copies. Only the minors listed here are supported; pyproject.toml's pin
# (`trl>=1.14,<1.17`) must agree. 1.15 and 1.16 share `v1_16`: their copied methods are identical (the source tests
# check it under the TRL matrix, tests/trl_matrix/run.sh).
TRL_COPIES = {"1.14": "v1_14", "1.15": "v1_16", "1.16": "v1_16"}


def trl_minor(version: str | None = None) -> str:
    """``"1.16"`` for TRL ``1.16.0`` (the installed TRL when ``version`` is None)."""
    if version is None:
        import trl

        version = trl.__version__
    release = Version(version).release
    return f"{release[0]}.{release[1]}"


def copies_package(version: str | None = None) -> str:
    """Name of the sub-package (``"v1_16"``) holding the copies for TRL ``version`` (default: the installed one)."""
    if version is None:
        import trl

        version = trl.__version__
    minor = trl_minor(version)
    if minor not in TRL_COPIES:
        supported = ", ".join(TRL_COPIES)
        raise ImportError(
            f"trl_rlvr_ext supports TRL {supported}, but TRL {version} is installed. Install a supported version "
            "(`pip install 'trl>=1.14,<1.17'`). Admitting a new TRL minor is described in CONTRIBUTING.md: re-apply "
            "our marked blocks with `python -m trl_rlvr_ext.scripts.reapply_trl` and run the TRL matrix."
        )
    return TRL_COPIES[minor]


def load_copy(trainer: str, version: str | None = None) -> type:
    """The class of copied methods for ``trainer`` (``"grpo"`` or ``"dpo"``) matching the installed TRL version.

    Raises:
        ImportError: when the installed TRL is not a supported minor.
    """
    module = importlib.import_module(f"{__name__}.{copies_package(version)}.{trainer}")
    return module.COPY
