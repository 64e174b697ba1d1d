"""Guarded copies of TRL methods, one sub-package per TRL version whose copied source differs.

TRL has no hook between some of its loss computations and their reductions (and its maintainers keep trainers
self-contained), so a few methods are copied here verbatim, with our code inserted between
``# --- <feature> begin`` / ``# --- <feature> end`` markers. Everything else of the package stays out of this folder.

- ``v1_16/``: TRL 1.16.0's source. TRL 1.15.0's copied methods are the same text, so 1.15 uses both its copies;
  TRL 1.14.2's GRPO `_compute_loss` differs from 1.16.0's only in a comment, so 1.14 uses its ``grpo.py`` too.
- ``v1_14/``: TRL 1.14.2's DPO source (its `_compute_loss` differs from 1.16.0's by ~150 lines).

One copy serves every TRL whose copied methods differ from its source only in comments or formatting: the same code.

Each ``vX_Y/<trainer>.py`` holds one class, ``<Trainer>Copy``, whose methods are TRL's with our marked blocks. A
trainer calls them as plain functions (``GRPOTrainerCopy._compute_loss(self, model, inputs)``) and only when one of
our options is on; with every option off it calls TRL's own method (``super()``), so it is stock TRL to the bit.

Guards (tests/test_trl_copies.py): each copy with its marked blocks removed equals ``inspect.getsource`` of the
installed TRL's method, character for character (up to comments and formatting where a copy serves another TRL
release than the one it was generated from: `same_code`); the signatures of every TRL / transformers method we override are
pinned. ``python -m trl_rlvr_ext.scripts.reapply_trl`` re-applies the marked blocks to another TRL's source (see
CONTRIBUTING.md, "Admitting a new TRL minor").
"""

import importlib

from packaging.version import Version


# trainer -> TRL minor -> the sub-package holding that trainer's copy. Only the minors listed here are supported;
# pyproject.toml's pin (`trl>=1.14,<1.17`) must agree. A minor shares another's copy when its copied methods differ
# from that copy's (without our blocks) only in comments or formatting: the source tests check it under the TRL matrix
# (tests/trl_matrix/run.sh), character for character where the texts are the same.
TRL_COPIES = {
    "grpo": {"1.14": "v1_16", "1.15": "v1_16", "1.16": "v1_16"},  # 1.14.2's `_compute_loss`: one comment differs
    "dpo": {"1.14": "v1_14", "1.15": "v1_16", "1.16": "v1_16"},
}
SUPPORTED_MINORS = tuple(TRL_COPIES["grpo"])  # every trainer lists the same minors (tests/test_trl_copies.py)


def trl_minor(version: str | None = None) -> str:
    """``"1.16"`` for TRL ``1.16.0`` (the installed TRL when ``version`` is None)."""
    if version is None:
        import trl

        version = trl.__version__
    release = Version(version).release
    return f"{release[0]}.{release[1]}"


def copies_package(trainer: str, version: str | None = None) -> str:
    """Name of the sub-package (``"v1_16"``) holding ``trainer``'s copy (``"grpo"`` or ``"dpo"``) for TRL ``version``
    (default: the installed one).

    Raises:
        ImportError: when ``version`` is not a supported minor.
    """
    if version is None:
        import trl

        version = trl.__version__
    minor = trl_minor(version)
    if minor not in SUPPORTED_MINORS:
        supported = ", ".join(SUPPORTED_MINORS)
        raise ImportError(
            f"trl_rlvr_ext supports TRL {supported}, but TRL {version} is installed. Install a supported version "
            "(`pip install 'trl>=1.14,<1.17'`). Admitting a new TRL minor is described in CONTRIBUTING.md: re-apply "
            "our marked blocks with `python -m trl_rlvr_ext.scripts.reapply_trl` and run the TRL matrix."
        )
    return TRL_COPIES[trainer][minor]


def load_copy(trainer: str, version: str | None = None) -> type:
    """The class of copied methods for ``trainer`` (``"grpo"`` or ``"dpo"``) matching the installed TRL version.

    Raises:
        ImportError: when the installed TRL is not a supported minor.
    """
    module = importlib.import_module(f"{__name__}.{copies_package(trainer, version)}.{trainer}")
    return module.COPY
