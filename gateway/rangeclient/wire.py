"""HTTP/1.1 answers as a client reads them: the status line and headers, how the body is
framed (Content-Length, chunked, or until the connection closes), and chunked bodies decoded
as their bytes arrive (RFC 9112). Pure functions and a decoder, no I/O (the connection
does that)."""

from __future__ import annotations

__all__ = ["MAX_HEAD", "ChunkedDecoder", "MalformedAnswer", "body_framing", "parse_head"]

MAX_HEAD = 64 * 1024  # an answer's status line and headers, and a chunk line or trailer section, at most
_NO_BODY = (204, 304)


class MalformedAnswer(ConnectionError):
    """The server's answer is not HTTP/1.1 this client can read: the connection is dropped."""


def parse_head(head: bytes) -> tuple[int, list[tuple[str, str]], bool]:
    """(status, header items with lower-cased names and latin-1 values, HTTP/1.0) of an
    answer's head (without the blank line that ends it); MalformedAnswer if it is not one."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or len(parts[0]) != 8 \
            or len(parts[1]) != 3 or not parts[1].isdigit():
        raise MalformedAnswer(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    items: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or b" " in name or b"\t" in name:
            raise MalformedAnswer(f"not a header line: {line[:80]!r}")
        items.append((name.decode("latin-1").lower(), value.strip(b" \t").decode("latin-1")))
    return int(parts[1]), items, parts[0] == b"HTTP/1.0"


def body_framing(status: int, items: list[tuple[str, str]]) -> tuple[int | None, bool]:
    """(the body's length, chunked) of an answer: (0, False) when it has none, (None, False)
    when it ends with the connection; MalformedAnswer for lengths that disagree."""
    if status in _NO_BODY or 100 <= status < 200:
        return 0, False
    codings = [v.strip().lower() for name, value in items if name == "transfer-encoding" for v in value.split(",")]
    if codings:
        return (None, True) if codings[-1] == "chunked" else (None, False)
    lengths = {v.strip() for name, value in items if name == "content-length" for v in value.split(",")}
    if not lengths:
        return None, False
    if len(lengths) > 1 or not all(c in "0123456789" for c in next(iter(lengths))) or not next(iter(lengths)):
        raise MalformedAnswer(f"Content-Length {sorted(lengths)!r}")
    return int(next(iter(lengths))), False


class ChunkedDecoder:
    """A chunked body (RFC 9112 7.1) decoded as its bytes arrive. `feed` returns how many of
    the bytes given it were used (all, unless the body ended within them); `done` once the
    last chunk and the trailer section were read. Chunk extensions and trailers are skipped."""

    __slots__ = ("body", "done", "_state", "_left", "_line")

    def __init__(self) -> None:
        self.body = bytearray()
        self.done = False
        self._state = "size"  # size line | data | the CRLF after a chunk's data | trailer lines
        self._left = 0  # data bytes of the current chunk still to come
        self._line = bytearray()  # a line not yet ended

    def feed(self, data: bytes) -> int:
        used, size = 0, len(data)
        while used < size and not self.done:
            if self._state == "data":
                take = min(self._left, size - used)
                self.body += data[used:used + take]
                used += take
                self._left -= take
                if self._left == 0:
                    self._state = "crlf"
                continue
            end = data.find(b"\n", used)
            if end < 0:
                self._line += data[used:]
                if len(self._line) > MAX_HEAD:
                    raise MalformedAnswer("a chunk line or trailer section too long")
                return size
            self._line += data[used:end + 1]
            used = end + 1
            line = bytes(self._line)
            self._line.clear()
            if not line.endswith(b"\r\n"):
                raise MalformedAnswer("a chunk line not ended by CRLF")
            self._end_of_line(line[:-2])
        return used

    def _end_of_line(self, line: bytes) -> None:
        if self._state == "crlf":
            if line:
                raise MalformedAnswer("a chunk longer than its size")
            self._state = "size"
        elif self._state == "size":
            digits = line.split(b";", 1)[0].strip(b" \t")
            if not digits or len(digits) > 15 or any(c not in b"0123456789abcdefABCDEF" for c in digits):
                raise MalformedAnswer(f"chunk size {digits[:20]!r}")
            self._left = int(digits, 16)
            self._state = "data" if self._left else "trailer"
        elif not line:  # the blank line that ends the trailer section
            self.done = True
