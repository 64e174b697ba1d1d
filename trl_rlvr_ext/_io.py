"""The package's one atomic file write: write a temporary sibling, then rename it over the target.

A reader (a resumed run, a concurrent rank, a study report) sees either the old file or the whole new one, never a
half-written one, and a run killed mid-write leaves the previous file in place. Every file the package writes that
way goes through here:

- `atomic_write(path, data)`: text (UTF-8) or bytes;
- ``with atomic_target(path) as tmp: torch.save(value, tmp)``: any writer that takes a path (``torch.save``,
  safetensors' ``save_file``, ``json.dump`` into ``open(tmp, "w")``);
- `AtomicTarget` itself, with `AtomicTarget.commit` / `AtomicTarget.discard`, for a file written over several calls
  (a streamed safetensors file).

Imports nothing of the package (the lowest floor), so every unit may use it.
"""

import contextlib
import os
from collections.abc import Iterator


class AtomicTarget:
    """A temporary sibling of ``path`` to write, then `commit` (renamed over ``path``) or `discard` (removed).

    The temporary name carries the process id, so two processes writing the same file (ranks of one run) never write
    into one temporary file. ``fsync=True`` flushes the temporary file to disk before the rename, for files whose
    loss after a crash of the machine would cost work (offline scores' shards): a rename alone is atomic for
    readers, not durable.
    """

    def __init__(self, path: str | os.PathLike, *, fsync: bool = False):
        self.path = os.fspath(path)
        self.tmp = f"{self.path}.tmp-{os.getpid()}"
        self.fsync = fsync

    def commit(self) -> None:
        if self.fsync:
            fd = os.open(self.tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        # a failed write leaves no temporary file behind (it would never be read, only accumulate)
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.tmp)


@contextlib.contextmanager
def atomic_target(path: str | os.PathLike, *, fsync: bool = False) -> Iterator[str]:
    """The temporary path to write ``path``'s new content into; renamed over ``path`` when the block ends normally,
    removed when it raises (``path`` is then left as it was)."""
    target = AtomicTarget(path, fsync=fsync)
    try:
        yield target.tmp
    except BaseException:
        target.discard()
        raise
    target.commit()


def atomic_write(path: str | os.PathLike, data: str | bytes, *, fsync: bool = False) -> None:
    """Write ``data`` (a ``str`` is written as UTF-8) to ``path`` atomically (see `atomic_target`)."""
    with atomic_target(path, fsync=fsync) as tmp, open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
