#!/usr/bin/env bash
# Install what streambed's tests and demo need from Debian when it is missing:
# a Postgres 15 server (initdb, pg_ctl, pg_recvlogical) and a Java 17 runtime for Spark.
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
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
