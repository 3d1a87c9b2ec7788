"""Fuzz target `config`: the size and duration parsers of the settings (gateway/config/units.py
parse_size, parse_duration), which read `2GiB` and `30s` from TOML and GATEWAY_* variables.

Text: the value, UTF-8. Contract: a size is an int >= 0, a duration a finite float >= 0,
and anything else is ConfigError naming the setting; never another exception.
"""

from __future__ import annotations

import math
import sys

import atheris
from _harness import Controls, Finding, check, main, seed

with atheris.instrument_imports(include=["gateway.config"]):
    from gateway.config import ConfigError, parse_duration, parse_size


def test_one_input(data: bytes) -> None:
    ctl = Controls(data)
    which = ctl.pick(1)
    text = ctl.rest().decode("utf-8", "replace")
    try:
        if which == 0:
            value = parse_size(text, "cache.memory_size")
            check(isinstance(value, int) and value >= 0, f"size {value!r} from {text!r}")
        else:
            seconds = parse_duration(text, "server.head_timeout")
            check(isinstance(seconds, float) and math.isfinite(seconds) and seconds >= 0,
                  f"duration {seconds!r} from {text[:80]!r}")
    except ConfigError as exc:
        check(("cache.memory_size" if which == 0 else "server.head_timeout") in str(exc), f"{exc} names no setting")
    except Exception as exc:
        if isinstance(exc, Finding):
            raise
        raise Finding(f"{type(exc).__name__} instead of ConfigError: {exc!r}") from exc


def seeds() -> dict[str, bytes]:
    return {f"size-{i}": seed(v, 0) for i, v in enumerate(["2GiB", "512 MiB", "1000000", "1.5tb", " 64k "])} | {
        f"duration-{i}": seed(v, 1) for i, v in enumerate(["30s", "5m", "250ms", "2", "1.5h", "7d"])}


if __name__ == "__main__":
    # Longer than libFuzzer's default 4096 bytes: Python's int() limit is 4300 digits.
    main("config", test_one_input, seeds, defaults=("-max_len=8192",))
    sys.exit(0)
