"""Spark: the session and its launch, the sockets its workers use, and the Parquet data source."""
