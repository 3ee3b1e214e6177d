"""streambed: an exact, continuous Iceberg copy of a PostgreSQL database, served over PG wire."""

__version__ = "0.1.0"
