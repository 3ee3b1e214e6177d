"""pgoutput decode throughput: messages per second on one core.

    .venv/bin/python bench/decode_throughput.py [--messages N] [--repeat R]

Each stream is encoded once up front, then decoded R times with `Decoder.decode`, and R
times as the replication loop does (`Decoder.insert_row` first, which hands an Insert's
row over without building the message); the best run is reported, in messages/s and MB/s
of payload, by CPU time and by wall-clock time.
The shapes are realistic: an orders table of text-format values as Postgres sends them.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Iterator

from streambed.pgoutput.decoder import Decoder, decode
from streambed.pgoutput.encoder import encode
from streambed.pgoutput.messages import (
    UNCHANGED,
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    TupleData,
    Update,
)

ORDERS = 16_385
SMALL = 16_390


def order_row(rng: random.Random, order_id: int) -> TupleData:
    """id int8, customer_id int8, status text, amount numeric, created_at timestamptz, note text."""
    note = None if rng.random() < 0.6 else b"leave at the door, ring twice" * rng.randint(1, 3)
    return (
        str(order_id).encode(),
        str(rng.randint(1, 2_000_000)).encode(),
        rng.choice((b"new", b"paid", b"shipped", b"delivered")),
        f"{rng.randint(1, 99_999)}.{rng.randint(0, 99):02d}".encode(),
        f"2024-05-{rng.randint(1, 31):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
        f"{rng.randint(0, 59):02d}.{rng.randint(0, 999_999):06d}+00".encode(),
        note,
    )


def small_row(rng: random.Random, row_id: int) -> TupleData:
    """The 4-column shape of the throughput target: int8, text, timestamptz, nullable int4."""
    return (
        str(row_id).encode(),
        f"user{rng.randint(1, 99_999)}@example.com".encode(),
        f"2024-05-13 14:21:{rng.randint(0, 59):02d}.{rng.randint(0, 999_999):06d}+00".encode(),
        None if rng.random() < 0.5 else str(rng.randint(0, 1000)).encode(),
    )


def key_only(row: TupleData) -> TupleData:
    return (row[0], *(None,) * (len(row) - 1))


def transactions(
    rng: random.Random, count: int, row_change: Callable[[random.Random, int], Message]
) -> Iterator[Message]:
    """`count` messages: transactions of 1-40 row changes between Begin and Commit."""
    lsn = 0x1_6B37_4D48
    produced = 0
    row_id = 1
    while produced < count:
        size = rng.randint(1, 40)
        yield Begin(lsn + 1000, 769_011_696_123_456, 748_213 + produced)
        for _ in range(size):
            yield row_change(rng, row_id)
            row_id += 1
        yield Commit(0, lsn + 1000, lsn + 1048, 769_011_696_123_456)
        lsn += 2000
        produced += size + 2


def insert_small(rng: random.Random, row_id: int) -> Message:
    return Insert(SMALL, small_row(rng, row_id))


def insert_heavy(rng: random.Random, row_id: int) -> Message:
    roll = rng.random()
    if roll < 0.90:
        return Insert(ORDERS, order_row(rng, row_id))
    if roll < 0.97:
        return Update(ORDERS, order_row(rng, row_id))
    return Delete(ORDERS, key_only(order_row(rng, row_id)), old_is_key_only=True)


def update_heavy(rng: random.Random, row_id: int) -> Message:
    roll = rng.random()
    new = order_row(rng, row_id)
    if roll < 0.70:  # default replica identity, key unchanged
        return Update(ORDERS, (*new[:5], UNCHANGED))
    if roll < 0.85:  # key changed
        return Update(ORDERS, new, key_only(order_row(rng, row_id + 1)), old_is_key_only=True)
    return Update(ORDERS, new, order_row(rng, row_id), old_is_key_only=False)  # identity FULL


def delete_heavy(rng: random.Random, row_id: int) -> Message:
    row = order_row(rng, row_id)
    if rng.random() < 0.8:
        return Delete(ORDERS, key_only(row), old_is_key_only=True)
    return Delete(ORDERS, row, old_is_key_only=False)


def inserts_only(rng: random.Random, count: int) -> Iterator[Message]:
    for row_id in range(count):
        yield insert_small(rng, row_id)


def measure(payloads: list[bytes], repeat: int, rows: bool = False) -> tuple[float, float]:
    """Best wall-clock and best CPU seconds to decode every payload with one `Decoder`;
    with `rows`, the way the pipeline does: `insert_row` first, `decode` when it says None.

    CPU time is the steadier figure on a busy machine: it leaves out the time this process
    waited for a core.
    """
    best_wall = best_cpu = float("inf")
    for _ in range(repeat):
        decoder = Decoder()
        decode, insert_row = decoder.decode, decoder.insert_row
        wall, cpu = time.perf_counter(), time.process_time()
        if rows:
            for payload in payloads:
                if insert_row(payload) is None:
                    decode(payload)
        else:
            for payload in payloads:
                decode(payload)
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    return best_wall, best_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=200_000, help="messages per stream")
    parser.add_argument("--repeat", type=int, default=5, help="runs per stream; best is kept")
    args = parser.parse_args()
    count: int = args.messages
    repeat: int = args.repeat

    streams: list[tuple[str, Iterator[Message]]] = [
        ("insert only, 4 columns (target >= 400k/s)", inserts_only(random.Random(1), count)),
        (
            "insert-heavy transactions, 6 columns",
            transactions(random.Random(2), count, insert_heavy),
        ),
        (
            "update-heavy transactions, 6 columns",
            transactions(random.Random(3), count, update_heavy),
        ),
        (
            "delete-heavy transactions, 6 columns",
            transactions(random.Random(4), count, delete_heavy),
        ),
    ]
    print(f"pgoutput decode, {count} messages per stream, best of {repeat} runs, one core")
    for name, messages in streams:
        decoded = list(messages)
        payloads = [encode(message, in_stream=False) for message in decoded]
        checked = [decode(payload, in_stream=False) for payload in payloads[:1000]]
        if checked != decoded[:1000]:
            raise SystemExit(f"{name}: decoding does not give the encoded messages back")
        megabytes = sum(map(len, payloads)) / 1e6
        for label, rows in ((name, False), ("  the same, Decoder.insert_row first", True)):
            wall, cpu = measure(payloads, repeat, rows)
            print(
                f"{label:44} {len(payloads) / cpu:>9,.0f} messages/s"
                f" {megabytes / cpu:>6.1f} MB/s (CPU time);"
                f" {len(payloads) / wall:>9,.0f} messages/s (wall clock)"
            )


if __name__ == "__main__":
    main()
