"""Who a node may vouch for, and who may own a root job (docs/security.md, "Who may vouch for whom").

A node's agent credential (or a join token, which buys one) is the power of root on one node. It must not
become root on every node: its word is taken only for an ordinary user whose name and uid agree with
what the controller's host knows, and a root job is accepted only from root authenticated on the
controller's host. What the controller cannot know (a user its host has never heard of), the agent that
runs the task checks against its own user database (corral.agent.identity.task_identity)."""
from __future__ import annotations

import pwd
import time

# Debian's, Red Hat's and login.defs' UID_MIN: below it are the system's own accounts (daemon, postgres...).
DEFAULT_VOUCH_MIN_UID = 1000


def _root_name() -> str:
    try:
        return pwd.getpwuid(0).pw_name
    except KeyError:
        return "root"


ROOT_NAME = _root_name()


# host_uid's answers, kept HOST_UID_TTL_S (docs/security.md, "The controller's user-database cache": what
# a stale answer could allow, and why nothing it decides alone lets a task run as anyone else). A lookup
# costs up to ~85 us (NSS; for a name this host does not know, a scan of the whole passwd file), once or
# twice per submission; at hundreds of submissions a second that was 9 % of the controller's time.
HOST_UID_TTL_S = 2.0
HOST_UID_CACHE_MAX = 4096  # names kept at most (any caller may name any user): then it starts over
_host_uids: dict[str, tuple[float, int | None]] = {}


def host_uid(name: str) -> int | None:
    """The uid of `name` on the controller's host, None if it has no such user (as the user database said
    at most HOST_UID_TTL_S ago)."""
    now = time.monotonic()
    cached = _host_uids.get(name)
    if cached is not None and now - cached[0] < HOST_UID_TTL_S:
        return cached[1]
    try:
        uid: int | None = pwd.getpwnam(name).pw_uid
    except (KeyError, ValueError):  # ValueError: a NUL byte in the name
        uid = None
    if len(_host_uids) >= HOST_UID_CACHE_MAX:
        _host_uids.clear()
    _host_uids[name] = (now, uid)
    return uid


def host_name(uid: int) -> str | None:
    """The name of `uid` on the controller's host, None if it has no such user."""
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


def names_root(name: str, uid: int | None) -> bool:
    """Whether (name, uid) is root by any account: root's name, uid 0, or a name whose uid is 0 here."""
    return name in ("root", ROOT_NAME) or uid == 0 or host_uid(name) == 0


def pair_conflict(name: str, uid: int) -> str | None:
    """Why (name, uid) disagrees with the controller host's user database, or None (agrees, or unknown
    there: the agent that runs the task checks its own)."""
    known_uid = host_uid(name)
    if known_uid is not None and known_uid != uid:
        return f"user {name} has uid {known_uid} on the controller's host, not {uid}"
    known_name = host_name(uid)
    if known_name is not None and known_name != name and known_uid is None:
        return f"uid {uid} is user {known_name} on the controller's host, not {name}"
    return None


def vouch_refusal(name: str, uid: int, *, vouch_for_root: bool, min_uid: int, ask_host: bool = True) -> str | None:
    """Why a node's agent may not vouch for (name, uid), or None. Root (by name or uid, whatever the
    other says) only where `vouch_for_root` ([auth] agents_vouch_for_admins); a system account (uid below
    `min_uid`, [auth] agents_vouch_min_uid) never; a pair the controller's host contradicts never.
    `ask_host=False`: without the host's user database (up to ~85 us a lookup here, NSS), for a
    credential already checked with it when it was issued: only what the settings decide."""
    if name in ("root", ROOT_NAME) or uid == 0 or ask_host and host_uid(name) == 0:
        if not vouch_for_root:
            return (f"an agent cannot vouch for root (user {name}, uid {uid}): a compromised node would be root "
                    "on every node ([auth] agents_vouch_for_admins = true allows it)")
        if name not in ("root", ROOT_NAME) or uid != 0:
            return f"user {name} with uid {uid} is not root's account (root is {ROOT_NAME}, uid 0)"
        return None
    if uid < min_uid:
        return (f"an agent cannot vouch for uid {uid} (user {name}): uids below {min_uid} are system accounts "
                "([auth] agents_vouch_min_uid)")
    return pair_conflict(name, uid) if ask_host else None


def owner_conflict(user: str, uid: int) -> str | None:
    """Why a job may not be recorded for (user, uid) as an admin wrote them, or None. Only what this
    host's user database contradicts for that name: an admin may submit for a user this host does not
    know (the agent that runs the job checks the pair against its own)."""
    if user in ("root", ROOT_NAME) and uid != 0:
        return f"user {user} is root, whose uid is 0, not {uid}"
    known_uid = host_uid(user)
    if known_uid is not None and known_uid != uid:
        return f"user {user} has uid {known_uid} on the controller's host, not {uid}"
    return None


def root_refusal(what: str, user: str, uid: int | None, submitter_is_root: bool) -> str | None:
    """Why `what` (a job, a token) for (user, uid) may not be had by this caller, or None: root's only by
    root authenticated on the controller's host (never on a node's word, nor by an admin who is not root).
    `uid`: the one the caller wrote, None where it comes from their own credential."""
    if names_root(user, uid) and not submitter_is_root:
        uid_text = "" if uid is None else f", uid {uid}"
        return (f"{what} as root (user {user}{uid_text}) is accepted only from root on the controller's host "
                "(its auth socket, the cluster secret or a token of root's), never through a node's agent")
    return None
