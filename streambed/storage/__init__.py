"""Where files live: a local directory or an S3 bucket.

`uris` splits a warehouse URI into its scheme and filesystem path (no I/O, no imports
beyond the errors, so the configuration may use it). `s3` is the one mapping from
streambed's S3 settings to what each client takes (pyiceberg's FileIO properties, the
Spark data source's options, DuckDB's secret, boto3), the one pyarrow filesystem factory,
and the only module that imports boto3.
"""
