# streambed: `streambed run` in a container.
#   docker build -t streambed .
#   docker run --env-file config/streambed.env -p 5433:5433 -v streambed-data:/data streambed
# The query server listens on all interfaces here, so STREAMBED_QUERY_USERS (or
# STREAMBED_QUERY_USERS_FILE) must be set; streambed refuses to start without passwords otherwise.
# The metrics endpoint (/metrics, /healthz, /readyz; docs/metrics.md) listens on all interfaces
# too, for the scraper and the health checks: publish it (-p 9188:9188) only to those.
FROM python:3.11-slim-bookworm

# Java 17 runs Spark; psql is the initial copy's csv reader, used for wide rows and with
# STREAMBED_COPY_READER=csv (docs/initial-copy.md);
# procps gives Spark's launch scripts `ps`; tini forwards SIGTERM so a stop flushes cleanly.
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless postgresql-client procps tini \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY streambed ./streambed
RUN pip install --no-cache-dir . && rm -rf /src

RUN useradd --create-home --uid 10001 streambed \
    && mkdir /data && chown streambed /data
USER streambed
WORKDIR /data
# State, the embedded catalog and warehouse, and Spark's class archive (data_dir/spark,
# built by the first run; docs/initial-copy.md) live on this volume and survive restarts.
VOLUME /data

ENV STREAMBED_DATA_DIR=/data \
    STREAMBED_QUERY_LISTEN=0.0.0.0:5433 \
    STREAMBED_METRICS_LISTEN=0.0.0.0:9188 \
    PYTHONUNBUFFERED=1
EXPOSE 5433 9188

ENTRYPOINT ["/usr/bin/tini", "--", "streambed"]
CMD ["run"]
