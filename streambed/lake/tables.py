"""Iceberg tables made from source relations.

A lake table is `<source schema>.<source table>` in the catalog. Its key columns are
required, sorted on, recorded as Iceberg identifier fields (when the spec allows: not
float/double) and in the `streambed.key` property, and get full (untruncated) column
metrics so per-file key bounds are exact.

Every lake table also gets `METADATA_PROPERTIES`: each commit writes a new metadata file,
and without them a table that commits at every flush kept every one of them (one per
`STREAMBED_FLUSH_INTERVAL`, each holding the whole snapshot list: gigabytes a day).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Mapping
from typing import Final

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, FloatType, NestedField

from streambed.buffer.changes import TableKey
from streambed.core.errors import SchemaError
from streambed.lake.locations import check_addressable, folded, separate, table_location
from streambed.lake.types import column_type
from streambed.pgoutput.messages import Relation

PROP_KEY: Final = "streambed.key"  # JSON list of key column names, in key order
PROP_RELATION_ID: Final = "streambed.source-relation-id"
PROP_SOURCE: Final = "streambed.source"  # "schema.table" in the source database
PROP_FULL_ROW: Final = "streambed.full-row-identity"  # "true" for REPLICA IDENTITY FULL keyless
FIELD_ID: Final = b"PARQUET:field_id"

logger = logging.getLogger("streambed.lake")
METADATA_VERSIONS: Final = 100
"""Metadata files a table keeps (Iceberg's default log length): older ones are deleted by
the commit that makes them fall off the table's metadata log (pyiceberg, as Iceberg's Java
library does). The query server reads the metadata of the latest watermark, a few commits
old at most; `streambed sweep` removes what a failed delete left."""
METADATA_PROPERTIES: Final = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": str(METADATA_VERSIONS),
}


def table_identifier(relation: Relation) -> tuple[str, str]:
    return (relation.namespace, relation.name)


def iceberg_schema(relation: Relation, key: TableKey) -> Schema:
    """The Iceberg schema of a relation; field ids 1..n in column order."""
    key_set = set(key.columns)
    fields = [
        NestedField(
            field_id=i + 1,
            name=c.name,
            field_type=column_type(c).iceberg,
            required=i in key_set,
        )
        for i, c in enumerate(relation.columns)
    ]
    identifier = [i + 1 for i in key.columns]
    if any(isinstance(fields[i].field_type, FloatType | DoubleType) for i in key.columns):
        identifier = []  # the Iceberg spec forbids float identifier fields; streambed.key has it
    return Schema(*fields, identifier_field_ids=identifier)


def ensure_table(
    catalog: Catalog, relation: Relation, key: TableKey, extra: Mapping[str, str] | None = None
) -> Table:
    """The lake table of a relation, created with its namespace when missing (with the
    properties `extra` too: a new table's first metadata holds them, no second commit).

    An existing table must have the same columns (names and types) and key; otherwise
    SchemaError (schema evolution is not supported yet).
    """
    identifier = table_identifier(relation)
    schema = iceberg_schema(relation, key)
    key_names = [relation.columns[i].name for i in key.columns]
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        properties = {
            PROP_KEY: json.dumps(key_names),
            PROP_RELATION_ID: str(relation.relation_id),
            PROP_SOURCE: f"{relation.namespace}.{relation.name}",
            PROP_FULL_ROW: "true" if key.full_row and not key.columns else "false",
            **METADATA_PROPERTIES,
            **(extra or {}),
        }
        for name in key_names:
            properties[f"write.metadata.metrics.column.{name}"] = "full"
        sort_order = SortOrder(
            *(SortField(source_id=i + 1, transform=IdentityTransform()) for i in key.columns)
        )
        create = functools.partial(
            catalog.create_table,
            identifier,
            schema=schema,
            location=_location(catalog, relation),
            sort_order=sort_order,
            properties=properties,
        )
        try:
            try:
                table = create()
            except NoSuchNamespaceError:  # the schema's first table: one query fewer for the rest
                with contextlib.suppress(NamespaceAlreadyExistsError):
                    catalog.create_namespace(relation.namespace)
                table = create()
            check_addressable(table.location(), f"{relation.namespace}.{relation.name}")
            return table
        except TableAlreadyExistsError:
            table = catalog.load_table(identifier)
    check_addressable(table.location(), f"{relation.namespace}.{relation.name}")
    _check_matches(table, schema, key_names, relation)
    return with_metadata_properties(table)


def _location(catalog: Catalog, relation: Relation) -> str | None:
    """Where the embedded catalog puts a new table (`streambed.lake.locations`); None for a
    REST catalog, which places its tables itself."""
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = catalog.properties.get("warehouse")
    if not isinstance(catalog, SqlCatalog) or not warehouse:
        return None
    location = table_location(warehouse, relation.namespace, relation.name)
    return separate(location, lambda: _alike(catalog, warehouse, relation))


def _alike(catalog: Catalog, warehouse: str, relation: Relation) -> list[str]:
    """The locations of the catalog's other tables whose schema and name `folded` does not
    tell from `relation`'s (a case-insensitive filesystem would give them one directory).
    One whose metadata cannot be read counts as where streambed places it."""
    schema, name = folded(relation.namespace), folded(relation.name)
    locations = []
    for namespace in catalog.list_namespaces():
        if len(namespace) != 1 or folded(namespace[0]) != schema:
            continue
        for identifier in catalog.list_tables(namespace):
            if identifier == (relation.namespace, relation.name) or folded(identifier[-1]) != name:
                continue
            try:
                locations.append(catalog.load_table(identifier).location())
            except NoSuchTableError:  # dropped meanwhile
                continue
            except OSError:
                locations.append(table_location(warehouse, namespace[0], identifier[-1]))
    return locations


def with_metadata_properties(table: Table) -> Table:
    """`table` with each of `METADATA_PROPERTIES` it lacks set (tables created before they
    were; a value set otherwise is kept). Best effort: a failed commit is logged and tried
    again the next time the table is opened."""
    missing = {k: v for k, v in METADATA_PROPERTIES.items() if k not in table.properties}
    if not missing:
        return table
    try:
        with table.transaction() as tx:
            tx.set_properties(missing)
    except (CommitFailedException, OSError) as e:
        logger.warning(
            "cannot set %s on lake table %s (tried again at its next start): %s",
            ", ".join(sorted(missing)),
            ".".join(table.name()),
            " ".join(str(e).split()),
        )
    return table


def _check_matches(
    table: Table, expected: Schema, key_names: list[str], relation: Relation
) -> None:
    name = f"{relation.namespace}.{relation.name}"
    actual = {f.name: f.field_type for f in table.schema().fields}
    wanted = {f.name: f.field_type for f in expected.fields}
    problems = []
    for column in wanted.keys() - actual.keys():
        problems.append(f"column {column!r} is new in the source")
    for column in actual.keys() - wanted.keys():
        problems.append(f"column {column!r} is gone from the source")
    for column in wanted.keys() & actual.keys():
        if wanted[column] != actual[column]:
            problems.append(
                f"column {column!r} is {actual[column]} in the lake but {wanted[column]} now"
            )
    if list(key_columns(table)) != key_names:
        problems.append(f"the key is {key_columns(table)} in the lake but {key_names} now")
    if problems:
        raise SchemaError(
            f"{name}: the source table no longer matches lake table {name}: "
            + "; ".join(sorted(problems))
            + ". Schema changes are not supported yet: drop the lake table to copy it again, "
            "or leave the table out with STREAMBED_EXCLUDE_TABLES"
        )


def key_columns(table: Table) -> tuple[str, ...]:
    """Names of the key columns in key order (empty for a keyless table)."""
    raw = table.properties.get(PROP_KEY)
    if raw is not None:
        names = json.loads(raw)
        return tuple(str(n) for n in names)
    schema = table.schema()
    return tuple(schema.find_column_name(i) or "" for i in schema.identifier_field_ids)


def arrow_schema(table: Table) -> pa.Schema:
    """The Arrow schema of the table with `PARQUET:field_id` on every field.

    Key (required) columns are non-nullable. Strings and binaries are the 32-bit-offset
    Arrow types (what Spark produces), not pyiceberg's large types.
    """
    return arrow_schema_of_schema(table.schema())


def arrow_schema_of_schema(schema: Schema) -> pa.Schema:
    """`arrow_schema` of an Iceberg schema."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    fields = []
    for field in schema_to_pyarrow(schema, include_field_ids=True):
        type_ = field.type
        if pa.types.is_large_string(type_):
            type_ = pa.string()
        elif pa.types.is_large_binary(type_):
            type_ = pa.binary()
        fields.append(pa.field(field.name, type_, field.nullable, field.metadata))
    return pa.schema(fields)
