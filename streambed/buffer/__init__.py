"""The per-table change buffer: committed pgoutput changes, collapsed per key.

`ChangeBuffer` takes decoded messages from the pipeline and produces `TableDelta`s
(see `streambed.buffer.changes`) for the lake at each flush.
"""

from streambed.buffer.buffer import ChangeBuffer, Frontier

__all__ = ["ChangeBuffer", "Frontier"]
