"""Storage faults made for real: a small tmpfs that fills up, and another process holding SQLite's write lock."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHUNK = b"\0" * (64 * 1024)

# Takes the write lock of the database named in argv[1], says so, and holds it until stdin closes.
_LOCKER = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
connection.execute("ROLLBACK")
"""


@contextmanager
def small_tmpfs(directory: Path, size_mib: int = 16) -> Iterator[Path]:
    """`directory` as its own tmpfs of `size_mib` MiB (needs root; skips otherwise)."""
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(directory)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "--lazy", str(directory)], check=True)


def fill_disk(directory: Path) -> Path:
    """Write a file in `directory` until its file system is full; the file (delete it to free the space)."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(CHUNK)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    # A partial chunk may still fit: take every last byte.
    with open(filler, "ab", buffering=0) as out:
        for size in (4096, 512, 1):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    return filler


@contextmanager
def sqlite_write_lock(database: Path) -> Iterator[None]:
    """Another process holds `database`'s write lock (BEGIN EXCLUSIVE) while the block runs."""
    locker = subprocess.Popen([sys.executable, "-c", _LOCKER, str(database)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        yield
    finally:
        locker.stdin.close()
        locker.wait(timeout=10)
