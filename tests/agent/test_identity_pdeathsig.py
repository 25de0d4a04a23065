"""Opening a task's output as its user changes the agent's file-system ids, which clears the parent-death
signal `corral up` gives its agents (prctl(2)); an agent that lost it outlived a killed `corral up`, with
the user's job still running. The signal must survive the open."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="setfsuid needs root")

PROBE = """
import ctypes, signal, sys
from corral.agent.identity import file_access_as, lookup_user
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG, as corral up's supervisor does
with file_access_as(lookup_user("nobody", "node1")):
    open("/dev/null").close()
sig = ctypes.c_int(0)
libc.prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG
print(sig.value)
"""


def test_the_parent_death_signal_survives_opening_files_as_a_user():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(int(__import__("signal").SIGTERM))
