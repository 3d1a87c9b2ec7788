"""multipart/form-data bodies (POST Object): the fields before the file in hand, the file streamed.

S3 takes the form fields that come before the field named `file` (at most MAX_FIELD_BYTES of
them), then the file's content, and ignores whatever follows the file. A field's name is
case-insensitive; a name given twice is refused, so every check and the upload read the same
value. The file's bytes are handed on as they arrive, never held whole here; a body that ends
before the file's closing boundary is refused, so a cut upload is never taken for a whole one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from gateway.errors import S3Error

MAX_FIELD_BYTES = 20 * 1024  # the form's bytes before the file (and, apart, after it), as S3 bounds them
_MAX_BOUNDARY = 70  # RFC 2046


def _malformed(detail: str) -> S3Error:
    return S3Error("MalformedPOSTRequest", f"The body of your POST request is not well-formed multipart/form-data: {detail}.")


def boundary_of(content_type: str) -> bytes:
    """The boundary a multipart/form-data Content-Type names (quoted or not)."""
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        raise _malformed("the Content-Type is not multipart/form-data")
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.strip().lower() != "boundary":
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        if 0 < len(value) <= _MAX_BOUNDARY and value.isascii() and value.isprintable():
            return value.encode("ascii")
        break
    raise _malformed("no usable boundary in the Content-Type")


@dataclass(frozen=True, slots=True)
class FilePart:
    """The part named `file`: its filename (None: not given) and Content-Type (None: not given)."""

    filename: str | None
    content_type: str | None


class FormReader:
    """Reads one form from the body's chunks: `fields()`, then `file_chunks()`, then `finish()`."""

    def __init__(self, chunks: AsyncIterator[bytes], boundary: bytes) -> None:
        self._chunks = chunks
        self._delimiter = b"\r\n--" + boundary
        # A CRLF in front lets the first boundary, at the very start of the body, match the delimiter.
        self._buffer = bytearray(b"\r\n")
        self._budget = MAX_FIELD_BYTES

    async def fields(self) -> tuple[dict[str, str], FilePart | None]:
        """The fields before the file, by lower-cased name, and the file part (None: the form
        has none); the reader then stands at the file's first byte."""
        fields: dict[str, str] = {}
        await self._until(self._delimiter)  # the preamble
        while await self._next_part():
            name, filename, content_type = _disposition(await self._until(b"\r\n\r\n"))
            if name == "file":
                return fields, FilePart(filename, content_type)
            value = await self._until(self._delimiter)
            if name in fields:
                raise S3Error("InvalidArgument", "A form field was given more than once.",
                              extra={"ArgumentName": name[:64]})
            fields[name] = _text(value, name)
        return fields, None

    async def file_chunks(self) -> AsyncIterator[bytes]:
        """The file's content, piece by piece as it arrives, up to its closing boundary."""
        delimiter, buffer = self._delimiter, self._buffer
        keep = len(delimiter) - 1  # bytes that may be the start of a delimiter split across chunks
        while True:
            found = buffer.find(delimiter)
            if found >= 0:
                if found:
                    yield bytes(buffer[:found])
                del buffer[:found + len(delimiter)]
                return
            if len(buffer) > keep:
                piece = bytes(buffer[:-keep])
                del buffer[:-keep]
                yield piece
            if not await self._more():
                raise _malformed("the body ended inside the file")

    async def finish(self) -> None:
        """Read the parts after the file, and any epilogue, to the end of the body (S3 ignores
        them), within the same bound as the fields before it."""
        self._budget = MAX_FIELD_BYTES
        while await self._next_part():
            await self._until(self._delimiter)
        while await self._more():
            self._budget -= len(self._buffer)
            self._buffer.clear()
            if self._budget < 0:
                raise _too_large()

    async def _next_part(self) -> bool:
        """After a delimiter: True when a part follows, False at the final boundary."""
        while len(self._buffer) < 2:
            if not await self._more():
                raise _malformed("the body ended after a boundary")
        if self._buffer[:2] == b"--":
            self._buffer.clear()  # the epilogue (finish reads the rest of it)
            return False
        line = await self._until(b"\r\n")
        if line.strip(b" \t"):
            raise _malformed("a boundary line carries more than the boundary")
        return True

    async def _until(self, marker: bytes) -> bytes:
        """The bytes before `marker` (consumed with it), counted against the field budget."""
        start = 0
        while True:
            found = self._buffer.find(marker, start)
            used = found + len(marker) if found >= 0 else len(self._buffer) - len(marker) + 1
            if used > self._budget:
                raise _too_large()
            if found >= 0:
                self._budget -= used
                data = bytes(self._buffer[:found])
                del self._buffer[:used]
                return data
            start = max(0, used)
            if not await self._more():
                raise _malformed("the body ended inside the form")

    async def _more(self) -> bool:
        async for chunk in self._chunks:
            if chunk:
                self._buffer += chunk
                return True
        return False


def _too_large() -> S3Error:
    return S3Error("MaxPostPreDataLengthExceeded", extra={"MaxPostPreDataLengthExceeded": str(MAX_FIELD_BYTES)})


def _text(value: bytes, name: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise S3Error("InvalidArgument", "A form field is not valid UTF-8.", extra={"ArgumentName": name[:64]}) from None


def _disposition(head: bytes) -> tuple[str, str | None, str | None]:
    """(lower-cased field name, filename, Content-Type) from a part's header lines."""
    name = filename = content_type = None
    for line in _text(head, "part header").split("\r\n"):
        header, sep, value = line.partition(":")
        if not sep:
            raise _malformed("a part header line has no colon")
        header = header.strip().lower()
        if header == "content-disposition":
            kind, params = _parameters(value)
            if kind != "form-data":
                raise _malformed("a part is not form-data")
            name, filename = params.get("name"), params.get("filename")
        elif header == "content-type":
            content_type = value.strip()
    if name is None:
        raise _malformed("a part has no field name")
    return name.lower(), filename, content_type


def _parameters(value: str) -> tuple[str, dict[str, str]]:
    """`form-data; name="a"; filename="b"`: the kind (lower-cased) and its parameters (names
    lower-cased; quoted values unescaped)."""
    kind, _, rest = value.partition(";")
    params: dict[str, str] = {}
    i, n = 0, len(rest)
    while i < n:
        while i < n and rest[i] in " \t;":
            i += 1
        eq = rest.find("=", i)
        if eq < 0:
            break
        pname = rest[i:eq].strip().lower()
        i = eq + 1
        while i < n and rest[i] in " \t":
            i += 1
        if i < n and rest[i] == '"':
            chars: list[str] = []
            i += 1
            while i < n and rest[i] != '"':
                if rest[i] == "\\" and i + 1 < n:
                    i += 1
                chars.append(rest[i])
                i += 1
            if i >= n:
                raise _malformed("a quoted parameter is not closed")
            i += 1
            pvalue = "".join(chars)
        else:
            end = rest.find(";", i)
            end = n if end < 0 else end
            pvalue, i = rest[i:end].strip(), end
        params.setdefault(pname, pvalue)
    return kind.strip().lower(), params
