"""What the kernel holds of a mapped block file on a disk (store.mapped):

- `Pages.resident`: whether the page cache holds every page (mincore(2)), so that reading them
  will not stop the event loop until a disk has read them;
- `Pages.mapped`: whether every page is still mapped in this process (/proc/self/pagemap).
  A page the kernel takes back from the page cache is first unmapped from every process
  that maps it; a page still mapped since the worker read it is the same memory, and holds
  the bytes it held then: none of it can have been read from the disk again.

mincore takes an address, which Python gives only for a writable buffer: the mappings asked
about are private copies (mmap.ACCESS_COPY), which share the page cache's pages until written,
and nothing writes them (the views handed out are read-only). Under strict overcommit
(vm.overcommit_memory=2) such a mapping counts against the commit limit as if written: at most
a disk tier's mapping budget (store.disk). Where the C library has no
mincore, nothing is resident (`address_of` answers None) and disk blocks are read in threads;
where /proc/self/pagemap cannot be read, no page is taken to be still mapped. Event loop only.
"""

from __future__ import annotations

import ctypes
import mmap
import os

__all__ = ["Pages", "address_of"]

_PAGE = mmap.PAGESIZE
_PRESENT = bytes(1 if byte & 0x80 else 0 for byte in range(256))  # bit 63 of a pagemap entry: present


def _mincore() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        call = ctypes.CDLL(None, use_errno=True).mincore
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    call.restype = ctypes.c_int
    return call


_MINCORE = _mincore()
_vector = ctypes.create_string_buffer(1)  # one byte per page, grown to the largest span asked about
_pagemap: int | None = None  # this process's /proc/self/pagemap, opened at its first use (-1: cannot be)


def _forget_pagemap() -> None:
    """In a forked child: the descriptor inherited reads the parent's page tables."""
    global _pagemap
    if _pagemap is not None and _pagemap >= 0:
        os.close(_pagemap)
    _pagemap = None


os.register_at_fork(after_in_child=_forget_pagemap)


def address_of(mapping: mmap.mmap) -> int | None:
    """Where a writable mapping starts, or None when residency cannot be asked here."""
    if _MINCORE is None or len(mapping) == 0:
        return None
    start = ctypes.c_char.from_buffer(mapping)
    try:
        return ctypes.addressof(start)
    finally:
        del start  # the buffer export ends here, so the mapping can be closed


class Pages:
    """The pages that hold the `length` bytes mapped at `address` (the arguments of the two
    questions worked out once: a hit asks one of them)."""

    __slots__ = ("count", "_start", "_length", "_entries")

    def __init__(self, address: int, length: int) -> None:
        start = address - address % _PAGE
        self.count = (address + length - start + _PAGE - 1) // _PAGE if length > 0 else 0
        self._start = ctypes.c_void_p(start)
        self._length = ctypes.c_size_t(self.count * _PAGE)
        self._entries = (self.count * 8, start // _PAGE * 8)  # pagemap: 8 bytes a page, little-endian

    def resident(self) -> bool:
        """Whether the page cache holds every page."""
        global _vector
        assert _MINCORE is not None
        if len(_vector) < self.count:
            _vector = ctypes.create_string_buffer(self.count)
        if self.count and _MINCORE(self._start, self._length, _vector) != 0:
            return False
        # The kernel sets bit 0 of a resident page's byte and leaves the other bits zero.
        return b"\x00" not in _vector.raw[: self.count]

    def mapped(self) -> bool:
        """Whether every page is mapped in this process."""
        global _pagemap
        if _pagemap is None:
            try:
                _pagemap = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                _pagemap = -1
        if _pagemap < 0:
            return False
        try:
            entries = os.pread(_pagemap, *self._entries)
        except OSError:
            return False
        return len(entries) == self._entries[0] and b"\x00" not in entries[7::8].translate(_PRESENT)
