"""A terminal a test types into and reads from: one tmux server of its own (its own socket, so other tmux
users on the host are never touched), one session, a fixed window size."""
from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest


class Terminal:
    def __init__(self, root: Path, env: dict[str, str], cols: int = 100, rows: int = 30) -> None:
        if shutil.which("tmux") is None:
            pytest.fail("tmux is missing: install it (apt-get install tmux; .ci/run does)")
        self.socket = f"corral-pty-{uuid.uuid4().hex[:10]}"
        self.target = "term"
        # The shell the test types into: no rc files, a plain prompt, the test's environment.
        rc = root / "term.sh"
        exports = "".join(f"export {k}='{v}'\n" for k, v in env.items() if "'" not in v and k.isidentifier())
        rc.write_text(f"{exports}export PS1='$ '\nexec bash --norc --noprofile -i\n")
        self._tmux("new-session", "-d", "-s", self.target, "-x", str(cols), "-y", str(rows), f"bash {rc}")
        try:
            self._tmux("set-option", "-t", self.target, "window-size", "manual")
            self.wait_for(r"^\$ ?$", timeout_s=10)  # capture-pane drops trailing blanks
        except BaseException:
            self.close()  # no test holds it yet to close it
            raise

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True,
                              timeout=10).stdout

    def type(self, text: str, enter: bool = True) -> None:
        """Type `text` literally (and Enter)."""
        self._tmux("send-keys", "-t", self.target, "-l", text)
        if enter:
            self._tmux("send-keys", "-t", self.target, "Enter")

    def key(self, name: str) -> None:
        """A key by tmux's name: C-c, C-z, C-d, Escape."""
        self._tmux("send-keys", "-t", self.target, name)

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.target)

    def resize(self, cols: int, rows: int) -> None:
        self._tmux("resize-window", "-t", self.target, "-x", str(cols), "-y", str(rows))

    def wait_for(self, pattern: str, timeout_s: float = 30.0) -> re.Match:
        """Until the screen shows `pattern` (a regex, multiline); AssertionError with the screen if not."""
        deadline = time.monotonic() + timeout_s
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            found = re.search(pattern, screen, re.MULTILINE)
            if found:
                return found
            time.sleep(0.1)
        raise AssertionError(f"{pattern!r} not on the screen after {timeout_s}s:\n{screen}")

    def wait_gone(self, pattern: str, timeout_s: float = 30.0) -> None:
        """Until the screen no longer shows `pattern` (a full-screen program has left it)."""
        deadline = time.monotonic() + timeout_s
        while re.search(pattern, self.screen(), re.MULTILINE):
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} still on the screen after {timeout_s}s:\n{self.screen()}")
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10, check=False)
