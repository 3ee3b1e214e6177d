"""Per flush and data file: rewrite the file, or record its removed rows in a delete file.

A flush that removes rows (updates, deletes) from a data file can

- rewrite it (copy-on-write): read the whole file, write it again without those rows. It
  costs the file's bytes, whatever the change; readers then read one clean file;
- write a position-delete file against it (merge-on-read): a few bytes per removed row.
  Readers then read the file and skip those rows; the rows stay on storage until a rewrite.

The rule (`choose`): a file is rewritten when the share of its rows removed, counting the
rows its pending delete files already hide, reaches `rewrite_share` (default 0.2, as
pg_lake); below it the removed rows go to a delete file. The share is the other side of
write amplification: a rewrite writes `1 / share` bytes per changed byte, so 0.2 bounds a
rewrite to at most 5 bytes written per byte changed, while a file that keeps collecting
deletes is rewritten before readers skip more than a fifth of what they read. A file that
holds none of the removed keys (its key bounds only overlapped them) is left alone in both
modes once its key columns were read.

`copy-on-write` (STREAMBED_WRITE_MODE) rewrites every file the plan names, as streambed
did before delete files, for readers that cannot apply delete files. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

WriteMode = Literal["merge-on-read", "copy-on-write"]
WRITE_MODES: Final = ("merge-on-read", "copy-on-write")
REWRITE_SHARE: Final = 0.2


@dataclass(frozen=True)
class FileChange:
    """What one flush removes from one data file."""

    path: str
    record_count: int
    removed: int  # rows of live keys this flush removes (not hidden already)
    hidden: int  # rows its pending delete files already hide

    @property
    def removed_share(self) -> float:
        """The share of the file's rows gone after this flush."""
        if self.record_count <= 0:
            return 1.0
        return (self.removed + self.hidden) / self.record_count


@dataclass(frozen=True)
class Choice:
    rewrite: tuple[str, ...]  # files to rewrite (copy-on-write)
    delete: tuple[str, ...]  # files that get a position-delete file
    untouched: tuple[str, ...]  # candidates that hold no removed key


def choose(changes: Sequence[FileChange], rewrite_share: float = REWRITE_SHARE) -> Choice:
    """Split a flush's candidate files by the rule of the module doc."""
    rewrite: list[str] = []
    delete: list[str] = []
    untouched: list[str] = []
    for change in changes:
        if change.removed <= 0:
            untouched.append(change.path)
        elif change.removed_share >= rewrite_share:
            rewrite.append(change.path)
        else:
            delete.append(change.path)
    return Choice(tuple(rewrite), tuple(delete), tuple(untouched))
