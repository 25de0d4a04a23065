"""The task leader factory: the small process that starts the task leaders of one agent.

A task's leader (`corral-task-leader`, native: task_leader.c, built by `make venv`) starts one task,
stays its parent, records how it ended and fences it (decisions 0015, 0017, 0022). The agent starts one
leader factory (`python -I -S task_leader.py --factory SOCKET_FD`, a child of the agent, single-threaded)
and asks it for a leader per task, handing over on the socket (SCM_RIGHTS) the task's stdin, stdout and
stderr, the leader's SPEC_FD and REPLY_FD, and the cgroups the task runs in. The factory spawns the
leader (posix_spawn: a vfork and an exec, no copy of a Python address space) as a session of its own with
the task's streams as its 0, 1 and 2; the leader enters the cgroups itself. The factory replies with the
leader's pid and start time, and reaps its leaders as they exit (SIGCHLD ignored). It exits when the
agent closes the socket (or dies); its leaders do not: being their own session, they outlive the agent
too, and a restarted agent adopts their tasks (decision 0015).

Why a factory at all, now that the leader is not Python: the agent is threaded, and the leaders must not
be its children (it would have to reap them, and a leader's parent learns how it died); the factory
keeps them apart for one socket round trip per task.

Only the standard library.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sys
from pathlib import Path

FACTORY_FLAG = "--factory"
REQUEST_MAX_BYTES = 1 << 16
LEADER_FDS = 5  # stdin, stdout, stderr, SPEC_FD, REPLY_FD
LEADER_PROGRAM = Path(__file__).with_name("corral-task-leader")
LEADER_SOURCE = Path(__file__).with_name("task_leader.c")


def factory(sock: socket.socket) -> int:
    """Spawn a leader for each request on `sock` ({"cgroup_procs": [...]} and the leader's five fds), and
    reply {"pid": N, "started": S} (S: seconds since boot, as the spool records it) or {"error": ...}.
    Until the agent closes the socket."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # leaders are reaped as they exit: no zombies
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the agent's terminal is the agent's to handle
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, REQUEST_MAX_BYTES, LEADER_FDS)
        except InterruptedError:
            continue
        except OSError:
            return 0
        if not data:
            return 0  # the agent is gone
        try:
            _send(sock, _spawn_leader(json.loads(data), fds))
        except OSError:
            return 0
        finally:
            for fd in fds:
                os.close(fd)


def _spawn_leader(request: dict, fds: list[int]) -> dict:
    if len(fds) != LEADER_FDS:
        return {"error": f"a leader needs {LEADER_FDS} file descriptors, got {len(fds)}"}
    stdin, stdout, stderr, spec_fd, reply_fd = fds  # all above 2: the factory's own 0, 1, 2 are open
    for fd in (spec_fd, reply_fd):
        os.set_inheritable(fd, True)
    argv = [str(LEADER_PROGRAM), str(spec_fd), str(reply_fd), *map(str, request.get("cgroup_procs") or [])]
    actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate((stdin, stdout, stderr))]
    try:
        pid = os.posix_spawn(argv[0], argv, {}, file_actions=actions, setsid=True,
                             setsigdef=(signal.SIGCHLD, signal.SIGINT, signal.SIGPIPE))
    except OSError as exc:
        return {"error": f"cannot start the task leader {argv[0]}: {exc.strerror or exc}"
                         + (" (build it: make venv)" if exc.errno == errno.ENOENT else "")}
    return {"pid": pid, "started": _started(pid)}


def _send(sock: socket.socket, message: dict) -> None:
    sock.send(json.dumps(message).encode())


def _started(pid: int) -> float:
    """A process's start, in seconds since boot (its stat's field 22, in clock ticks); 0.0 if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rpartition(b")")[2].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] != FACTORY_FLAG:
        sys.stderr.write(f"usage: {argv[0]} {FACTORY_FLAG} SOCKET_FD (started by the agent)\n")
        return 2
    return factory(socket.socket(fileno=int(argv[2])))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
