"""The marked blocks inside the copies of TRL methods: strip them, and re-apply them to another TRL's source.

A copy is TRL's method text with blocks of our code inserted between a pair of marker lines::

    # --- <feature> begin
    ...our lines...
    # --- <feature> end

Nothing else in the copy may differ from TRL's text. A block is anchored to the TRL line just before it (and,
as a cross-check, the TRL line just after it); `reapply_blocks` looks these lines up in the new TRL source.
"""

import dis
import re
import textwrap
from dataclasses import dataclass


BEGIN_RE = re.compile(r"^[ \t]*# --- (?P<feature>[\w.-]+) begin[ \t]*$")
END_RE = re.compile(r"^[ \t]*# --- (?P<feature>[\w.-]+) end[ \t]*$")


class AnchorError(ValueError):
    """A marked block cannot be placed in the new TRL source: its anchor line is missing or ambiguous."""


@dataclass(frozen=True)
class Block:
    """One marked block: its feature, its lines (markers included) and the TRL lines around it."""

    feature: str
    lines: tuple[str, ...]
    before: str  # the TRL line just above the begin marker
    after: str | None  # the TRL line just below the end marker (None at the end of the method)


def split_blocks(source: str) -> tuple[list[str], list[tuple[int, Block]]]:
    """``(TRL's lines, [(index in TRL's lines after which the block sits, block), ...])`` of a copied method.

    Raises:
        ValueError: on an unclosed, unopened or nested marker, a begin/end feature mismatch, or a block that opens the
            method (a block always follows at least the ``def`` line).
    """
    upstream, placed, current, feature = [], [], None, None
    for number, line in enumerate(source.splitlines(keepends=True), start=1):
        begin, end = BEGIN_RE.match(line), END_RE.match(line)
        if begin:
            if current is not None:
                raise ValueError(f"line {number}: block {begin['feature']!r} opens inside block {feature!r}")
            if not upstream:
                raise ValueError(f"line {number}: a marked block cannot come before the method's first line")
            current, feature = [line], begin["feature"]
        elif end:
            if current is None or end["feature"] != feature:
                raise ValueError(f"line {number}: `# --- {end['feature']} end` without a matching begin marker")
            current.append(line)
            placed.append((len(upstream) - 1, feature, tuple(current)))
            current, feature = None, None
        elif current is not None:
            current.append(line)
        else:
            upstream.append(line)
    if current is not None:
        raise ValueError(f"block {feature!r} is not closed by `# --- {feature} end`")
    blocks = []
    for index, feature, lines in placed:
        after = upstream[index + 1] if index + 1 < len(upstream) else None
        blocks.append((index, Block(feature, lines, upstream[index], after)))
    return upstream, blocks


def strip_marked_blocks(source: str) -> str:
    """``source`` without its marked blocks (markers included): TRL's text, if the copy is faithful."""
    upstream, _ = split_blocks(source)
    return "".join(upstream)


def count_blocks(source: str) -> dict[str, int]:
    """Number of marked blocks per feature."""
    counts: dict[str, int] = {}
    for _, block in split_blocks(source)[1]:
        counts[block.feature] = counts.get(block.feature, 0) + 1
    return counts


def _find(lines: list[str], line: str | None) -> list[int]:
    return [] if line is None else [i for i, candidate in enumerate(lines) if candidate == line]


def reapply_blocks(ours: str, new_upstream: str, where: str = "the method") -> tuple[str, list[str]]:
    """Insert the marked blocks of the copy ``ours`` into ``new_upstream`` (another TRL's source of the same method).

    Each block goes after the unique line of ``new_upstream`` equal to its ``before`` line (whitespace included)
    that is followed by its ``after`` line. Failing that, after the unique ``before`` line, or before the unique
    ``after`` line; those placements are reported in the returned notes, for a human to review.

    Returns:
        ``(new copy, notes)``.

    Raises:
        AnchorError: when neither anchor line identifies a single place in ``new_upstream``.
    """
    _, blocks = split_blocks(ours)
    lines = new_upstream.splitlines(keepends=True)
    placed: dict[int, list[Block]] = {}  # index of the new TRL line a block follows -> the blocks, in order
    notes = []
    for number, (_, block) in enumerate(blocks, start=1):
        label = f"block {number} ({block.feature}) of {where}"
        before, after = _find(lines, block.before), _find(lines, block.after)
        both = [i for i in before if block.after == (lines[i + 1] if i + 1 < len(lines) else None)]
        if len(both) == 1:
            index = both[0]
        elif len(before) == 1:
            index = before[0]
            following = lines[index + 1].strip() if index + 1 < len(lines) else "<end of method>"
            notes.append(f"{label}: placed after its anchor, but the next TRL line is now {following!r}")
        elif len(after) == 1 and after[0] > 0:
            index = after[0] - 1
            notes.append(f"{label}: its anchor {block.before.strip()!r} is gone; placed before the next line instead")
        else:
            raise AnchorError(
                f"{label}: cannot place it in the new TRL source. Its anchor line {block.before.strip()!r} occurs "
                f"{len(before)} times and the line after it, {(block.after or '<end of method>').strip()!r}, "
                f"{len(after)} times (one is needed). Re-insert the block by hand after reading the new TRL code."
            )
        placed.setdefault(index, []).append(block)
    result = []
    for index, line in enumerate(lines):
        result.append(line)
        result.extend(block_line for block in placed.get(index, []) for block_line in block.lines)
    new = "".join(result)
    if strip_marked_blocks(new) != new_upstream:  # cannot happen unless a block swallowed a TRL line
        raise AnchorError(f"{where}: re-applying the blocks changed TRL's own lines; re-insert them by hand.")
    return new, notes


def global_names(method_source: str) -> set[str]:
    """The global names a method's code reads (builtins included), found by compiling it."""
    code = compile(textwrap.dedent(method_source), "<copy>", "exec")
    names, stack = set(), [code]
    while stack:
        current = stack.pop()
        for instruction in dis.get_instructions(current):
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                names.add(instruction.argval)
        stack.extend(const for const in current.co_consts if hasattr(const, "co_code"))
    return names
