"""The settings' building blocks: ConfigError, `setting()` with its help text, and sizes and durations (`2GiB`, `30s`)."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import field
from fractions import Fraction
from typing import Any


class ConfigError(ValueError):
    """A setting is missing, malformed or inconsistent; the message names it."""


_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gib": 1024**3,
    "t": 1000**4, "tb": 1000**4, "tib": 1024**4,
}
_DURATION_UNITS = {"ms": 0.001, "s": 1, "": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def setting(default: Any = dataclasses.MISSING, help: str = "", *, secret: bool = False) -> Any:
    """A settings field with its help text; `secret` hides it from repr.

    gateway.configdoc renders the help texts into docs/configuration.md.
    """
    return field(default=default, repr=not secret, metadata={"help": help})


def parse_size(value: int | str, name: str = "size") -> int:
    """`2GiB`, `512 MiB`, `1000000` -> bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ConfigError(f"{name}: not a size: {value!r} (try 512MiB or 2GiB)")
    if len(match.group(1)) > 64:  # Fraction() of more than 4300 digits raises ValueError
        raise ConfigError(f"{name}: not a size: {str(value)[:80]!r}... (too many digits)")
    # Exact for any size: Fraction, not float (a float loses bytes above 2**53).
    return int(Fraction(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def parse_duration(value: int | float | str, name: str = "duration") -> float:
    """`30s`, `5m`, `250ms`, `2` -> seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _DURATION_UNITS:
        raise ConfigError(f"{name}: not a duration: {value!r} (try 30s, 5m or 250ms)")
    seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]
    if not math.isfinite(seconds):  # float() of 309 digits or more is inf
        raise ConfigError(f"{name}: not a duration: {str(value)[:80]!r}... (too large)")
    return seconds
