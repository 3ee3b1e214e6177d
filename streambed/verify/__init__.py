"""`streambed verify [TABLE ...]`: prove, online, that the lake holds what the source holds.

The cut. Each round takes a source snapshot from a TEMPORARY logical slot created with an
exported snapshot (`streambed.verify.source`): it holds exactly the transactions whose
commit record lies before the slot's consistent point `seam`, so it is the source at
frontier `target = seam - 1`, the frontier the lake uses (a lake snapshot whose summary
`streambed.lsn` is F holds every change committed at or before F and none after). A
regular REPEATABLE READ snapshot cannot be used: a transaction's commit record is written
before it becomes visible, so no LSN read before or after such a snapshot splits the
transactions the way it does under a concurrent write load.

The lake at the cut. Verify waits (up to `--timeout`) until every table is covered up to
`target`: its frontier in the state store, or the latest watermark (a point where every
table is consistent), is at least `target`. The table is read at its newest snapshot X
with `streambed.lsn <= target` (what `streambed.at_lsn` reads). When no later snapshot
exists, X holds the table at `target` exactly (a table without changes gets no new
snapshot), and every difference is real. When a later snapshot exists, the flush that made
it may hold changes committed between X and `target`: X can lack changes the source
snapshot has, so a difference found there is only a candidate.

Candidates are settled by the next round's cut. Its lake snapshot X' is at or after the
snapshot that followed X (that snapshot existed before the new slot was created, so its
LSN is below the new target), hence after `target`. A keyed row whose source version
(tableoid, xmin, ctid) is the same at both cuts did not change between them, so it is also
the source's row at X'; a difference at X' for it is real. A key that the source lacks at
both cuts is a real difference when the lake holds the same row at both (it could be
explained only by the key being inserted with those values and deleted again twice, once
in each cut's window); a row of a keyless table likewise, counting its copies. A row found
equal at one cut is settled: the lake held it as the source did. Rows still in flight are
compared again at the next cut, up to `ROUNDS` cuts; rows that changed in every cut's
window (a row updated by nearly every transaction) are reported as not proven, never as
different.

The comparison. Rows are split into buckets by the md5 of their key's canonical text (the
whole row's, for a keyless table, which is then compared as a multiset). Both sides
compute, in parallel, each bucket's row count and sum of row hashes: the source in SQL in
its snapshot, the lake by DuckDB over the Iceberg snapshot with the query server's Postgres
text rendering (`streambed.verify.hashing`). Buckets whose sums differ are bisected with
further digits of the hash until small enough, then read row by row on both sides and
matched by key. Each side reads the table O(1) times per level; memory is bounded by the
bucket count (at most 65 536) and the rows of the differing buckets read (at most 64).
"""
