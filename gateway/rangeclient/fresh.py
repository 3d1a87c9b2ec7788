"""Bytes objects received into directly, their memory faulted in at once.

A block received from the origin is kept (by the memory tier) as the `bytes` it is read into.
Received into a buffer and copied out, it cost a copy, and the kernel faulted the new bytes'
memory in page by page as the copy first wrote each page: on this project's VMs, 256 faults
and about 900 us of system CPU per MiB while the memory tier fills. Here the body is read
straight into the `bytes` object it ends as, created uninitialised (as C code creates one to
fill), after one madvise(MADV_POPULATE_WRITE) faulted all its pages in: no copy, one system
call instead of 256 faults. Memory malloc gives again is in place already: a gateway process
keeps freed blocks' memory in its heap (gateway.run.keep_large_allocations), and a block
received and dropped (a peer's or another worker's) or evicted from a full memory tier frees
one for the next. mincore says so (5 us per MiB), and the madvise, which walks every page
even then (40 us per MiB), is skipped. Bodies under 256 KiB are not looked at: their few pages
fault in as they are received. Until the body is complete the object is this module's
caller's alone; only then is it handed out, immutable from then on.
"""

from __future__ import annotations

import ctypes
import errno
import mmap

PAGE = mmap.PAGESIZE
SMALLEST = 64 * 1024  # smaller bodies are read into a bytearray and copied: few pages to fault
# Smaller bodies are not looked at with mincore: its system call (2-3 us) costs more than faulting
# their few pages in as they are received saves, and most of the time they are in memory already.
POPULATED = 256 * 1024
_MADV_POPULATE_WRITE = 23  # Linux 5.14+; elsewhere the pages fault in as they are written

_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
_address_of = ctypes.pythonapi.PyBytes_AsString
_address_of.restype = ctypes.c_void_p
_address_of.argtypes = [ctypes.py_object]
_libc = ctypes.CDLL(None, use_errno=True)
_madvise = _libc.madvise
_madvise.restype = ctypes.c_int
_madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_mincore = _libc.mincore
_mincore.restype = ctypes.c_int
_mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_populate = True  # False once the kernel said it has no MADV_POPULATE_WRITE
_resident = bytearray(256)  # mincore's answer, a byte per page (grown as needed)
_LOW_BIT = bytes(b & 1 for b in range(256))  # a page is in memory when its byte's low bit is set


def fresh_bytes(size: int) -> tuple[bytes, memoryview]:
    """A new `bytes` of `size` (>= SMALLEST) bytes, not initialised, and a writable view of
    it. Fill it through the view, release the view, and only then let the bytes be seen."""
    global _populate
    if size < SMALLEST:
        raise ValueError(f"a fresh bytes object is for bodies of {SMALLEST} bytes or more, not {size}")
    data: bytes = _new_bytes(None, size)
    address = _address_of(data)
    start, end = -(-address // PAGE) * PAGE, (address + size) // PAGE * PAGE
    if _populate and size >= POPULATED and not all_in_memory(start, end):
        if _madvise(start, end - start, _MADV_POPULATE_WRITE) != 0 and ctypes.get_errno() == errno.EINVAL:
            _populate = False
    return data, memoryview((ctypes.c_char * size).from_address(address)).cast("B")


def all_in_memory(start: int, end: int) -> bool:
    """Whether every page of [start, end) (page-aligned) is in memory (False when unknown)."""
    global _resident
    pages = (end - start) // PAGE
    if pages > len(_resident):
        _resident = bytearray(pages)
    vector = (ctypes.c_char * len(_resident)).from_buffer(_resident)
    if _mincore(start, end - start, vector) != 0:
        return False
    return _resident[:pages].translate(_LOW_BIT).find(0) < 0
