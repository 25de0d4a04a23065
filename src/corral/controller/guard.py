"""Authorization: FastAPI dependencies that authenticate a request and decide what its principal may do,
with an audit entry for every change and every refusal (docs/security.md lists what each role may do)."""
from __future__ import annotations

import math
from typing import NoReturn

from fastapi import HTTPException, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from corral.api.tenancy import TenancySpec
from corral.controller.auth import Authenticator, Principal, Unauthenticated
from corral.controller.body_gate import PRINCIPAL_KEY, RATE_TAKEN_KEY
from corral.controller.ratelimit import RATE_LIMITED, RateLimiter
from corral.engine.records import Job

DENIED = "Access/permission denied"

bearer = HTTPBearer(auto_error=False, scheme_name="Credential",
                    description="A credential: an API token (`corral token create`), a user credential from the "
                                "controller's auth socket, or the cluster's service secret.")


class Guard:
    def __init__(self, authenticator: Authenticator, tenancy, limiter: RateLimiter | None = None) -> None:
        self.authn = authenticator
        self._tenancy = tenancy  # () -> the live TenancySpec (the service replaces its engine)
        self.limiter = limiter  # None: no rate limit ([ratelimit] enabled = false)

    async def principal(self, request: Request,
                        credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> Principal:
        checked = request.scope.get(PRINCIPAL_KEY)
        if checked is not None:  # the body gate authenticated this request before reading its body
            return checked
        try:
            return await self.authn.authenticate(credentials.credentials if credentials else None)
        except Unauthenticated as exc:
            await self.authn.audit(None, f"{request.method} {request.url.path}", "", "unauthenticated", str(exc))
            raise HTTPException(401, f"not authenticated: {exc}", headers={"WWW-Authenticate": "Bearer"}) from None

    async def user(self, request: Request,
                   credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> Principal:
        """A principal that acts for users: agent credentials are refused here."""
        principal = await self.principal(request, credentials)
        if not principal.acts_for_users:
            await self.deny(principal, f"{request.method} {request.url.path}", "",
                            "an agent credential cannot be used on user routes")
        if not request.scope.get(RATE_TAKEN_KEY):  # the body gate takes it before reading a body
            refusal = self.rate_refusal(principal)
            if refusal is not None:
                raise refusal
        return principal

    def rate_refusal(self, principal: Principal) -> HTTPException | None:
        """Take a token of the user's bucket; or the 429 to answer. A job credential takes from its user's
        bucket (Slurm counts by uid): an array of tasks that poll must not escape the user's limit. Exempt,
        as in Slurm: the service credential and root. Not audited: a refusal that writes to the database
        would cost more than the request it spares."""
        limiter = self._limiter_of(principal)
        if limiter is None:
            return None
        wait_s = limiter.retry_after_s(principal.name)
        if wait_s is None:
            return None
        retry_after = max(1, math.ceil(wait_s))
        limits = limiter.settings
        return HTTPException(429, f"{RATE_LIMITED}: user {principal.name} sent more than {limits.bucket_size} "
                                  f"requests at once or more than {limits.refill_rate} per "
                                  f"{limits.refill_period_s} s; retry in {retry_after} s",
                             headers={"Retry-After": str(retry_after)})

    def charge(self, principal: Principal, records: int) -> None:
        """A job list's cost beyond its request's token (ratelimit.py), to the same bucket and with the same
        exemptions as `rate_refusal`."""
        limiter = self._limiter_of(principal)
        if limiter is not None:
            limiter.charge(principal.name, records)

    def _limiter_of(self, principal: Principal) -> RateLimiter | None:
        """The rate limiter that counts this caller; None without limits, or for a caller exempt from them
        (as in Slurm: the service credential and root)."""
        if principal.kind == "service" or principal.admin and principal.uid == 0:
            return None
        return self.limiter

    async def agent(self, request: Request,
                    credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> Principal:
        """An agent (or the service credential): user, job and token credentials are refused here."""
        principal = await self.principal(request, credentials)
        if principal.kind not in ("agent", "service"):
            await self.deny(principal, f"{request.method} {request.url.path}", "",
                            "only a node's agent credential can be used on agent routes")
        node = request.path_params.get("node")
        if principal.kind == "agent" and node is not None and node != principal.name:
            await self.deny(principal, f"{request.method} {request.url.path}", node,
                            f"the agent credential of node {principal.name} cannot act for node {node}")
        return principal

    async def deny(self, principal: Principal, action: str, target: str, reason: str) -> NoReturn:
        await self.authn.audit(principal, action, target, "denied", reason)
        raise HTTPException(403, f"{DENIED}: {reason}")

    async def allow(self, principal: Principal, action: str, target: str, detail: str = "") -> None:
        await self.authn.audit(principal, action, target, "allowed", detail)

    async def require(self, principal: Principal, role: str, action: str, target: str = "") -> None:
        """`role` is "admin" or "operator"."""
        if not (principal.admin if role == "admin" else principal.operator):
            await self.deny(principal, action, target, f"{action} needs the {role} role")
        await self.allow(principal, action, target)

    async def job_action(self, principal: Principal, job: Job | None, action: str, job_id: int) -> None:
        """Allowed on one's own jobs, as a coordinator of the job's account, or as operator/admin. An
        unknown job passes (the route answers 404)."""
        if job is None:
            return
        reason = self.job_refusal(principal, job)
        if reason:
            await self.deny(principal, action, f"job {job_id}", reason)
        await self.allow(principal, action, f"job {job_id}")

    def job_refusal(self, principal: Principal, job: Job) -> str | None:
        if principal.operator or principal.uid == job.spec.uid and principal.name == job.spec.user:
            return None
        if principal.kind == "user" and job.spec.account in coordinated_accounts(self._tenancy(), principal.name):
            return None
        return (f"job {job.id} belongs to {job.spec.user} (account {job.spec.account}); "
                f"{principal.name} is neither its owner, a coordinator of its account, nor an operator")


def coordinated_accounts(spec: TenancySpec, user: str) -> set[str]:
    """The accounts `user` coordinates: those naming them, and every account below those."""
    children: dict[str | None, list[str]] = {}
    for account in spec.accounts:
        children.setdefault(account.parent, []).append(account.name)
    found: set[str] = set()
    pending = [a.name for a in spec.accounts if user in a.coordinators]
    while pending:
        name = pending.pop()
        if name not in found:
            found.add(name)
            pending.extend(children.get(name, []))
    return found
