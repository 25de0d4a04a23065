"""The controller's credentials in their compact text forms, signed with a key only the controller holds
(derived from the cluster secret): docs/security.md describes them and the threat model.

    cu1.<base64url "user:uid:gid:issued:expires:nonce[:node]">.<base64url HMAC-SHA256>   a user (an auth
        socket: the controller's, or node's agent's when the node vouched for the user)
    ca1.<node>.<hex HMAC-SHA256>                                                  a node's agent
    cj1.<job id>.<hex HMAC-SHA256 over the job id, its uid and submit time>        a job's own processes
    ct1.<token id>.<secret>                                                       an API token (stored hashed)
    cjt1.<token id>.<secret>      a one-time join token (stored hashed): exchanged once for an agent credential,
                                  never accepted as a credential itself

Anything else is compared with the cluster secret itself (the service credential: root's)."""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from corral.limits import INT32_MAX

USER_PREFIX, AGENT_PREFIX, JOB_PREFIX, TOKEN_PREFIX = "cu1.", "ca1.", "cj1.", "ct1."
JOIN_PREFIX = "cjt1."
# A credential issued "in the future" by up to this much is accepted: clocks of one host agree.
CLOCK_SKEW_S = 30


class BadCredential(Exception):
    """The credential cannot be accepted; the message says why (it goes into the 401 and the audit log)."""


def signing_key(cluster_secret: str) -> bytes:
    return hmac.new(cluster_secret.encode(), b"corral credential signing key v1", hashlib.sha256).digest()


def _sign(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raise BadCredential("malformed credential") from None


@dataclass(frozen=True, slots=True)
class UserClaim:
    user: str
    uid: int
    gid: int
    issued: float
    expires: float
    vouched_by: str | None = None  # the node whose agent vouched for the user; None: the controller's socket


def issue_user(key: bytes, user: str, uid: int, gid: int, now: float, ttl_s: float,
               vouched_by: str | None = None) -> str:
    payload = f"{user}:{uid}:{gid}:{int(now)}:{int(now + ttl_s)}:{secrets.token_hex(8)}"
    if vouched_by is not None:
        payload += f":{vouched_by}"
    return f"{USER_PREFIX}{_b64(payload.encode())}.{_b64(_sign(key, 'user:' + payload))}"


def verify_user(key: bytes, text: str, now: float) -> UserClaim:
    body, _, signature = text[len(USER_PREFIX):].partition(".")
    payload = _unb64(body).decode(errors="replace")
    if not hmac.compare_digest(_unb64(signature), _sign(key, "user:" + payload)):
        raise BadCredential("user credential has a bad signature")
    try:
        user, uid, gid, issued, expires, _nonce, *node = payload.split(":")
        if len(node) > 1 or node == [""]:
            raise ValueError(payload)
        claim = UserClaim(user, int(uid), int(gid), float(issued), float(expires), node[0] if node else None)
    except ValueError:
        raise BadCredential("malformed user credential") from None
    if claim.expires <= now:
        raise BadCredential("user credential expired")
    if claim.issued > now + CLOCK_SKEW_S:
        raise BadCredential("user credential issued in the future")
    return claim


def issue_agent(key: bytes, node: str) -> str:
    return f"{AGENT_PREFIX}{node}.{_sign(key, 'agent:' + node).hex()}"


def verify_agent(key: bytes, text: str) -> str:
    """The node the agent credential is for."""
    node, _, signature = text[len(AGENT_PREFIX):].rpartition(".")
    if not node or not hmac.compare_digest(signature, _sign(key, "agent:" + node).hex()):
        raise BadCredential("agent credential has a bad signature")
    return node


def _job_message(job_id: int, uid: int, submit_time: float) -> str:
    return f"job:{job_id}:{uid}:{submit_time!r}"


def issue_job(key: bytes, job_id: int, uid: int, submit_time: float) -> str:
    return f"{JOB_PREFIX}{job_id}.{_sign(key, _job_message(job_id, uid, submit_time)).hex()}"


def job_id_of(text: str) -> int:
    number, _, _ = text[len(JOB_PREFIX):].partition(".")
    if not number.isdigit():
        raise BadCredential("malformed job credential")
    return int(number)


def verify_job(key: bytes, text: str, uid: int, submit_time: float) -> None:
    job_id = job_id_of(text)
    _, _, signature = text[len(JOB_PREFIX):].partition(".")
    if not hmac.compare_digest(signature, _sign(key, _job_message(job_id, uid, submit_time)).hex()):
        raise BadCredential("job credential has a bad signature")


def new_token(token_id: int, secret: str, prefix: str = TOKEN_PREFIX) -> str:
    return f"{prefix}{token_id}.{secret}"


def split_token(text: str, prefix: str = TOKEN_PREFIX) -> tuple[int, str]:
    number, _, secret = text[len(prefix):].partition(".")
    # Token ids are INTEGER columns: a longer number is no token (and must not reach the database).
    if not number.isdigit() or len(number) > 10 or int(number) > INT32_MAX or not secret:
        raise BadCredential("malformed join token" if prefix == JOIN_PREFIX else "malformed token")
    return int(number), secret


def token_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
