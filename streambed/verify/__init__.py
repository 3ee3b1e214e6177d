"""`streambed verify [TABLE ...]`: prove, online, that the lake holds what the source holds.

Why the results are exact under a concurrent write load:

1. The cut (`streambed.verify.inflight.Cut`). A TEMPORARY logical slot is created with an
   exported snapshot, as a copy does: the snapshot holds exactly the transactions whose
   commit record lies before the slot's consistent point `seam`, i.e. the source at
   frontier `target = seam - 1` in the lake's terms (a lake snapshot whose summary
   `streambed.lsn` is F holds every transaction with commit LSN <= F and none after). A
   plain REPEATABLE READ snapshot cannot serve: a transaction writes its commit record
   before it becomes visible, so under load no LSN read before or after such a snapshot
   splits the transactions as the snapshot does. The slot then streams, from `seam`, every
   transaction committed after the snapshot, in commit order.

2. The lake at the cut. Verify waits (up to `--timeout`) until the lake holds every table up
   to `target`: its frontier in the state store, the latest watermark, or the LSN
   `streambed run` acknowledged to its slot (it acknowledges only what is durable in the
   lake, and moves on with heartbeats while idle) is at or past it. Verify writes a
   heartbeat right after the cut: an idle `streambed run` reports the acknowledgement past
   a heartbeat at once (`streambed.pipeline`), so verify does not wait for its intervals.
   Then for each table (`streambed.verify.lake.choose`):
   - no snapshot above `target`: the newest snapshot at or below it holds the table at
     `target` exactly (a table without changes gets no new snapshot), and the source side
     is the snapshot;
   - otherwise the flush that made the lowest snapshot Y above `target` may hold changes
     committed both before and after `target`; no snapshot holds the table at `target`.
     The lake is read at Y, and the source side is the snapshot *plus* the changes the
     temporary slot streams with commit LSN in (`target`, Y] (`streambed.verify.overlay`):
     the source at Y, exactly. Verify reads its stream up to a logical message it writes
     itself after choosing Y, so every commit before Y has arrived.

3. The comparison (`streambed.verify.hashing`). Rows are split into buckets by the md5 of
   their key's canonical text (the whole row's for a keyless table, which is compared as a
   multiset). Both sides compute, in parallel, each bucket's row count and sum of row
   hashes over the row's Postgres record text (`ROW(...)::text`): the source in SQL in its
   snapshot (keys the overlay touched left out, its rows added), the lake by DuckDB over
   the Iceberg snapshot (position deletes applied), its values written as Postgres text in
   DuckDB SQL for integers, text and booleans, else by the query server's encoder. The text
   forms are the ones the stream sends (the readers use the replication session's
   DateStyle, TimeZone, float digits, bytea hex), so equal values hash equal whatever their
   type. Buckets whose sums differ are bisected by
   further digits of the hash until small enough, then read row by row on both sides and
   matched by key. Each side reads the table a bounded number of times; memory is bounded
   by the bucket count (at most 65 536), the rows of the differing buckets read (at most
   64 buckets of about 2 000 rows), and the in-flight changes (one flush of each table).

A table whose columns change in the source while verify runs is reported as not compared.
"""
