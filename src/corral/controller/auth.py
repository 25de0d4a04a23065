"""Who is asking: the credential on a request becomes a Principal (docs/security.md).

Kinds: "service" (the cluster secret: root on the controller host, `corral up`'s starting user), "user" (a
credential from the auth socket or an API token), "job" (a job's own processes, acting as the job's user
while the job is active) and "agent" (one node's agent). Roles: admin, operator (config [auth]; uid 0 is
admin), and account coordinator (the tenancy's `coordinators`)."""
from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from corral.controller import credentials as cred
from corral.controller.credentials import BadCredential
from corral.controller.identity_rules import DEFAULT_VOUCH_MIN_UID, ROOT_NAME, vouch_refusal
from corral.engine.records import Job
from corral.store.auth_store import AuditEntry, AuthStore

log = logging.getLogger("corral.controller.auth")

DEFAULT_CREDENTIAL_TTL_S = 300


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """The controller config's [auth] section (docs/configuration.md)."""

    admins: frozenset[str] = frozenset()
    operators: frozenset[str] = frozenset()
    socket: str | None = None  # the auth socket's path; None: none is served
    credential_ttl_s: int = DEFAULT_CREDENTIAL_TTL_S
    # A credential an agent vouched for carries the admin/operator role (and may be root's) only with this.
    agents_vouch_for_admins: bool = False
    # Agents never vouch for a uid below this: the system's own accounts (docs/security.md).
    agents_vouch_min_uid: int = DEFAULT_VOUCH_MIN_UID
    # GET /metrics without a credential (for a Prometheus that cannot send a bearer token).
    public_metrics: bool = False


@dataclass(frozen=True, slots=True)
class Principal:
    kind: str  # "service", "user", "job", "agent"
    name: str  # the user name, or the node name for an agent
    uid: int | None = None
    credential: str = ""  # how it was proven, for the audit log: "socket", "token 3", "job 12", ...
    admin: bool = False
    operator: bool = False
    job_id: int | None = None  # the job a "job" credential belongs to
    vouched_by: str | None = None  # the node whose agent vouched for this user; None: not on a node's word

    @property
    def is_root_on_controller_host(self) -> bool:
        """Root, proven on the controller's host (its auth socket, the secret, root's token or root's job),
        not on a node's word: the only submitter of a job as root."""
        return self.kind == "service" or (self.uid == 0 and self.name == ROOT_NAME and self.vouched_by is None
                                          and self.acts_for_users)

    @property
    def acts_for_users(self) -> bool:
        return self.kind in ("service", "user", "job")


class Unauthenticated(Exception):
    pass


@dataclass
class Authenticator:
    """Turns a bearer credential into a Principal; the service gives it the jobs (for job credentials)."""

    secret: str
    settings: AuthSettings
    tokens: AuthStore
    find_job: Callable[[int], Job | None]
    clock: Callable[[], float] = time.time
    key: bytes = field(init=False)
    _audit_pending: list[AuditEntry] = field(init=False, default_factory=list)
    _audit_writer: asyncio.Task | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.key = cred.signing_key(self.secret)

    def roles(self, name: str, uid: int | None) -> tuple[bool, bool]:
        # uid 0 is admin only under root's own name: a job an admin submitted for another user without a
        # uid records uid 0, and its job credential must not act as an admin.
        admin = uid == 0 and name == ROOT_NAME or name in self.settings.admins
        return admin, admin or name in self.settings.operators

    def user(self, name: str, uid: int | None, credential: str, job_id: int | None = None) -> Principal:
        admin, operator = self.roles(name, uid)
        return Principal("job" if job_id is not None else "user", name, uid, credential, admin, operator, job_id)

    def job_credential(self, job: Job) -> str:
        return cred.issue_job(self.key, job.id, job.spec.uid, job.submit_time)

    async def authenticate(self, text: str | None) -> Principal:
        """The principal, or Unauthenticated with the reason."""
        if not text:
            raise Unauthenticated("no credential (Authorization: Bearer <credential>)")
        try:
            return await self._principal(text)
        except BadCredential as exc:
            raise Unauthenticated(str(exc)) from None

    async def _principal(self, text: str) -> Principal:
        now = self.clock()
        if text.startswith(cred.USER_PREFIX):
            claim = cred.verify_user(self.key, text, now)
            if claim.vouched_by is not None:
                return self._vouched(claim)
            return self.user(claim.user, claim.uid, "socket")
        if text.startswith(cred.AGENT_PREFIX):
            return Principal("agent", cred.verify_agent(self.key, text), credential="agent")
        if text.startswith(cred.JOB_PREFIX):
            return self._job(text)
        if text.startswith(cred.TOKEN_PREFIX):
            return await self._token(text, now)
        if text.startswith(cred.JOIN_PREFIX):
            raise BadCredential("a join token is not a credential: an agent exchanges it once for its node's "
                                "credential (corral agent join)")
        if hmac.compare_digest(text.encode(), self.secret.encode()):
            return Principal("service", "root", 0, "service", admin=True, operator=True)
        raise BadCredential("unknown credential")

    def vouch_refusal(self, name: str, uid: int, ask_host: bool = True) -> str | None:
        """Why an agent may not vouch for this user, or None (identity_rules.vouch_refusal)."""
        return vouch_refusal(name, uid, vouch_for_root=self.settings.agents_vouch_for_admins,
                             min_uid=self.settings.agents_vouch_min_uid, ask_host=ask_host)

    def _vouched(self, claim: cred.UserClaim) -> Principal:
        """A user an agent vouched for: their own rights; a role only where [auth] lets agents vouch for
        admins, so that root on one node does not become the cluster's admin."""
        # The host's user database was asked when the credential was issued; on every request only the
        # settings' rules again (they may have changed since), without its cost.
        refusal = self.vouch_refusal(claim.user, claim.uid, ask_host=False)
        if refusal:
            raise BadCredential(refusal)
        admin, operator = self.roles(claim.user, claim.uid) if self.settings.agents_vouch_for_admins else (False, False)
        return Principal("user", claim.user, claim.uid, f"vouched by agent {claim.vouched_by}", admin, operator,
                         vouched_by=claim.vouched_by)

    def _job(self, text: str) -> Principal:
        job_id = cred.job_id_of(text)
        job = self.find_job(job_id)
        if job is None:
            raise BadCredential(f"job credential for unknown job {job_id}")
        cred.verify_job(self.key, text, job.spec.uid, job.submit_time)
        if job.state.terminal:
            raise BadCredential(f"job credential of job {job_id}, which has ended")
        return self.user(job.spec.user, job.spec.uid, f"job {job_id}", job_id=job_id)

    async def _token(self, text: str, now: float) -> Principal:
        token_id, secret = cred.split_token(text)
        record = await asyncio.to_thread(self.tokens.token, token_id)
        if record is None or not hmac.compare_digest(record.secret_sha256, cred.token_hash(secret)):
            raise BadCredential(f"token {token_id} is unknown or its secret is wrong")
        if record.revoked is not None:
            raise BadCredential(f"token {token_id} was revoked")
        if record.expires <= now:
            raise BadCredential(f"token {token_id} expired")
        return self.user(record.user, record.uid, f"token {token_id}")

    async def audit(self, principal: Principal | None, action: str, target: str, outcome: str,
                    detail: str = "") -> None:
        """One audit entry, written with the others that arrive meanwhile (flush_audit waits for them)."""
        self._audit_pending.append(AuditEntry(self.clock(), principal.name if principal else "-",
                                              principal.credential if principal else "-", action, target,
                                              outcome, detail))
        if self._audit_writer is None or self._audit_writer.done():
            self._audit_writer = asyncio.get_running_loop().create_task(self._write_audit())

    async def flush_audit(self) -> None:
        """Return once every entry recorded so far is in the database (or reported lost)."""
        while self._audit_writer is not None and not self._audit_writer.done():
            await asyncio.shield(self._audit_writer)

    async def _write_audit(self) -> None:
        # One transaction per batch, not per request: a burst of submissions costs a few commits.
        while self._audit_pending:
            batch, self._audit_pending = self._audit_pending, []
            try:
                # On the loop when the lock is free (SQLite: a fraction of the hop to a thread and back).
                if not self.tokens.try_audit(*batch):
                    await asyncio.to_thread(self.tokens.audit, *batch)
            except Exception as exc:  # noqa: BLE001 - the audit log must never turn a reply into a 500
                log.warning("%d audit entries not written (%s): %s", len(batch), exc, batch)
