"""Whether any corral module the command helper loaded changed on disk since it loaded them (decision 0021): an
upgrade or an edited checkout must not be served by the code from before it.

The helper sets up one inotify instance when it starts, watching every loaded module's file for a write, a
change of its attributes (a new modification time, a link count: a file replaced by a rename or removed), a
move or its removal; a call's child asks with one zero-timeout poll whether any event came. Nothing reads the
events, so once one came, every later child sees it too. This replaces ~90 `stat` calls per call (the
modification times compared, as before): where no inotify instance or watch can be had (the user's
`fs.inotify.max_user_instances` or `max_user_watches` used up), it compares them per call, as before."""
from __future__ import annotations

import contextlib
import ctypes
import os
import select
import sys

IN_MODIFY, IN_ATTRIB, IN_MOVE_SELF, IN_DELETE_SELF = 0x2, 0x4, 0x800, 0x400
WATCHED = IN_MODIFY | IN_ATTRIB | IN_MOVE_SELF | IN_DELETE_SELF


class SourceWatch:
    """The loaded modules' files as the helper found them, and the inotify instance watching them (None:
    compared one by one when asked)."""

    def __init__(self, times: dict[str, int], inotify_fd: int | None) -> None:
        self.times = times
        self.inotify_fd = inotify_fd

    @classmethod
    def start(cls) -> SourceWatch:
        times = source_times()
        fd = _watching(times)
        # A file that changed before its watch was in place has no event: compare once more, after.
        if fd is not None and source_times() != times:
            os.close(fd)
            return cls(times, None)  # changed() says so at the first call
        return cls(times, fd)

    def changed(self) -> bool:
        if self.inotify_fd is None:
            return source_times() != self.times
        ready, _, _ = select.select([self.inotify_fd], [], [], 0)
        return bool(ready)

    def close(self) -> None:
        if self.inotify_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.inotify_fd)
            self.inotify_fd = None


def source_times() -> dict[str, int]:
    """Every loaded corral module's file and its modification time (ns): what an upgrade changes. The
    helper's own module counts too (run with -m, it is __main__)."""
    times = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if (name.startswith("corral") or name == "__main__") and path:
            try:
                times[path] = os.stat(path).st_mtime_ns
            except OSError:
                times[path] = -1
    return times


def _watching(times: dict[str, int]) -> int | None:
    """An inotify descriptor (non-blocking, closed on exec) watching every file of `times`; None where one
    cannot be had for all of them."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        return None
    for path in times:
        if libc.inotify_add_watch(fd, os.fsencode(path), WATCHED) < 0:
            os.close(fd)
            return None
    return fd
