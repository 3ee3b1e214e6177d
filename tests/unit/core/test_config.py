from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from streambed.core.config import (
    Settings,
    example_env,
    redact_url,
    reference_markdown,
    variable_names,
)
from streambed.core.errors import ConfigError, Kind

URL = "postgresql://app:s3cret@db.example:5432/shop"


def test_defaults_need_only_the_source_url() -> None:
    settings = Settings.from_env({"STREAMBED_SOURCE_URL": URL})
    assert settings.publication == "streambed"
    assert settings.slot == "streambed"
    assert settings.flush_rows == 100_000
    assert not settings.on_s3
    assert settings.warehouse_uri == (Path("streambed-data") / "warehouse").resolve().as_uri()
    assert settings.catalog_url.startswith("sqlite:///")
    assert settings.query_host_port == ("127.0.0.1", 5433)


def test_missing_source_url_names_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({})
    assert "STREAMBED_SOURCE_URL is not set" in str(info.value)
    assert info.value.kind is Kind.CONFIG


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"STREAMBED_FLUSH_ROWS": "many"}, "STREAMBED_FLUSH_ROWS='many' is invalid"),
        ({"STREAMBED_FLUSH_ROWS": "0"}, "STREAMBED_FLUSH_ROWS=0 must be a positive number"),
        ({"STREAMBED_FLUSH_INTERVAL": "-1"}, "STREAMBED_FLUSH_INTERVAL=-1.0 must be above 0"),
        (
            {"STREAMBED_SLOT": "Bad-Slot"},
            "STREAMBED_SLOT='Bad-Slot' must be a lowercase identifier",
        ),
        ({"STREAMBED_LOG_FORMAT": "xml"}, "use text or json"),
        ({"STREAMBED_QUERY_LISTEN": "localhost"}, "must be host:port"),
        ({"STREAMBED_METRICS_LISTEN": "127.0.0.1:99999"}, "e.g. 127.0.0.1:9188"),
        ({"STREAMBED_CATALOG_URI": "thrift://x"}, "STREAMBED_CATALOG_URI must be"),
        ({"STREAMBED_S3_BUCKET": "b", "STREAMBED_S3_ACCESS_KEY_ID": "k"}, "set both"),
        ({"STREAMBED_FAILPOINTS": "nonsense"}, "unknown failpoints nonsense"),
        ({"STREAMBED_DATA_DIR": "/srv/lake #2"}, "has '#', which Iceberg's Python library"),
        ({"STREAMBED_DATA_DIR": "/srv/lake?"}, "set STREAMBED_DATA_DIR to a path without"),
        ({"STREAMBED_WAREHOUSE": "/srv/a#b?"}, "'#' and '?'"),
        ({"STREAMBED_WAREHOUSE": "s3://b/x#1"}, "set STREAMBED_WAREHOUSE to a path"),
        (
            {"STREAMBED_S3_BUCKET": "b", "STREAMBED_S3_PREFIX": "lake#1"},
            "set STREAMBED_S3_BUCKET / STREAMBED_S3_PREFIX to a path",
        ),
    ],
)
def test_bad_values_are_named(
    env: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "STREAMBED_FAILPOINTS" in env:
        monkeypatch.setenv("STREAMBED_FAILPOINTS", env.pop("STREAMBED_FAILPOINTS"))
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"STREAMBED_SOURCE_URL": URL, **env})
    assert expected in str(info.value)


def test_errors_never_show_the_password() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"STREAMBED_SOURCE_URL": "mysql://app:s3cret@db/x"})
    assert "s3cret" not in str(info.value)
    assert "app:***@db" in str(info.value)


def test_redact_url() -> None:
    assert redact_url(URL) == "postgresql://app:***@db.example:5432/shop"
    assert redact_url("postgresql://db/x") == "postgresql://db/x"


def test_s3_warehouse() -> None:
    settings = Settings.from_env(
        {
            "STREAMBED_SOURCE_URL": URL,
            "STREAMBED_S3_BUCKET": "lake",
            "STREAMBED_S3_PREFIX": "/prod/",
            "STREAMBED_S3_ACCESS_KEY_ID": "k",
            "STREAMBED_S3_SECRET_ACCESS_KEY": "s",
        }
    )
    assert settings.on_s3
    assert settings.warehouse_uri == "s3://lake/prod"


def test_lists_are_split() -> None:
    settings = Settings.from_env(
        {"STREAMBED_SOURCE_URL": URL, "STREAMBED_INCLUDE_TABLES": "public.a, sales.* ,"}
    )
    assert settings.include_tables == ("public.a", "sales.*")


def test_table_patterns_keep_commas_in_quotes_and_a_malformed_one_is_refused() -> None:
    settings = Settings.from_env(
        {"STREAMBED_SOURCE_URL": URL, "STREAMBED_EXCLUDE_TABLES": 'public."a,b", "x.y".*'}
    )
    assert settings.exclude_tables == ('public."a,b"', '"x.y".*')
    for raw, problem in [('public."a,b', "open"), ('"orders"', "is not schema.table")]:
        with pytest.raises(ConfigError, match=f"STREAMBED_INCLUDE_TABLES: .*{problem}"):
            Settings.from_env({"STREAMBED_SOURCE_URL": URL, "STREAMBED_INCLUDE_TABLES": raw})


def test_reference_lists_every_variable_and_the_checked_in_copy_is_current() -> None:
    text = reference_markdown()
    for name in ("STREAMBED_SOURCE_URL", "STREAMBED_FLUSH_BYTES", "STREAMBED_S3_ENDPOINT"):
        assert f"`{name}`" in text
    checked_in = Path(__file__).parents[3] / "docs" / "configuration.md"
    assert checked_in.read_text() == text, "run `make docs` to regenerate docs/configuration.md"


def test_example_env_is_current_and_its_defaults_are_the_settings_defaults() -> None:
    text = example_env()
    checked_in = Path(__file__).parents[3] / "config" / "streambed.env"
    assert checked_in.read_text() == text, "run `make docs` to regenerate config/streambed.env"
    environ: dict[str, str] = {}
    for line in text.splitlines():
        assignment = line.removeprefix("#")
        name, sep, value = assignment.partition("=")
        if sep and name.startswith("STREAMBED_"):
            environ[name] = value
    assert len(environ) == len(dataclasses.fields(Settings))
    from_file = Settings.from_env(environ)
    defaults = Settings.from_env({"STREAMBED_SOURCE_URL": environ["STREAMBED_SOURCE_URL"]})
    assert from_file == defaults


@pytest.mark.parametrize("listen", ["0.0.0.0:5433", "10.1.2.3:5433", "[::]:5433"])
def test_listening_beyond_loopback_needs_passwords(listen: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"STREAMBED_SOURCE_URL": URL, "STREAMBED_QUERY_LISTEN": listen})
    assert "STREAMBED_QUERY_USERS" in str(caught.value)
    settings = Settings.from_env(
        {
            "STREAMBED_SOURCE_URL": URL,
            "STREAMBED_QUERY_LISTEN": listen,
            "STREAMBED_QUERY_USERS": "analyst:secret",
        }
    )
    assert settings.query_listen == listen


@pytest.mark.parametrize("listen", ["127.0.0.1:5433", "localhost:5433", "[::1]:5433", ":5433"])
def test_loopback_without_passwords_is_allowed(listen: str) -> None:
    assert (
        Settings.from_env(
            {"STREAMBED_SOURCE_URL": URL, "STREAMBED_QUERY_LISTEN": listen}
        ).query_listen
        == listen
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql://db/x?password=pw&sslmode=require",
            "postgresql://db/x?password=***&sslmode=require",
        ),
        ("host=db password='a b' user=x", "host=db password=*** user=x"),
        ("host=db password=pw user=x", "host=db password=*** user=x"),
    ],
)
def test_redact_url_query_and_conninfo(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_an_empty_string_setting_is_kept_and_turns_the_query_server_off() -> None:
    settings = Settings.from_env({"STREAMBED_SOURCE_URL": URL, "STREAMBED_QUERY_LISTEN": ""})
    assert settings.query_host_port is None
    settings = Settings.from_env({"STREAMBED_SOURCE_URL": URL, "STREAMBED_FLUSH_ROWS": ""})
    assert settings.flush_rows == 100_000


def test_the_metrics_endpoint_is_on_loopback_by_default_and_empty_turns_it_off() -> None:
    assert Settings.from_env({"STREAMBED_SOURCE_URL": URL}).metrics_host_port == (
        "127.0.0.1",
        9188,
    )
    off = Settings.from_env({"STREAMBED_SOURCE_URL": URL, "STREAMBED_METRICS_LISTEN": ""})
    assert off.metrics_host_port is None


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("STREAMBED_S3_BUCKT", "did you mean STREAMBED_S3_BUCKET?"),
        (
            "STREAMBED_QUERY_PORT",
            "the STREAMBED_QUERY_* variables are STREAMBED_QUERY_AUTH_TIMEOUT, "
            "STREAMBED_QUERY_LISTEN",
        ),
        ("STREAMBED_NONSENSE", "is not a streambed variable (docs/configuration.md"),
    ],
)
def test_unknown_variables_stop_the_start(name: str, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"STREAMBED_SOURCE_URL": URL, name: "x"})
    message = str(info.value)
    assert f"{name} is not a streambed variable" in message
    assert hint in message
    assert "correct its name or unset it" in message
    assert info.value.kind is Kind.CONFIG


def test_variables_read_outside_the_settings_are_known() -> None:
    env = {
        "STREAMBED_SOURCE_URL": URL,
        "STREAMBED_PSQL": "",
        "STREAMBED_PASSWORD": "x",
        "OTHER_VARIABLE": "y",  # not streambed's
    }
    assert Settings.from_env(env).source_url == URL


def test_every_name_the_code_reads_is_known() -> None:
    """The variables named in streambed's own code are settings or `OTHER_VARIABLES`: a
    variable read somewhere new without being added would stop every start."""
    known = set(variable_names())
    package = Path(__file__).parents[3] / "streambed"
    read = set()
    for path in package.rglob("*.py"):
        read |= set(re.findall(r"\bSTREAMBED_[A-Z0-9]+(?:_[A-Z0-9]+)*\b", path.read_text()))
    assert read - {"STREAMBED_VERSION"} <= known
    assert "STREAMBED_PSQL" in read  # the scan finds names read outside the settings
