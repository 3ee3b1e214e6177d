"""The `streambed` command. Only this module turns errors into exit codes and messages."""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from collections.abc import Sequence

from streambed import __version__
from streambed.core.config import Settings
from streambed.core.errors import (
    EXIT_FATAL,
    EXIT_INTERRUPTED,
    EXIT_MANUAL,
    EXIT_OK,
    StreambedError,
    exit_code,
)
from streambed.core.log import setup

logger = logging.getLogger("streambed")

EPILOG = """exit codes:
  0    stopped cleanly (SIGINT/SIGTERM: committed changes flushed and acknowledged)
  1    internal error or corrupt input (a bug: report it)
  2    configuration error (the message names the variable and the fix)
  3    the source, lake or state needs an operator (the message says what to do);
       `verify`: a table differs
  130  interrupted before start-up finished

Configuration is read from STREAMBED_* environment variables; see docs/configuration.md."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streambed",
        description="Keep an Iceberg copy of a Postgres database and serve it over the "
        "Postgres wire protocol.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"streambed {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "run",
        help="replicate the source into Iceberg and serve the lake on the query port",
        description="Replicate continuously (creating the publication and slot when missing) "
        "and serve the tables over the Postgres wire protocol. SIGINT/SIGTERM flush and exit.",
    )
    commands.add_parser(
        "serve",
        help="serve the lake on the query port without replicating",
        description="Serve the Iceberg tables recorded in the state store over the Postgres "
        "wire protocol, following new commits of a `streambed run` elsewhere.",
    )
    resync = commands.add_parser(
        "resync",
        help="copy tables again from the source, online",
        description="Copy each TABLE again under a fresh snapshot while the other tables "
        "keep streaming. The request is recorded in the state store; a running `streambed "
        "run` starts the copy within seconds, otherwise the next start does. Changes made "
        "to a TABLE during its copy are applied once it commits. A name the source does "
        "not stream is refused, and nothing is requested.",
    )
    resync.add_argument(
        "tables",
        metavar="TABLE",
        nargs="+",
        help='schema-qualified name as SQL writes it: public.orders, "Sales"."Order Items"',
    )
    sweep = commands.add_parser(
        "sweep",
        help="delete data and metadata files no snapshot references (left by crashes, "
        "retried tasks and expired snapshots)",
        description="Delete, in every table's data and metadata directories, the files that "
        "no Iceberg snapshot or metadata still in use references and that are older than "
        "--older-than hours: what a merge or a copy leaves when its process dies before the "
        "commit, a copy task Spark retried, and the manifests of expired snapshots. "
        "Safe while `streambed run` runs: younger files and running copies are kept.",
    )
    sweep.add_argument(
        "--older-than",
        metavar="HOURS",
        type=_hours,
        default=None,
        help="only files modified at least this long ago (default STREAMBED_SWEEP_MIN_AGE, "
        "72; 0 only when no `streambed run` writes to this lake)",
    )
    sweep.add_argument(
        "--dry-run", action="store_true", help="list what would be deleted; delete nothing"
    )
    verify = commands.add_parser(
        "verify",
        help="compare the lake with the source at one LSN, online; exit 3 when they differ",
        description="Take a snapshot of the source at a known LSN, wait until the lake holds "
        "every TABLE (all replicated tables when none is named) up to it, and compare them "
        "through hashes of buckets of keys, then row by row. Prints a line per table, then "
        "each differing table with its first differing keys and the `streambed resync` "
        "that repairs it. Exit 0 when every table is equal, 3 when one differs.",
    )
    verify.add_argument(
        "tables",
        metavar="TABLE",
        nargs="*",
        help='schema-qualified name as SQL writes it: public.orders, "Sales"."Order Items"',
    )
    verify.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=_seconds,
        default=300.0,
        help="how long to wait for the lake to reach the source's LSN (default 300)",
    )
    commands.add_parser(
        "status",
        help="print each table's state and frontier, and the slot's lag",
        description="Print the state store's tables, frontiers and the last watermark.",
    )
    return parser


def _hours(text: str) -> float:
    try:
        hours = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hours") from None
    if not hours >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the age must be 0 hours or more")
    return hours


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the timeout must be above 0 seconds")
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = Settings.from_env()
    except StreambedError as e:
        sys.stderr.write(f"streambed: {e}\n")
        return exit_code(e)
    setup(settings.log_level, settings.log_format)
    # pyspark checks the pandas version when it loads, and pandas 3 (installed beside
    # streambed, e.g. by its dev extras) gets a FutureWarning; streambed passes Arrow to
    # Spark and never uses pandas.
    warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
    try:
        if args.command == "run":
            from streambed.commands.prestart import prestart
            from streambed.core.listen import METRICS, check_listen

            if settings.query_host_port is not None:  # before a slot or Spark is started
                check_listen(*settings.query_host_port)
            if settings.metrics_host_port is not None:
                check_listen(*settings.metrics_host_port, METRICS)
            prestart(settings)  # a start that copies: Spark's JVM starts while the rest loads
        # heavy imports (pyiceberg, Spark) only after the configuration is valid
        if args.command == "run":
            from streambed.commands.run import run

            run(settings)
        elif args.command == "serve":
            from streambed.commands.serve import serve

            serve(settings)
        elif args.command == "resync":
            from streambed.commands.resync import request

            sys.stdout.write(request(settings, args.tables))
        elif args.command == "sweep":
            seconds = None if args.older_than is None else args.older_than * 3600
            from streambed.commands.sweep import sweep

            sweep(settings, seconds, dry_run=args.dry_run, out=sys.stdout)
        elif args.command == "verify":
            from streambed.verify.run import verify

            report = verify(settings, args.tables, args.timeout, sys.stdout)
            sys.stdout.write(report.text())
            if report.differs:
                return EXIT_MANUAL
        else:
            from streambed.commands.status import status

            sys.stdout.write(status(settings))
    except StreambedError as e:
        logger.error("%s", e, extra={"fields": {"kind": e.kind.value, "action": e.policy.value}})
        return exit_code(e)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception:
        logger.exception("internal error")
        return EXIT_FATAL
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
