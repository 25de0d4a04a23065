"""The Python entry points of sbatch, squeue, sacct and scancel (and of the helper's `corral` forms): hand the
call to the user's command helper (corral.slurm.helper, a warm interpreter that already imported the
commands); when it cannot take the call, or with CORRAL_COMMAND_HELPER=0, run it here. `make venv` installs a
native front-end (front.c, built by corral.slurm.build_front) in front of these entry points: it speaks the
same protocol without starting Python, and execs the entry point whenever the helper did not take the call,
so a first call lands here, runs here and starts the helper (docs/decisions/0021-native-front-end.md; 0019
for the helper itself).

This module is all a call loads on the fast path, so it imports nothing beyond what the interpreter has
already loaded (os, sys) and the built-in _socket. The helper gets the caller's argv, environment, umask,
working directory and its stdin, stdout and stderr themselves (SCM_RIGHTS): the command it runs reads and
writes them as it would here, and its exit status comes back.

Nothing is lost or done twice: a call the helper has not acknowledged (no helper, a stale socket, one of
another version or locale, a refusal) runs here instead; once acknowledged it is never run again, and a
helper that ends without a status is reported as an error that says the command may have acted.

Identity (docs/security.md): the socket lives in a directory only the user can enter, and each side checks
the other's uid with SO_PEERCRED; the helper runs as the user and asks for credentials as the command would.
Inside a job (SLURM_JOB_ID or CORRAL_JOB_ID set) the helper is not used."""
import _socket
import os
import sys

COMMANDS = ("sacct", "sbatch", "scancel", "squeue")
CORRAL = "corral"
# The `corral` forms the helper serves; the rest (up, run, logs -f, ...) want the terminal as their own.
CORRAL_SUBCOMMANDS = ("queue", "submit", "show", "cancel")
PROTOCOL = b"corral-command-helper-1"
HELPER_SWITCH = "CORRAL_COMMAND_HELPER"  # "0": never use the helper (it is used by default)
# Set by the native front-end (front.c) for the entry point it execs after it tried the helper: ABSENT (no
# helper: start one, run the call here) or REFUSED (run it here). Taken out of the environment before the
# command runs, so no job or child ever sees it; the helper is not asked a second time.
FALLBACK_MARK = "CORRAL_COMMAND_HELPER_FALLBACK"
ABSENT, REFUSED = "absent", "refused"
ACCEPTED, STALE = b"A", b"S"
HEADER_BYTES = 4
# What the helper's interpreter fixed at its start: a caller that differs in any of these gets its own helper.
START_VARIABLES = ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONPATH", "PYTHONHOME", "PYTHONIOENCODING", "PYTHONUTF8",
                   "PYTHONHASHSEED", "PYTHONSAFEPATH", "PYTHONWARNINGS", "PYTHONDONTWRITEBYTECODE",
                   "PYTHONPYCACHEPREFIX", "PYTHONUNBUFFERED", "PYTHONNOUSERSITE", "PYTHONDEVMODE")
_DIR_MODE, _DIR_TYPE, _TYPE_MASK = 0o700, 0o040000, 0o170000


def sbatch() -> int:
    return run("sbatch")


def squeue() -> int:
    return run("squeue")


def sacct() -> int:
    return run("sacct")


def scancel() -> int:
    return run("scancel")


def run(command: str, argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    fallback = take_fallback_mark()
    environment = dict(os.environ) if env is None else env
    status = through_helper(command, args, environment, fallback)
    if status is not None:
        return status
    module = __import__(f"corral.slurm.{command}.main", fromlist=["main"])
    return module.main(args)


def take_fallback_mark() -> str | None:
    """What the native front-end found (ABSENT, REFUSED), removed from this process's environment."""
    return os.environ.pop(FALLBACK_MARK, None)


def through_helper(command: str, argv: list[str], env: dict[str, str], fallback: str | None = None) -> int | None:
    """The command's exit status, run by the helper; None where this process must run it itself. `fallback`:
    what the native front-end found when it tried the helper for this call (None: it did not)."""
    if not helper_wanted(env):
        return None
    path = socket_path(as_the_caller_started(env))
    if path is None or fallback == REFUSED:
        return None
    if fallback == ABSENT:  # not asked again: started for the next call
        start_helper(path, env)
        return None
    return call_helper(path, command, argv, env)


def as_the_caller_started(env: dict[str, str]) -> dict[str, str]:
    """`env` with LC_CTYPE as this process was started with it. With no locale in the caller's environment,
    Python's C-locale coercion (PEP 538) sets LC_CTYPE in this process's own: the native front-end, which names
    the socket from the caller's environment itself, never sees that value, so the two named different
    sockets and every such call (cron, `env -i`, a service) fell back to a Python start. /proc/self/environ
    still holds the environment as exec'd."""
    coerced = os.environ.get("LC_CTYPE")
    if coerced is None or env.get("LC_CTYPE") != coerced:
        return env
    try:
        with open("/proc/self/environ", "rb") as handle:
            started = handle.read().split(b"\0")
    except OSError:
        return env
    original = next((item[len(b"LC_CTYPE="):] for item in started if item.startswith(b"LC_CTYPE=")), None)
    if original is not None and os.fsdecode(original) == coerced:
        return env
    fixed = {key: value for key, value in env.items() if key != "LC_CTYPE"}
    if original is not None:
        fixed["LC_CTYPE"] = os.fsdecode(original)
    return fixed


def helper_wanted(env: dict[str, str]) -> bool:
    """Not with the switch off, nor inside a job (a helper started there would live in the job's cgroup)."""
    return env.get(HELPER_SWITCH) != "0" and not env.get("SLURM_JOB_ID") and not env.get("CORRAL_JOB_ID")


def call_helper(path: str, command: str, argv: list[str], env: dict[str, str]) -> int | None:
    """The command's exit status from the helper at `path`; None where it did not take the call (none
    there: one is started for the next call)."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            sock.connect(path)
        except OSError:
            start_helper(path, env)
            return None
        if peer_uid(sock) != os.getuid():  # not the user's own: it must not see the environment
            return None
        return _exchange(sock, command, argv, env)
    finally:
        sock.close()


def _exchange(sock: _socket.socket, command: str, argv: list[str], env: dict[str, str]) -> int | None:
    try:
        cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        payload = request(command, argv, env)
        fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2, cwd))
        sock.sendmsg([len(payload).to_bytes(HEADER_BYTES, "big") + payload],
                     [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        if sock.recv(1) != ACCEPTED:  # refused, stale, or gone before it took the call: nothing was done
            return None
    except OSError:
        return None
    finally:
        os.close(cwd)
    status = b""
    try:
        while len(status) < 4:
            chunk = sock.recv(4 - len(status))
            if not chunk:
                break
            status += chunk
    except OSError:
        pass
    except KeyboardInterrupt:  # the helper's side hears the connection close and is interrupted too
        return 130
    if len(status) < 4:
        sys.stderr.write(f"{command}: error: corral's command helper ended before {command} finished; it may "
                         f"have acted (check with squeue before running it again)\n")
        return 1
    return int.from_bytes(status, "big", signed=True)


def request(command: str, argv: list[str], env: dict[str, str]) -> bytes:
    """PROTOCOL, command, argv[0], umask, argument count, the arguments, then KEY=VALUE per variable."""
    umask = os.umask(0o077)
    os.umask(umask)
    fields = [PROTOCOL, command.encode(), os.fsencode(sys.argv[0] if sys.argv else command), b"%d" % umask,
              b"%d" % len(argv), *(os.fsencode(arg) for arg in argv),
              *(os.fsencode(key) + b"=" + os.fsencode(value) for key, value in env.items())]
    return b"\0".join(fields)


def peer_uid(sock: _socket.socket) -> int:
    """The uid of the process at the other end, from the kernel (struct ucred: pid, uid, gid)."""
    ucred = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return int.from_bytes(ucred[4:8], sys.byteorder)


def fingerprint(env: dict[str, str]) -> str:
    """FNV-1a of what fixes a helper's behaviour: this interpreter, this corral, the start variables."""
    parts = [sys.executable, __file__, sys.version, *(f"{name}={env.get(name)}" for name in START_VARIABLES),
             *(_namespace(kind) for kind in NAMESPACES)]
    value = 0xCBF29CE484222325
    for byte in "\0".join(parts).encode(errors="surrogateescape"):
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


# A helper serves only callers in its own network and mount namespaces: one in another (`ip netns exec`, a
# container) would reach other addresses and files than the caller, so each namespace has its own helper.
NAMESPACES = ("net", "mnt")


def _namespace(kind: str) -> str:
    try:
        return os.readlink(f"/proc/self/ns/{kind}")
    except OSError:
        return "None"


def socket_path(env: dict[str, str]) -> str | None:
    directory = private_directory(env)
    return None if directory is None else f"{directory}/helper-{fingerprint(env)}.sock"


def private_directory(env: dict[str, str]) -> str | None:
    """A directory that only this user owns and can enter ($XDG_RUNTIME_DIR/corral, else /tmp/corral-UID),
    made if missing; None if the one found is not such (another user's, a symlink, open to others)."""
    uid = os.getuid()
    runtime = env.get("XDG_RUNTIME_DIR")
    base = runtime if runtime and _private(runtime, uid) else None
    path = f"{base}/corral" if base else f"/tmp/corral-{uid}"
    try:
        os.mkdir(path, _DIR_MODE)
    except FileExistsError:
        pass
    except OSError:
        return None
    return path if _private(path, uid) else None


def _private(path: str, uid: int) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return info.st_uid == uid and info.st_mode & _TYPE_MASK == _DIR_TYPE and not info.st_mode & 0o077


def helper_environment(env: dict[str, str]) -> dict[str, str]:
    """What the helper starts with: the start variables, PATH and HOME; never a credential."""
    keep = (*START_VARIABLES, "PATH", "HOME", "TZ")
    return {key: env[key] for key in keep if key in env}


def start_helper(path: str, env: dict[str, str]) -> None:
    """Start the user's helper on `path` in the background, detached from this call (its own session, its
    output to /dev/null); this call does not wait for it."""
    try:
        pid = os.fork()
    except OSError:
        return
    if pid:
        os.waitpid(pid, 0)
        return
    try:  # the intermediate child: a new session, then a grandchild that init adopts
        os.setsid()
        if os.fork() == 0:
            os.chdir("/")
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execve(sys.executable, [sys.executable, "-m", "corral.slurm.helper", path], helper_environment(env))
    except BaseException:  # noqa: BLE001, S110 - a helper that cannot start leaves this call as it was
        pass
    os._exit(0)
