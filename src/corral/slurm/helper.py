"""The user's command helper: `python -m corral.slurm.helper SOCKET`, started by the first sbatch, squeue, sacct,
scancel or `corral queue/submit/show/cancel` that finds none (corral.slurm.front), ended after IDLE_S seconds
without a call. The native front-end (front.c) and corral.slurm.front hand it their calls.

It imports the commands' lean paths once, then forks one child
per call: the child takes the caller's stdin, stdout,
stderr and working directory (passed over the socket), its argv, environment and umask, acknowledges the call,
runs the command's main() exactly as the console script would, and sends back the exit status. If the caller
goes away (Ctrl-C), the child is interrupted as the command would have been.

It serves only its own user (SO_PEERCRED), only one helper runs per socket (a lock file), and a helper whose
corral has changed on disk since it started (an upgrade, an edited checkout) answers STALE and exits: the
caller then runs the command itself and the next call starts a current helper."""
from __future__ import annotations

import contextlib
import fcntl
import gc
import io
import os
import select
import signal
import socket
import sys
import time

from corral.slurm.common import jsontext, preconnect
from corral.slurm.common.credential_reuse import Reuse, install
from corral.slurm.front import ACCEPTED, COMMANDS, CORRAL, CORRAL_SUBCOMMANDS, HEADER_BYTES, PROTOCOL, STALE, peer_uid
from corral.slurm.source_watch import SourceWatch

IDLE_S = 300.0
MAX_REQUEST_BYTES = 8 << 20  # argv and environment: far above ARG_MAX's usual 2 MiB
FDS = 4  # stdin, stdout, stderr, the working directory


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m corral.slurm.helper SOCKET\n")
        return 2
    serve(args[0])
    return 0


def serve(path: str, idle_s: float = IDLE_S) -> None:
    """Serve calls on `path` until idle for `idle_s`, or until corral changes on disk. Returns at once if
    another helper holds the socket's lock."""
    with open(path + ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        preload()
        sources = SourceWatch.start()
        server = listen(path)
        try:
            _accept_calls(server, sources, idle_s, lock.fileno())
        finally:
            server.close()
            sources.close()
            with contextlib.suppress(OSError):
                os.unlink(path)


# What makes calls fast: imported once, here, not in each call: the commands' lean paths only (corral queue,
# submit, show and cancel included: corral.cli.lean_commands). The Typer app (Typer, click, httpx: 50 MB
# resident against 16 MB) is not: every fork, every copy-on-write fault and every exit of a child would pay
# for it (a fork of the fuller helper: 1.3 ms against 0.3 ms, quiet machine); the rare call that needs it
# (--help, a form the lean commands hand on) loads it in its own child, as a command in its own process would.
PRELOADED = (*(f"corral.slurm.{command}.main" for command in COMMANDS), "corral.cli.lean_commands",
             "corral.cli.lean_submit", "corral.cli.submit_line", "corral.cli.client", "corral.cli.config",
             "corral.cli.render", "corral.cli.tables", "corral.slurm.squeue.select", "corral.jobref", "json",
             "ctypes")


def preload() -> None:
    for module in PRELOADED:
        __import__(module)
    # Out of the collector's sight: a child's collections would otherwise touch (and so copy) every page of
    # what was loaded here.
    gc.freeze()


def listen(path: str) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a stale socket: the lock says no helper serves it
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)  # the socket itself is the user's alone too
    try:
        server.bind(path)
    finally:
        os.umask(old)
    server.listen(128)
    return server


# What a waiting child tells the helper through its pipe (nothing, if it died: the helper ends then).
TOOK_A_CALL, IDLE, CHANGED = b"t", b"i", b"s"


def _accept_calls(server: socket.socket, sources: SourceWatch, idle_s: float, lock_fd: int) -> None:
    """Keep one child forked ahead, waiting in accept(): a call finds its process already there. Each child
    says through its pipe what became of it: it took a call, it waited idle_s for none, or corral changed on
    disk; on anything but a taken call the helper ends. The next child is forked once the call has ended
    (its pipe closes), or at once when another call is already waiting: not while the call runs, where the
    fork would take the CPU from it on a loaded machine, and never so late that concurrent calls queue."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGTERM, _end)  # ended by kill: still remove the socket (serve()'s finally)
    helper = os.getpid()
    kept = Reuse()  # auth-socket credentials the calls fetched, for the next children (credential_reuse)
    install(kept)
    learned, report = os.pipe()
    os.set_blocking(learned, False)
    while True:
        # SIGTERM waits while a child is forked: the helper must know its pid before it can end it.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        news, tell = os.pipe()
        waiting = os.fork()
        if waiting == 0:
            try:  # never back into the helper's own code (its finally would remove the socket)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
                _die_with(helper)  # however the helper ends (SIGKILL too), a child still waiting goes with it
                os.close(news)
                os.close(learned)
                kept.report_fd = report
                os.close(lock_fd)  # a long call (squeue -i) must not keep a newer helper from starting
                _wait_for_a_call(server, sources, idle_s, tell, kept.controller)
            finally:
                os._exit(0)
        took = False
        try:
            os.close(tell)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            said = _news_of(news, learned, kept)
            if said == TOOK_A_CALL:
                took = True
                _while_the_call_runs(news, learned, kept, server)
        except SystemExit:  # SIGTERM: the child still waiting goes too, not one that took a call
            if not took and _last_word(news) != TOOK_A_CALL:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(waiting, signal.SIGKILL)
            raise
        finally:
            os.close(news)
        if said != TOOK_A_CALL:
            return


def _while_the_call_runs(news: int, learned: int, kept: Reuse, server: socket.socket) -> None:
    """Until the child that took a call ends (its end of the pipe closes with it) or another call waits on
    the socket; the credentials children report are taken in meanwhile."""
    listening = server.fileno()
    while True:
        ready, _, _ = select.select([news, learned, listening], [], [])
        if learned in ready:
            kept.take_reports(learned)
        if news in ready or listening in ready:
            return


def _news_of(news: int, learned: int, kept: Reuse) -> bytes:
    """The waiting child's word, taking in meanwhile the credentials that children report."""
    while True:
        ready, _, _ = select.select([news, learned], [], [])
        if learned in ready:
            kept.take_reports(learned)
        if news in ready:
            return os.read(news, 1)


PR_SET_PDEATHSIG = 1


def _die_with(parent: int | None) -> None:
    """SIGKILL this process when `parent` ends (Linux's PR_SET_PDEATHSIG); None: no longer."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL if parent else 0)
    if parent and os.getppid() != parent:  # it ended before that took effect
        os._exit(0)


def _last_word(news: int) -> bytes:
    """What the waiting child has said so far, without waiting for it."""
    os.set_blocking(news, False)
    try:
        return os.read(news, 1)
    except BlockingIOError:
        return b""


def _wait_for_a_call(server: socket.socket, sources: SourceWatch, idle_s: float, tell: int,
                     controller: tuple[tuple[str, int], preconnect.Address] | None) -> None:
    """In a child forked ahead: connect to the controller the last call talked to (preconnect), take the next
    call, tell the helper, and run the call (or leave it to the caller: another user's is closed unanswered,
    and a changed corral answers STALE)."""
    if controller is not None:
        (host, port), address = controller
        preconnect.connect_ahead(host, port, address)
    _warm_up()
    server.settimeout(idle_s)
    try:
        conn, _ = server.accept()
    except TimeoutError:
        _tell(tell, IDLE)
        return
    server.close()
    _die_with(None)  # a call taken is the caller's: it runs to its end, whatever becomes of the helper
    if peer_uid(conn) != os.getuid():
        _tell(tell, TOOK_A_CALL)
        return  # closed unanswered: another user gets nothing, not even an error
    if sources.changed():
        _tell(tell, CHANGED)
        with contextlib.suppress(OSError):  # the caller may be gone already: it runs the call itself
            conn.sendall(STALE)
        return
    _tell(tell, TOOK_A_CALL, keep_open=True)  # closed when this process ends: the helper forks the next
    _run_call(conn)  # never returns


def _warm_up() -> None:
    """In the waiting child: write now the memory a call's take-over (_take_over) writes. After the fork every
    page is the helper's until written, and each first write is a copy-on-write fault: taking over the caller's
    environment and streams faulted ~200 pages, 0.8 ms median on the call's path (load 4-8). The same code run
    here on the helper's own environment and descriptors (/dev/null) copies the same pages while no call
    waits: 16 faults are left on the call's path, 0.2 ms."""
    own = dict(os.environ)
    os.environ.clear()
    os.environ.update(own)
    time.tzset()
    for fd, mode in ((0, "r"), (1, "w"), (2, "w")):
        _stream(fd, mode, sys.stdout.encoding, sys.stdout.errors, line_buffering=False)
    _warm_up_sbatch()


# What the waiting child runs of sbatch (its options, script and body, not its request): sbatch is the command
# furthest from Slurm's latency, and its own code and allocations were ~260 of the ~360 copy-on-write faults
# of a call (`sbatch --wrap true`, instrumented helper, load 3: 2.5 -> 2.1 ms from acknowledgement to status).
WARM_UP_SBATCH_ARGV = ("-o", "/dev/null", "--gres=gpu:1", "--wrap", "true")


def _warm_up_sbatch() -> None:
    sbatch = sys.modules["corral.slurm.sbatch.main"]
    try:
        options, source = sbatch.parse_sbatch(list(WARM_UP_SBATCH_ARGV), os.environ)
        text = sbatch.read_script(source, sys.stdin)
        options = sbatch.apply_script(options, text, "stdin")
        body, _warnings = sbatch.submission(options, source, text, os.environ, os.getcwd())
        jsontext.dumps(body)
    except Exception:  # noqa: BLE001, S110 - a warm-up: the call runs sbatch in full whatever happened here
        pass


def _tell(tell: int, news: bytes, keep_open: bool = False) -> None:
    with contextlib.suppress(OSError):  # a helper gone meanwhile: this call is still served
        os.write(tell, news)
    if not keep_open:
        os.close(tell)


def _end(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _run_call(conn: socket.socket) -> None:
    status = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a call ends on SIGTERM as the command would
        command, argv0, argv, env, umask, fds = receive(conn)
        _take_over(fds, env, umask)
    except BaseException:  # noqa: BLE001 - a call it cannot take: closed unacknowledged, run by the caller
        os._exit(0)
    try:
        sys.argv = [argv0, *argv]
        conn.sendall(ACCEPTED)
        status = _main_status(command, argv, conn)
    except BaseException:  # noqa: BLE001 - whatever happens, the caller hears a status or a closed socket
        with contextlib.suppress(BaseException):
            import traceback

            traceback.print_exc()  # to the caller's stderr, as the command's own crash would be
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(OSError):
            conn.sendall(status.to_bytes(4, "big", signed=True))
        os._exit(0)


def receive(conn: socket.socket) -> tuple[str, str, list[str], dict[str, str], int, list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, FDS)
    if len(fds) != FDS or len(data) < HEADER_BYTES:
        raise ValueError("a call without its descriptors")
    size = int.from_bytes(data[:HEADER_BYTES], "big")
    if size > MAX_REQUEST_BYTES:
        raise ValueError("a call too large")
    chunks, have = [data[HEADER_BYTES:]], len(data) - HEADER_BYTES
    while have < size:
        chunk = conn.recv(min(1 << 20, size - have))
        if not chunk:
            raise ValueError("a call cut short")
        chunks.append(chunk)
        have += len(chunk)
    fields = b"".join(chunks).split(b"\0")
    if fields[0] != PROTOCOL or fields[1].decode() not in (*COMMANDS, CORRAL):
        raise ValueError("a call this helper does not speak")
    count = int(fields[4])
    argv = [os.fsdecode(arg) for arg in fields[5:5 + count]]
    if fields[1] == CORRAL.encode() and (not argv or argv[0] not in CORRAL_SUBCOMMANDS):
        raise ValueError("a corral command this helper does not serve")
    env = dict(os.fsdecode(item).partition("=")[::2] for item in fields[5 + count:] if item)
    return fields[1].decode(), os.fsdecode(fields[2]), argv, env, int(fields[3]), fds


def _take_over(fds: list[int], env: dict[str, str], umask: int) -> None:
    """Become the caller: its descriptors, directory, umask, environment and time zone."""
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    os.fchdir(fds[3])
    for fd in fds:
        os.close(fd)
    os.umask(umask)
    os.environ.clear()
    os.environ.update(env)
    time.tzset()
    # The streams as the interpreter makes them at its start (the helper's own point at /dev/null).
    sys.stdin = _stream(0, "r", sys.stdin.encoding, sys.stdin.errors, line_buffering=False)
    sys.stdout = _stream(1, "w", sys.stdout.encoding, sys.stdout.errors, line_buffering=os.isatty(1))
    sys.stderr = _stream(2, "w", sys.stderr.encoding, sys.stderr.errors, line_buffering=True)


def _stream(fd: int, mode: str, encoding: str, errors: str | None, line_buffering: bool) -> io.TextIOWrapper:
    raw = open(fd, mode + "b", closefd=False)  # noqa: SIM115 - lives as long as the call
    return io.TextIOWrapper(raw, encoding=encoding, errors=errors, newline="\n", line_buffering=line_buffering)


def _main_status(command: str, argv: list[str], conn: socket.socket) -> int:
    """main(argv)'s exit status, as sys.exit(main()) would make it; interrupted if the caller goes away."""
    try:
        _interrupted_when_the_caller_leaves(conn)
        result = _corral(argv) if command == CORRAL else sys.modules[f"corral.slurm.{command}.main"].main(argv)
    except SystemExit as exc:
        result = exc.code
    except KeyboardInterrupt:
        result = 130
    finally:
        _not_interrupted(conn)
    if result is None:
        return 0
    if isinstance(result, int):
        return result
    sys.stderr.write(f"{result}\n")
    return 1


def _interrupted_when_the_caller_leaves(conn: socket.socket) -> None:
    """The caller sends nothing after its call, so its end of the socket becoming readable means it left
    (Ctrl-C on the front-end): the kernel then sends this process SIGINT (O_ASYNC, F_SETSIG), and the command
    is interrupted as it would be in its own process. No thread waits on the socket for it."""
    fd = conn.fileno()
    fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGINT)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
    try:  # a caller that left before O_ASYNC was set sent no signal
        gone = conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        gone = False
    except OSError:
        gone = True
    if gone:
        raise KeyboardInterrupt


def _not_interrupted(conn: socket.socket) -> None:
    """The command is over: the caller leaving now interrupts nothing."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        fcntl.fcntl(conn.fileno(), fcntl.F_SETFL, fcntl.fcntl(conn.fileno(), fcntl.F_GETFL) & ~os.O_ASYNC)


def _corral(argv: list[str]) -> int | None:
    """As corral.cli.main.main: the lean commands, else the Typer app's command (what app() runs; it ends
    with SystemExit)."""
    status = sys.modules["corral.cli.lean_commands"].run(argv)
    if status is not None:
        return status
    from typer.main import get_command

    from corral.cli.app import app  # a form the lean commands hand on: loaded in this call's child alone

    get_command(app).main(args=argv, prog_name=CORRAL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
