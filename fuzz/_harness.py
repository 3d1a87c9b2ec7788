"""Shared pieces of the atheris harnesses in fuzz/: the input layout, the error contract, running.

Input layout of every target: the text to parse comes first, a few control bytes last.
Controls are read with `Controls.pick(n)` (FuzzedDataProvider.ConsumeIntInRange(0, n), one
byte each, n <= 255, taken from the END of the input), the text with `Controls.rest()`
(the bytes that are left, from the front). So a seed file is `text + reversed(controls)`
(`seed()` below), and what libFuzzer mutates is mostly real S3 syntax.

This module imports no gateway code: each harness imports the gateway inside
`atheris.instrument_imports()`, which only instruments modules imported after it.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import atheris

CORPUS = Path(__file__).resolve().parent / "corpus"


class Finding(AssertionError):
    """A broken contract: an unexpected exception type, a 5xx S3Error, or a violated invariant."""


class Controls:
    """Control values from the end of the input, the text from its front."""

    def __init__(self, data: bytes) -> None:
        self._fdp = atheris.FuzzedDataProvider(data)

    def pick(self, n: int) -> int:
        """0..n from one byte (0 once the input is used up)."""
        assert 0 < n <= 255
        return self._fdp.ConsumeIntInRange(0, n)

    def flag(self) -> bool:
        return self.pick(1) == 1

    def rest(self) -> bytes:
        return self._fdp.ConsumeBytes(self._fdp.remaining_bytes())


def seed(text: bytes | str, *controls: int) -> bytes:
    """A corpus entry for a harness that reads `controls` (in this order) and then the text."""
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogateescape")
    return text + bytes(reversed(controls))


def client_error(exc: BaseException, *, allow: tuple[str, ...] = ()) -> None:
    """The S3 front end's contract for malformed input: an S3Error with a status below 500
    (`allow` names codes S3 itself answers with a 5xx, such as NotImplemented)."""
    from gateway.errors import S3Error

    if not isinstance(exc, S3Error):
        raise Finding(f"{type(exc).__name__} instead of an S3Error: {exc!r}") from exc
    if exc.status >= 500 and exc.code not in allow:
        raise Finding(f"a {exc.status} for client input: {exc!r}") from exc
    if exc.status < 300 and exc.status != 0:
        raise Finding(f"an error with a success status: {exc!r}") from exc


def check(condition: bool, message: str | Callable[[], str]) -> None:
    if not condition:
        raise Finding(message() if callable(message) else message)


def write_corpus(target: str, seeds: dict[str, bytes]) -> None:
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in seeds.items():
        (folder / name).write_bytes(data)


def main(target: str, test_one_input: Callable[[bytes], None], seeds: Callable[[], dict[str, bytes]],
         defaults: tuple[str, ...] = ()) -> None:
    """`python fuzz/fuzz_<target>.py [libFuzzer flags] [corpus dirs]`; `--write-corpus` (re)writes
    fuzz/corpus/<target>/ from the harness's seeds. With no corpus dir given, libFuzzer reads
    the seed folder and keeps the inputs it finds in a fresh temporary folder (it writes new
    inputs into the first folder it is given), so a run never edits the checkout. `defaults` are
    libFuzzer flags the target wants unless the command line sets them."""
    if "--write-corpus" in sys.argv:
        write_corpus(target, seeds())
        return
    args = list(sys.argv)
    given = {a.partition("=")[0] for a in args[1:]}
    args[1:1] = [flag for flag in defaults if flag.partition("=")[0] not in given]
    if not any(not a.startswith("-") for a in args[1:]):
        args += [tempfile.mkdtemp(prefix=f"fuzz-{target}-"), str(CORPUS / target)]
    atheris.Setup(args, test_one_input)
    atheris.Fuzz()
