"""Fixtures shared by the whole suite. Each real server lives in its own plugin module."""

pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.s3",
    "tests.fixtures.spark",
]
