"""Hive-style partition filters (`dt>=2026-12-01`, `region in (eu,us)`) over the `key=value/`
segments of a file's path, or over the partition values a table format records for it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from gateway.errors import S3Error

_FILTER = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(<=|>=|!=|=|<|>|\s+in\s+)\s*(.*?)\s*$", re.IGNORECASE)
OPERATORS = ("=", "!=", "<", "<=", ">", ">=", "in")


@dataclass(frozen=True, slots=True)
class Filter:
    """One condition on a partition column. Values compare as numbers when both sides are
    numbers, else as strings (ISO dates and times order right as strings)."""

    column: str
    op: str
    values: tuple[str, ...]

    def holds(self, value: str) -> bool:
        if self.op == "in":
            return any(_compare(value, wanted) == 0 for wanted in self.values)
        order = _compare(value, self.values[0])
        return {"=": order == 0, "!=": order != 0, "<": order < 0, "<=": order <= 0,
                ">": order > 0, ">=": order >= 0}[self.op]

    def __str__(self) -> str:
        if self.op == "in":
            return f"{self.column} in ({','.join(self.values)})"
        return f"{self.column}{self.op}{self.values[0]}"


def parse_filter(text: str) -> Filter:
    """`col=v`, `col!=v`, `col<v`, `col<=v`, `col>v`, `col>=v` or `col in (v1,v2)`; raises
    S3Error InvalidArgument saying what is wrong."""
    match = _FILTER.match(text)
    if match is None or not match.group(3):
        raise S3Error("InvalidArgument", f"partition filter {text!r}: write COLUMN=VALUE, COLUMN<VALUE, "
                                         "COLUMN<=VALUE, COLUMN>VALUE, COLUMN>=VALUE or COLUMN in (V1,V2)")
    column, op, raw = match.group(1), match.group(2).strip().lower(), match.group(3)
    if op == "in":
        if not (raw.startswith("(") and raw.endswith(")")):
            raise S3Error("InvalidArgument", f"partition filter {text!r}: `in` takes a list in parentheses: (V1,V2)")
        values = tuple(value.strip().strip("'\"") for value in raw[1:-1].split(",") if value.strip())
        if not values:
            raise S3Error("InvalidArgument", f"partition filter {text!r}: `in` takes at least one value")
        return Filter(column, op, values)
    return Filter(column, op, (raw.strip("'\""),))


def parse_filters(texts: Iterable[str]) -> tuple[Filter, ...]:
    return tuple(parse_filter(text) for text in texts)


def path_partitions(path: str) -> dict[str, str]:
    """The `key=value` segments of a path (values unescaped as Hive escapes them), the last
    segment (the file's name) left out."""
    found: dict[str, str] = {}
    for segment in path.split("/")[:-1]:
        name, sep, value = segment.partition("=")
        if sep and name:
            found[unquote(name)] = unquote(value)
    return found


def matches(filters: Iterable[Filter], path: str, recorded: Mapping[str, object] | None = None) -> bool:
    """Whether every filter holds for the file at `path`. A column is looked up in the
    partition values the table recorded for the file (`recorded`), else in the path's
    `key=value` segments; a file without the column does not match (a null partition value
    matches no comparison, as in SQL)."""
    filters = tuple(filters)
    if not filters:
        return True
    values = path_partitions(path)
    if recorded:
        values.update({name: str(value) for name, value in recorded.items() if value is not None})
        for name, value in recorded.items():
            if value is None:
                values.pop(name, None)
    for condition in filters:
        value = values.get(condition.column)
        if value is None or value == "__HIVE_DEFAULT_PARTITION__" or not condition.holds(value):
            return False
    return True


def _compare(left: str, right: str) -> int:
    try:
        a, b = float(left), float(right)
    except ValueError:
        return (left > right) - (left < right)
    return (a > b) - (a < b)
