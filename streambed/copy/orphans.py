"""Files in a copy run's directory that its commit does not reference.

Every task attempt of a copy writes under the run's own directory `<table>/data/copy-<run
id>/`, but only the files of the attempts whose results reached the driver are committed.
An attempt Spark retried, a speculative attempt it killed, or one whose result was lost
leaves files there that no snapshot will ever reference. After the commit, `remove_orphans`
lists the directory (pyarrow's filesystem, local or S3) and deletes exactly the files that
are not among the committed ones.

The directory is private to its run (nothing else writes there), so a file in it that the
commit does not name is an orphan. Deleting a committed file would lose rows, so the sweep
refuses to delete anything unless every committed file lies in the directory and shows up
in the listing: a mismatch means the names are not compared in the same form.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import pyarrow.fs as pafs

from streambed.core.log import log
from streambed.spark.data_source import filesystem

logger = logging.getLogger("streambed.copy")


class UnsafeSweep(Exception):
    """The listing and the committed files do not match up; nothing may be deleted."""


def orphans(
    listed: Iterable[str], base: str, committed: Iterable[str], directory: str
) -> list[str]:
    """The paths of `listed` (files under `base` in the filesystem) that are not committed.

    `committed` are URIs under `directory` (the same directory as `base`, as the commit
    names it). Compared by their path relative to the directory. Raises `UnsafeSweep` when
    a committed file is outside the directory or missing from the listing.
    """
    base_prefix = base.rstrip("/") + "/"
    dir_prefix = directory.rstrip("/") + "/"
    kept: set[str] = set()
    for uri in committed:
        if not uri.startswith(dir_prefix):
            raise UnsafeSweep(f"committed file {uri} is not under {directory}")
        kept.add(uri[len(dir_prefix) :])
    present: dict[str, str] = {}
    for path in listed:
        if not path.startswith(base_prefix):
            raise UnsafeSweep(f"listed file {path} is not under {base}")
        present[path[len(base_prefix) :]] = path
    missing = sorted(kept - present.keys())
    if missing:
        raise UnsafeSweep(f"committed file {dir_prefix}{missing[0]} is not in the listing")
    return [present[name] for name in sorted(present.keys() - kept)]


def remove_orphans(
    directory: str, committed: Iterable[str], fs_options: Mapping[str, str], *, table: str
) -> int:
    """Delete the files under `directory` that are not in `committed`; how many were
    deleted. Best effort: a listing or deletion error is logged, never raised (the commit
    has landed; a leftover costs storage, not correctness)."""
    fs, base = filesystem(directory, fs_options)
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        listed = [i.path for i in infos if i.type == pafs.FileType.File]
        doomed = orphans(listed, base, committed, directory)
    except Exception as e:  # OSError from the store, UnsafeSweep; never raised after a commit
        log(logger, "copy leftovers not removed", logging.WARNING, table=table, error=str(e))
        return 0
    removed = 0
    for path in doomed:
        try:
            fs.delete_file(path)
            removed += 1
        except FileNotFoundError:
            pass
        except Exception as e:
            log(logger, "copy leftover not removed", logging.WARNING, path=path, error=str(e))
    if doomed:
        log(logger, "copy leftovers removed", table=table, files=removed)
    return removed
