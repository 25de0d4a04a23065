"""Keystroke echo through `srun --pty cat`: a key written to srun's terminal, through srun, the agent and the
remote pseudo-terminal (whose echo sends it back) to srun's terminal again. One controller and one agent on
this host (the e2e tests' harness), srun on a pseudo-terminal of this script's own.

    PYTHONPATH=src python bench/pty_echo.py [KEYS]     # one JSON line: milliseconds per key
"""
from __future__ import annotations

import fcntl
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from tests.e2e.harness import Cluster  # noqa: E402
from tests.slurm.commands import SCRIPTS, command_env  # noqa: E402

START_WAIT_S = 6.0  # srun allocates, the step starts, srun's terminal goes raw


def read_until(fd: int, wanted: bytes, timeout_s: float = 30.0) -> bytes:
    data, deadline = b"", time.monotonic() + timeout_s
    while wanted not in data:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise TimeoutError(f"{wanted!r} did not come back: {data!r}")
        data += os.read(fd, 4096)
    return data


def measure(keys: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="corral-pty-bench-") as root:
        cluster = Cluster(Path(root), nodes=1, gpus=1).start()
        try:
            master, slave = os.openpty()
            srun = subprocess.Popen(
                [str(SCRIPTS / "srun"), "--pty", "cat"], stdin=slave, stdout=slave, stderr=slave, cwd=root,
                env=command_env(cluster.url, cluster.secret_file) | {"TERM": "xterm"}, start_new_session=True,
                preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
            os.close(slave)
            time.sleep(START_WAIT_S)
            os.write(master, b"ready\r")
            read_until(master, b"ready\r\r\nready\r\r\n")  # the remote echo, then cat's own line
            took_ms = []
            for i in range(keys):
                key = bytes([ord("a") + i % 26])
                started = time.perf_counter()
                os.write(master, key)
                read_until(master, key)
                took_ms.append((time.perf_counter() - started) * 1000)
                time.sleep(0.01)
            srun.kill()
            srun.wait()
            os.close(master)
        finally:
            cluster.stop()
    took_ms.sort()
    return {"keys": keys, "median_ms": round(statistics.median(took_ms), 2),
            "p90_ms": round(took_ms[int(0.9 * keys)], 2), "p99_ms": round(took_ms[int(0.99 * keys)], 2),
            "max_ms": round(took_ms[-1], 2), "load_1min": os.getloadavg()[0], "cpus": os.cpu_count()}


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 200)))
