"""The initial copy: existing rows of a table, read under an exported snapshot, sewn to the stream.

- `ranges`: ctid block ranges of a table and the COPY statement of one range (pure).
- `catalog`: a table's columns, key and size from the source catalog, as the stream sees them.
- `snapshot`: a snapshot and its seam LSN, from the main slot's creation or a temporary slot.
- `task`: one Spark task's work: read its ctid range under the snapshot, write Parquet.
- `job`: one table's copy as a Spark job over its ranges, committed to the lake at its seam.
- `here`: a small table's ranges copied by threads of streambed's process instead of Spark.
- `progress`: rows, rows/s and ETA per table, live on a terminal or as log lines.
- `manager`: which tables need a copy, the persisted state machine, and what the loop may ack.

See docs/initial-copy.md.
"""
