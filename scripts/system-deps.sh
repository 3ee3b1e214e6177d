#!/usr/bin/env bash
# Install what streambed's tests and demo need from Debian when it is missing:
# a Postgres 15 server (initdb, pg_ctl, pg_recvlogical), a Java 17 runtime for Spark, and the
# clients the compatibility tests drive (pgjdbc, psqlODBC through unixODBC), and Prometheus for
# the metrics test (which runs its own instance: the package's service is never started).
set -euo pipefail
need=()
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need+=(postgresql postgresql-client)
fi
if ! command -v java >/dev/null 2>&1; then
  need+=(openjdk-17-jre-headless)
fi
if ! command -v psql >/dev/null 2>&1; then
  need+=(postgresql-client)
fi
if [ ! -e /usr/share/java/postgresql.jar ] || ! command -v javac >/dev/null 2>&1; then
  need+=(libpostgresql-jdbc-java openjdk-17-jdk-headless)  # pgjdbc probe in tests/integration/wire
fi
if [ ! -e /usr/lib/x86_64-linux-gnu/odbc/psqlodbcw.so ] && ! ls /usr/lib/*/odbc/psqlodbcw.so >/dev/null 2>&1; then
  need+=(odbc-postgresql)  # psqlODBC probe in tests/integration/clients
fi
if ! command -v odbcinst >/dev/null 2>&1 || [ ! -e /usr/include/sql.h ]; then
  need+=(unixodbc unixodbc-dev)  # the ODBC driver manager; headers for building pyodbc
fi
if ! command -v prometheus >/dev/null 2>&1; then
  need+=(prometheus)  # a real scrape in tests/integration/metrics
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # No package's service may start (prometheus's would listen on :9090 and :9100): without a
  # policy of the machine's own, one that denies every start, for the install only.
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    trap '$SUDO rm -f "$policy"' EXIT
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true
  fi
fi
