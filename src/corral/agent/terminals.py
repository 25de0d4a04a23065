"""Pseudo-terminals for srun --pty: task 0 of such a step gets the slave end as its stdin, stdout, stderr and
controlling terminal (its leader makes it so: task_leader.c), and the agent relays the master end to and
from srun (step_runner.py). The terminal's line discipline on the node turns srun's raw keystrokes into
signals for the task's foreground process group (Ctrl-C, Ctrl-Z) and end of file (Ctrl-D)."""
from __future__ import annotations

import fcntl
import os
import struct
import termios

WINSIZE = struct.Struct("HHHH")  # rows, cols, xpixel, ypixel


def open_terminal(rows: int, cols: int, owner_uid: int | None) -> tuple[int, int]:
    """A new pseudo-terminal (master, slave), both close-on-exec, of this window size; the slave owned
    by `owner_uid` when given (a root agent's task user), as login programs hand a terminal to its user,
    so that programs which open it by name (tty, vi's /dev/tty, script) may."""
    master, slave = os.openpty()
    try:
        set_window(master, rows, cols)
        if owner_uid is not None:
            os.fchown(slave, owner_uid, -1)
        os.set_blocking(master, False)
    except BaseException:
        os.close(master)
        os.close(slave)
        raise
    return master, slave


def set_window(master: int, rows: int, cols: int) -> None:
    """The terminal's window size; the kernel sends SIGWINCH to its foreground process group."""
    fcntl.ioctl(master, termios.TIOCSWINSZ, WINSIZE.pack(rows, cols, 0, 0))
