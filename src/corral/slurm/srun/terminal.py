"""srun --pty's end of the terminal: the local terminal's window size, and its raw mode while the step runs.

As Slurm's srun: the window size is read from stdout (no terminal there: Slurm's two error lines, and the
step runs without a pseudo-terminal); stdin goes raw (cfmakeraw with output processing kept, so srun's own
messages still print) and is restored on every way out; a SIGWINCH sends the new size to task 0's
pseudo-terminal, whose programs then get their own SIGWINCH on the node. Ctrl-C, Ctrl-Z and Ctrl-D are
bytes like any other in raw mode: the remote terminal's line discipline turns them into SIGINT, SIGTSTP
and end of file for its foreground process group."""
from __future__ import annotations

import fcntl
import os
import signal
import struct
import sys
import termios
from collections.abc import Callable

WINSIZE = struct.Struct("HHHH")  # rows, cols, xpixel, ypixel
IFLAG, OFLAG, CFLAG, LFLAG, CC = 0, 1, 2, 3, 6  # tcgetattr's list


def raw_mode(mode: list) -> list:
    """cfmakeraw(3) on a tcgetattr list, output processing kept (as Slurm's srun keeps it)."""
    mode = list(mode)
    mode[IFLAG] &= ~(termios.IGNBRK | termios.BRKINT | termios.PARMRK | termios.ISTRIP | termios.INLCR
                     | termios.IGNCR | termios.ICRNL | termios.IXON)
    mode[LFLAG] &= ~(termios.ECHO | termios.ECHONL | termios.ICANON | termios.ISIG | termios.IEXTEN)
    mode[CFLAG] = (mode[CFLAG] & ~(termios.CSIZE | termios.PARENB)) | termios.CS8
    mode[CC] = list(mode[CC])
    mode[CC][termios.VMIN] = 1
    mode[CC][termios.VTIME] = 0
    return mode


def window_size(fd: int) -> tuple[int, int]:
    """(rows, cols) of the terminal on `fd`; OSError if it is not a terminal."""
    rows, cols, _, _ = WINSIZE.unpack(fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * WINSIZE.size))
    return rows, cols


def terminal_problem(stdin_fd: int = 0, stdout_fd: int = 1) -> str | None:
    """Slurm's error lines when srun has no terminal for --pty (then it runs the step without one); None
    if stdin and stdout are terminals."""
    try:
        window_size(stdout_fd)
    except OSError as exc:
        return (f"srun: error: ioctl(TIOCGWINSZ): {exc.strerror}\n"
                "srun: error: Not using a pseudo-terminal, disregarding --pty option\n")
    if not os.isatty(stdin_fd):
        return "srun: error: Not using a pseudo-terminal, disregarding --pty option\n"
    return None


class RawTerminal:
    """While entered: stdin in raw mode and SIGWINCH handled by `on_resize(rows, cols)`; both undone on
    exit, exception or not. srun's SIGTERM/SIGHUP go to the tasks and srun ends with them, so this exit
    runs then too."""

    def __init__(self, on_resize: Callable[[int, int], None], stdin_fd: int = 0, stdout_fd: int = 1) -> None:
        self._on_resize = on_resize
        self._stdin_fd = stdin_fd
        self._stdout_fd = stdout_fd
        self._saved: list | None = None
        self._previous_handler: object = None

    def __enter__(self) -> RawTerminal:
        self._saved = termios.tcgetattr(self._stdin_fd)
        termios.tcsetattr(self._stdin_fd, termios.TCSANOW, raw_mode(self._saved))
        self._previous_handler = signal.signal(signal.SIGWINCH, self._resized)
        return self

    def _resized(self, _signum: int, _frame: object) -> None:
        try:
            rows, cols = window_size(self._stdout_fd)
        except OSError:
            return  # the terminal went away: srun ends with its tasks' hang-up
        self._on_resize(rows, cols)

    def __exit__(self, *exc_info: object) -> None:
        signal.signal(signal.SIGWINCH, self._previous_handler)  # type: ignore[arg-type]  # from signal.signal
        if self._saved is not None:
            try:
                termios.tcsetattr(self._stdin_fd, termios.TCSADRAIN, self._saved)
            except termios.error:
                pass  # the terminal is gone: nothing to restore
        sys.stdout.flush()
