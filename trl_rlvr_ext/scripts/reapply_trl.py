"""``python -m trl_rlvr_ext.scripts.reapply_trl``: write our guarded TRL copies for the installed TRL minor.

A maintainer's tool (see CONTRIBUTING.md, "Admitting a new TRL minor"); the logic is `trl_rlvr_ext._trl.reapply`.
"""

import argparse
import sys
from pathlib import Path

from .._trl.reapply import COPY_FILES, AnchorError, parse_copy, read_copy, reapply_file, same_methods


# The folder holding the version sub-packages of the copies (trl_rlvr_ext/_trl)
COPIES_ROOT = Path(__file__).resolve().parents[1] / "_trl"


def main(argv: list[str] | None = None) -> int:
    import trl

    from .._trl import trl_minor

    parser = argparse.ArgumentParser(
        prog="python -m trl_rlvr_ext.scripts.reapply_trl",
        description="Re-apply the marked blocks of our TRL copies to the installed TRL's source.",
    )
    parser.add_argument(
        "--source",
        default="v1_16",
        help="sub-package whose copies hold the blocks (e.g. v1_16); a copy it lacks is read from v1_16",
    )
    parser.add_argument(
        "--target", default=None, help="sub-package to write (default: the installed TRL's minor, e.g. v1_17)"
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=COPIES_ROOT,
        help="folder holding the version sub-packages (default: this package)",
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the target files would change")
    args = parser.parse_args(argv)

    source_dir = COPIES_ROOT / args.source
    if not source_dir.is_dir():
        parser.error(f"no copies for {args.source!r} in {source_dir.parent}")
    target = args.target or "v" + trl_minor().replace(".", "_")
    target_dir = args.output_dir / target
    files = {target_dir / "__init__.py": f'"""Copies of TRL {trl.__version__} methods (see `trl_rlvr_ext._trl`)."""\n'}
    all_notes = []
    for name in COPY_FILES:
        source = source_dir / name if (source_dir / name).is_file() else COPIES_ROOT / "v1_16" / name
        try:
            text, notes = reapply_file(source)
        except AnchorError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        files[target_dir / name] = text
        all_notes.extend(notes)
    for note in all_notes:
        print(f"review: {note}")
    for name in COPY_FILES:  # one copy per code: a release whose methods differ only in comments shares a copy
        new = parse_copy(files[target_dir / name])
        for other in sorted(p for p in COPIES_ROOT.glob(f"v*/{name}") if p.parent.name != target):
            if same_methods(new, read_copy(other)):
                print(
                    f"same code: {name} differs from {other.parent.name}/{name} only in comments or formatting: map "
                    f"{trl_minor()!r} to {other.parent.name!r} for {name.removesuffix('.py')} in TRL_COPIES instead "
                    f"of keeping {target}/{name}."
                )
    changed = [path for path, text in files.items() if not path.is_file() or path.read_text() != text]
    if args.check:
        for path in changed:
            print(f"would change: {path}")
        return 1 if changed else 0
    target_dir.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_text(text)
        print(f"{'wrote' if path in changed else 'unchanged'}: {path}")
    print(
        f"Copies for TRL {trl.__version__} are in {target_dir}. Next: map {trl_minor()!r} to {target!r} in "
        "trl_rlvr_ext/_trl/__init__.py (TRL_COPIES), widen the pin in pyproject.toml, add the version to "
        "tests/trl_matrix/run.sh, and run the matrix (CONTRIBUTING.md)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
