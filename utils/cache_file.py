"""A cache file that can tell when it was read half-written: chapter 19's plumbing.

The file is a header (a magic string, the payload's length, its CRC-32) followed by the
payload. ``read_cache()`` checks all three, so a reader that opens the file while another
process is still writing it finds out (``CacheError``), instead of using half the data.

``write_slowly()`` writes the bytes in pieces, flushed one by one, over a given time: it
stands in for a large file on a busy file system, so that a race with a reader is the rule
rather than bad luck. ``announce`` is called once the first piece is on disk.
``write_in_place()`` and ``write_atomically()`` are the two ways to put the bytes at a path:
under their final name from the first byte, or under a temporary name that is renamed when
the file is complete.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

MAGIC = b"DDP19CACHE"
HEADER = struct.Struct("<10sQI")  # magic, payload length, CRC-32 of the payload
PIECES = 16  # write_slowly() writes this many pieces


class CacheError(Exception):
    """A cache file that is missing, or torn (shorter than its header says, or its checksum
    does not match): what went wrong, in words."""


def encode(payload: bytes) -> bytes:
    """The header, then the payload."""
    return HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


def read_cache(path: Path) -> bytes:
    """The payload of the cache file at `path`, checked against its header; CacheError if the
    file is missing or torn."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CacheError(f"no file at {path}") from None
    if len(data) < HEADER.size:
        raise CacheError(f"torn: {path} is shorter than its header")
    magic, length, crc = HEADER.unpack_from(data)
    payload = data[HEADER.size:]
    if magic != MAGIC:
        raise CacheError(f"torn: {path} does not start with the header")
    if len(payload) != length:
        raise CacheError(f"torn: {path} holds fewer bytes than its header says")
    if zlib.crc32(payload) != crc:
        raise CacheError(f"torn: the checksum of {path} does not match its header")
    return payload


def write_slowly(file: BinaryIO, data: bytes, seconds: float, announce: Callable[[], None]) -> None:
    """Write `data` to `file` in PIECES pieces, each flushed to the operating system, over
    about `seconds`; `announce()` once the first piece is out."""
    step = -(-len(data) // PIECES)
    for index, start in enumerate(range(0, len(data), step)):
        file.write(data[start:start + step])
        file.flush()  # visible to other processes now, as a slow write's first bytes are
        if index == 0:
            announce()
        time.sleep(seconds / PIECES)


def write_in_place(path: Path, data: bytes, seconds: float, announce: Callable[[], None]) -> None:
    """Write `data` under its final name from the first byte: until the last byte, a reader
    sees a file that exists and is incomplete."""
    with open(path, "wb") as file:
        write_slowly(file, data, seconds, announce)


# --8<-- [start:atomic]
def write_atomically(path: Path, data: bytes, seconds: float, announce: Callable[[], None]) -> None:
    """Write `data` to a temporary file in the same directory (same file system), flush and
    fsync it, then rename it to `path`: the name appears when the file is complete, never
    before. The temporary name holds the host and process id, so that writers on several
    nodes of one file system never share one."""
    temp = path.with_name(f".{path.name}.{os.uname().nodename}.{os.getpid()}.tmp")
    try:
        with open(temp, "wb") as file:
            write_slowly(file, data, seconds, announce)
            os.fsync(file.fileno())  # the bytes are on disk before the name points at them
        os.replace(temp, path)  # atomic within one file system
    finally:
        temp.unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # and the rename survives a crash of the node
    finally:
        os.close(directory)
# --8<-- [end:atomic]
