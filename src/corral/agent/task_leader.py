"""A task's leader: the small process that starts one task, stays its parent and records how it ended.

The agent starts one leader factory (`python -I -S task_leader.py --factory SOCKET_FD`, a child of the
agent, single-threaded: it only forks), and asks it for a leader per task, handing over on the socket
(SCM_RIGHTS) the task's stdin, stdout and stderr, the leader's SPEC_FD and REPLY_FD, and the cgroups the
task runs in. The factory forks; the child enters those cgroups, takes the streams as its own, becomes
its own session and runs the leader below (no exec: a fork costs about a millisecond, a Python start
tens). The factory replies with the leader's pid and start time, and reaps its leaders as they exit. It
exits when the agent closes the socket (or dies); its leaders do not: being their own session, they
outlive the agent too (a SIGKILLed agent, or one stopped without --kill-tasks-on-exit), and a restarted
agent adopts their tasks (decision 0015). A leader, in order:

- Read the spec (one line of JSON on SPEC_FD): argv, cwd, env, the user to run as, the exit file.
- Start the task as its own session and process group, as that user, with the parent-death signal
  SIGKILL: whoever kills the leader kills the task, so a task never runs on without a record of its end.
  With "controlling_terminal" (srun --pty), its stdin, a pseudo-terminal, becomes its controlling terminal.
- Reply on REPLY_FD {"pid": N}, or {"error": ..., "exit_code": 127|126|1} if it could not start (the
  exit codes a shell gives).
- Let go of the task's streams (a step's pipes reach end of file when the task's own ends close).
- Wait for the agent's "ok" on SPEC_FD, which it sends once the task is in its spool. Without it (the
  agent died before it recorded the task, or could not record it) the task is killed: nothing would
  ever know it runs.
- Wait for the task, and write {"returncode": N} (Popen's: negative for a signal) to the exit file,
  whole or not at all. Then exit.
- Meanwhile fence (decision 0017): every fence_after_s / 8 (at most every second) read the agent's contact
  file (the spec's contact_file: {"fence_after_s": F, "contact": T}, T on CLOCK_BOOTTIME); once the contact
  is more than F old, freeze the task: SIGSTOP its process group and every other process in the task's
  cgroup leaf (the spec's cgroup_leaf, if any) but the leaders (each freezes its own), again until every
  one is stopped. A frozen task does not run, so it cannot run beside a copy the controller started
  elsewhere after it declared the node down (node_timeout_s > F). Once the contact is fresh again, thaw
  it (SIGCONT): the agent writes a new contact only after it has killed whatever the controller disowned,
  so what is still there to thaw is still this node's. Without contact a frozen task is never killed
  here: only a controller can say whether it gave the job away. No file (yet) means no fencing; an
  unreadable one, the last values read.

Only the standard library (imported once, by the factory: its leaders are forked with it loaded).
"""
from __future__ import annotations

import ctypes
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import termios
import time

PR_SET_PDEATHSIG = 1
EXIT_SPAWN_FAILED, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND = 1, 126, 127
LOOK_EVERY_MAX_S = 1.0
FREEZE_ROUNDS = 50  # of SIGSTOP to what still runs, 10 ms apart (a process may be forking)
FACTORY_FLAG = "--factory"
REQUEST_MAX_BYTES = 1 << 16
LEADER_FDS = 5  # stdin, stdout, stderr, SPEC_FD, REPLY_FD


def _read_spec(fd: int) -> tuple[dict, bytes]:
    """The spec's line, and what followed it."""
    data = b""
    while b"\n" not in data and (chunk := os.read(fd, 1 << 16)):
        data += chunk
    line, _, rest = data.partition(b"\n")
    return json.loads(line), rest


def _confirmed(fd: int, rest: bytes) -> bool:
    """Whether the agent says "ok" (it recorded the task) before it closes SPEC_FD."""
    data = rest
    while len(data) < 2 and (chunk := os.read(fd, 16)):
        data += chunk
    os.close(fd)
    return data.startswith(b"ok")


def _die_with_leader() -> None:
    """In the task, before exec (after the change of user, which would clear it): SIGKILL when the
    leader dies. The leader is single-threaded, so a preexec function is safe here."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _take_terminal() -> None:
    """In the task, after setsid and the change of user: its stdin, a pseudo-terminal (srun --pty), becomes
    its controlling terminal, with its process group in the foreground."""
    _die_with_leader()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _start(spec: dict) -> subprocess.Popen:
    as_user = {}
    if spec.get("user") is not None:
        uid, gid, groups = spec["user"]
        as_user = dict(user=uid, group=gid, extra_groups=groups)
    preexec = _take_terminal if spec.get("controlling_terminal") else _die_with_leader
    return subprocess.Popen(spec["argv"], cwd=spec["cwd"], env=spec["env"], stdin=0, stdout=1, stderr=2,
                            close_fds=True, start_new_session=True, preexec_fn=preexec, **as_user)


def _spawn_failure(spec: dict, exc: BaseException) -> dict:
    name = spec["argv"][0] if spec.get("argv") else "?"
    if isinstance(exc, FileNotFoundError):
        return {"error": f"command not found: {name} ({exc.strerror})", "exit_code": EXIT_NOT_FOUND}
    if isinstance(exc, PermissionError):
        return {"error": f"cannot execute {name}: {exc.strerror}", "exit_code": EXIT_NOT_EXECUTABLE}
    return {"error": f"cannot start {name}: {exc}", "exit_code": EXIT_SPAWN_FAILED}


def _reply(fd: int, message: dict) -> bool:
    try:
        os.write(fd, json.dumps(message).encode())
        os.close(fd)
    except OSError:
        return False
    return True


def _release_streams() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def _record_exit(path: str, record: dict) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w") as file:
        file.write(json.dumps(record))
    os.replace(temporary, path)


class _Contact:
    """The agent's last contact with the controller, as its file says (contact.py)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.at = time.clock_gettime(time.CLOCK_BOOTTIME)
        self.fence_after_s: float | None = None
        self.read()

    def read(self) -> None:
        if not self.path:
            return
        try:
            with open(self.path) as file:
                data = json.loads(file.read())
            at, after = float(data["contact"]), data["fence_after_s"]
            self.at, self.fence_after_s = at, None if after is None else float(after)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # not written yet (no fencing), or unreadable: the last values read stand

    def look_every_s(self) -> float:
        return LOOK_EVERY_MAX_S if self.fence_after_s is None else min(LOOK_EVERY_MAX_S, self.fence_after_s / 8)

    def lost_for(self) -> float | None:
        """How long contact has been lost, once that is past fence_after_s; else None."""
        self.read()
        silent = time.clock_gettime(time.CLOCK_BOOTTIME) - self.at
        return silent if self.fence_after_s is not None and silent > self.fence_after_s else None


def _exited_within(task: subprocess.Popen, pidfd: int | None, timeout_s: float) -> bool:
    if pidfd is None:
        try:
            task.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True
    return bool(select.select([pidfd], [], [], timeout_s)[0])


def _await_task(task: subprocess.Popen, spec: dict) -> dict:
    """The task's exit record, once it has exited; frozen while contact is lost, thawed when it is back."""
    contact = _Contact(spec.get("contact_file"))
    leaf = spec.get("cgroup_leaf")
    try:
        pidfd = os.pidfd_open(task.pid)
    except (AttributeError, OSError):
        pidfd = None
    frozen = False
    while not _exited_within(task, pidfd, contact.look_every_s()):
        lost = contact.lost_for() is not None
        if lost and not frozen:
            _freeze(task.pid, leaf)
        elif frozen and not lost:
            _thaw(task.pid, leaf)
        frozen = lost
    return {"returncode": task.wait()}


def _freeze(pgid: int, leaf: str | None) -> None:
    """SIGSTOP the task's process group and whatever else runs in its cgroup leaf (setsid or not) but the
    leaders there, again until every one of them is stopped (a process may have been forking)."""
    for _ in range(FREEZE_ROUNDS):
        running = [pid for pid in _members(pgid, leaf) if not _stopped(pid)]
        if not running:
            return
        _signal_group(pgid, signal.SIGSTOP)
        for pid in running:
            _signal(pid, signal.SIGSTOP)
        time.sleep(0.01)


def _thaw(pgid: int, leaf: str | None) -> None:
    _signal_group(pgid, signal.SIGCONT)
    for pid in _members(pgid, leaf):
        _signal(pid, signal.SIGCONT)


def _members(pgid: int, leaf: str | None) -> set[int]:
    """The task's processes: its process group's, and the others in its cgroup leaf but the leaders."""
    found = set(_group(pgid))
    if leaf:
        me = os.getpid()
        leader = _cmdline(me)[:4]  # python -I -S task_leader.py
        try:
            with open(os.path.join(leaf, "cgroup.procs")) as file:
                pids = [int(line) for line in file if line.strip()]
        except (OSError, ValueError):
            pids = []
        found.update(pid for pid in pids if pid != me and not _is_leader(pid, leader))
    return found


def _group(pgid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(int(name))
            if len(fields) > 2 and fields[2] == str(pgid).encode():
                pids.append(int(name))
    return pids


def _stopped(pid: int) -> bool:
    """Stopped, or gone (a zombie or no more): nothing that could still run."""
    fields = _stat(pid)
    return not fields or fields[0] in (b"T", b"t", b"Z", b"X")


def _stat(pid: int) -> list[bytes]:
    """A process's /proc stat fields after the command name: state, ppid, pgrp, ...; [] if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            return file.read().rpartition(b")")[2].split()
    except OSError:
        return []


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except OSError:
        pass


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:
        pass


def _is_leader(pid: int, leader: list[bytes]) -> bool:
    """Another task's leader: this script, run by this user (a task run as its user cannot pose as one)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.getuid() and _cmdline(pid)[:4] == leader
    except OSError:
        return False


def _cmdline(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().split(b"\0")
    except OSError:
        return []


def lead(spec_fd: int, reply_fd: int) -> int:
    spec, rest = _read_spec(spec_fd)
    try:
        task = _start(spec)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        _reply(reply_fd, _spawn_failure(spec, exc))
        return 0
    replied = _reply(reply_fd, {"pid": task.pid})
    _release_streams()
    if not replied or not _confirmed(spec_fd, rest):
        os.killpg(task.pid, signal.SIGKILL)
    _record_exit(spec["exit_file"], _await_task(task, spec))
    return 0


def factory(sock: socket.socket) -> int:
    """Fork a leader for each request on `sock` ({"cgroup_procs": [...]} and the leader's five fds), and
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
            _send(sock, _fork_leader(sock, json.loads(data), fds))
        except OSError:
            return 0
        finally:
            for fd in fds:
                os.close(fd)


def _fork_leader(sock: socket.socket, request: dict, fds: list[int]) -> dict:
    if len(fds) != LEADER_FDS:
        return {"error": f"a leader needs {LEADER_FDS} file descriptors, got {len(fds)}"}
    try:
        pid = os.fork()
    except OSError as exc:
        return {"error": f"cannot fork a task leader: {exc.strerror or exc}"}
    if pid == 0:
        code = 1
        try:
            sock.close()
            code = _become_leader(request, fds)
        finally:
            os._exit(code)
    return {"pid": pid, "started": _started(pid)}


def _become_leader(request: dict, fds: list[int]) -> int:
    """In the forked child: what `python -I -S task_leader.py SPEC_FD REPLY_FD` started by the agent in the
    task's cgroups with the task's streams would be, then lead."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the leader waits for its task; the task inherits this
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setsid()
    stdin, stdout, stderr, spec_fd, reply_fd = fds
    for target, fd in enumerate((stdin, stdout, stderr)):
        os.dup2(fd, target)  # all received fds are above 2: the factory's own 0, 1, 2 stay open
    for fd in (stdin, stdout, stderr):
        if fd not in (spec_fd, reply_fd):
            os.close(fd)
    os.chdir("/")
    for procs in request.get("cgroup_procs") or []:
        try:
            with open(procs, "w") as file:
                file.write("0")
        except OSError as exc:
            cgroup = os.path.dirname(procs)
            _reply(reply_fd, {"error": f"cannot start the task in cgroup {cgroup}: {exc.strerror or exc}",
                              "exit_code": EXIT_SPAWN_FAILED, "own": True})  # the agent's failure, not the job's
            return 0
    return lead(spec_fd, reply_fd)


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
