"""Who a task runs as, and file access with that user's credentials.

An agent running as root starts every task as the job's user, looked up by name on this node, and only if
that user's uid here is the uid the job carries (the uid its submitter was proven to have): hosts that
share a user database agree on both, as Slurm expects, and a job whose pair this node contradicts (a name
vouched for with another uid, root's name with a made-up uid) never runs as anybody. A job as root
(uid 0 here) runs only where the agent was started with --allow-root-jobs (docs/security.md). A non-root
agent cannot switch users: it runs every task as itself (development mode), and says so when it registers.

Files a task's output goes to are opened by the agent (it needs them for slurmstepd's closing line too),
so they are opened with the user's file-system credentials: `setfsuid`/`setfsgid` change only the
calling thread's, and the supplementary groups are the user's for the few microseconds of the open. A
user thus cannot have the agent create or append to a file they could not write themselves
(--output=/etc/passwd, a path in another user's 0700 directory).

Changing the file-system ids clears the process's parent-death signal (prctl(2)), which `corral up` sets
so that its agents go with it: it is set again afterwards.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
from collections.abc import Iterator
from dataclasses import dataclass


class UnknownUser(Exception):
    pass


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """A Unix user as this node knows them."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # supplementary groups, the primary one included (os.getgrouplist)
    home: str
    shell: str

    @property
    def variables(self) -> dict[str, str]:
        """The login variables a task of this user gets, as login(1) would set them."""
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name, "SHELL": self.shell}


def lookup_user(name: str, node: str) -> TaskIdentity:
    """The user `name` on this node; UnknownUser with the reason if there is none."""
    try:
        entry = pwd.getpwnam(name)
    except (KeyError, ValueError):  # ValueError: a NUL byte in the name
        raise UnknownUser(f"user '{name}' unknown on {node}") from None
    groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return TaskIdentity(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, groups=groups,
                        home=entry.pw_dir, shell=entry.pw_shell or "/bin/sh")


def task_identity(name: str, uid: int, node: str, allow_root_jobs: bool) -> TaskIdentity:
    """Who a task of the job's (name, uid) runs as on this node; UnknownUser with the reason, before
    anything starts, if the node does not know the name, knows it with another uid, or it is root's and
    root jobs are not allowed here."""
    identity = lookup_user(name, node)
    if identity.uid != uid:
        raise UnknownUser(f"user '{name}' has uid {identity.uid} on {node}, but the job is recorded with uid "
                          f"{uid}: it runs as nobody (the controller's record and this node's user database "
                          "must agree)")
    if identity.uid == 0 and not allow_root_jobs:
        raise UnknownUser(f"a job as root (user '{name}', uid 0) is refused on {node}: its agent runs root "
                          "jobs only with --allow-root-jobs")
    return identity


def agent_identity() -> TaskIdentity | None:
    """The agent's own user as the user database has it (None: its uid has no entry there)."""
    try:
        return lookup_user(pwd.getpwuid(os.geteuid()).pw_name, "this node")
    except (KeyError, UnknownUser):
        return None


def agent_user() -> str:
    """The agent's own user name (for the development-mode flag)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG, PR_GET_PDEATHSIG = 1, 2


def parent_death_signal() -> int:
    """The signal this process gets when its parent dies (0: none)."""
    sig = ctypes.c_int(0)
    _libc.prctl(PR_GET_PDEATHSIG, ctypes.byref(sig), 0, 0, 0)
    return sig.value


def _rearm_parent_death_signal(sig: int, parent: int) -> None:
    """Set the parent-death signal again after a credential change cleared it; if the parent died
    meanwhile, the signal it would have sent is due now."""
    if sig:
        _libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)


def _set_fs_id(setter: str, wanted: int) -> None:
    """setfsuid/setfsgid report no error: they return the previous id, so a second call tells."""
    function = getattr(_libc, setter)
    function(wanted)
    if function(-1) != wanted:  # -1 is never valid: the call only returns the current id
        raise PermissionError(f"{setter}({wanted}) refused")


@contextlib.contextmanager
def file_access_as(identity: TaskIdentity | None) -> Iterator[None]:
    """Within the block, this thread opens and creates files as `identity` (None: as the agent).

    Must not span an await: the credentials belong to the thread, and the event loop runs other
    coroutines on it.
    """
    if identity is None:
        yield
        return
    death_signal, parent = parent_death_signal(), os.getppid()
    saved_groups = os.getgroups()
    os.setgroups(list(identity.groups))
    try:
        _set_fs_id("setfsgid", identity.gid)
        try:
            _set_fs_id("setfsuid", identity.uid)
            try:
                yield
            finally:
                _set_fs_id("setfsuid", os.geteuid())
        finally:
            _set_fs_id("setfsgid", os.getegid())
    finally:
        os.setgroups(saved_groups)
        _rearm_parent_death_signal(death_signal, parent)
