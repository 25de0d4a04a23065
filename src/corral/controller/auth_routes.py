"""HTTP routes for API tokens (`corral token ...`), the audit log (`corral audit`) and `whoami`."""
from __future__ import annotations

import asyncio
import pwd
import secrets
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from corral.api.fields import Comment, Name
from corral.controller import credentials as cred
from corral.controller import identity_rules
from corral.controller.auth import Principal
from corral.controller.guard import Guard
from corral.limits import INT32_MAX
from corral.protocol import API_PREFIX
from corral.store.auth_store import TokenRecord

MAX_TOKEN_LIFETIME_S = 366 * 86400
TokenIdPath = Annotated[int, Path(ge=1, le=INT32_MAX)]  # ids are INTEGER columns


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: Name | None = None  # default: the caller; another user: admins only
    expires_s: int = Field(30 * 86400, ge=60, le=MAX_TOKEN_LIFETIME_S, description="Lifetime in seconds")
    description: Comment = ""


class TokenOut(BaseModel):
    id: int
    user: str
    uid: int
    description: str
    created: float
    created_by: str
    expires: float
    revoked: float | None
    token: str | None = None  # only in the reply that creates it: it is stored hashed


class AuditOut(BaseModel):
    time: float
    who: str
    credential: str
    action: str
    target: str
    outcome: str
    detail: str


class WhoAmI(BaseModel):
    kind: str
    name: str
    uid: int | None
    credential: str
    roles: list[str]


def _token_out(record: TokenRecord, token: str | None = None) -> TokenOut:
    fields = {k: getattr(record, k) for k in TokenOut.model_fields if k != "token"}
    return TokenOut(**fields, token=token)


def _uid_of(user: str) -> int:
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        raise HTTPException(422, f"user {user!r} is unknown on the controller host") from None


def auth_routes(app: FastAPI, guard: Guard) -> None:  # noqa: C901 (a table of small handlers)
    user_dep = Depends(guard.user)
    store = guard.authn.tokens
    clock = guard.authn.clock

    @app.get(f"{API_PREFIX}/whoami")
    async def whoami(principal: Principal = user_dep) -> WhoAmI:
        roles = [r for r, has in (("admin", principal.admin), ("operator", principal.operator)) if has]
        return WhoAmI(kind=principal.kind, name=principal.name, uid=principal.uid,
                      credential=principal.credential, roles=roles)

    @app.post(f"{API_PREFIX}/tokens", status_code=201)
    async def create_token(body: TokenCreate, principal: Principal = user_dep) -> TokenOut:
        """A token for the caller (admins: for anyone); its text is in this reply only."""
        user = body.user or principal.name
        if principal.kind == "job":
            await guard.deny(principal, "create token", f"user {user}", "a job's credential cannot create tokens")
        if user != principal.name and not principal.admin:
            await guard.deny(principal, "create token", f"user {user}",
                             f"{principal.name} cannot create a token for {user} (only an admin can)")
        refusal = identity_rules.root_refusal("a token", user, None, principal.is_root_on_controller_host)
        if refusal:  # root's token would let an admin who is not root submit jobs as root
            await guard.deny(principal, "create token", f"user {user}", refusal)
        uid = principal.uid if user == principal.name and principal.uid is not None else _uid_of(user)
        secret, now = secrets.token_urlsafe(24), clock()
        token_id = await asyncio.to_thread(store.add_token, user, uid, cred.token_hash(secret), body.description,
                                           now, principal.name, now + body.expires_s)
        await guard.allow(principal, "create token", f"token {token_id}", f"for {user}")
        record = await asyncio.to_thread(store.token, token_id)
        assert record is not None  # just written
        return _token_out(record, cred.new_token(token_id, secret))

    @app.get(f"{API_PREFIX}/tokens")
    async def list_tokens(all: bool = Query(False, description="Every user's (admins)"),
                          principal: Principal = user_dep) -> list[TokenOut]:
        if all and not principal.admin:
            await guard.deny(principal, "list tokens", "all users", "only an admin can list every user's tokens")
        records = await asyncio.to_thread(store.tokens, None if all else principal.name)
        return [_token_out(r) for r in records]

    @app.delete(f"{API_PREFIX}/tokens/{{token_id}}", status_code=204)
    async def revoke_token(token_id: TokenIdPath, principal: Principal = user_dep) -> Response:
        record = await asyncio.to_thread(store.token, token_id)
        if record is None:
            raise HTTPException(404, f"unknown token {token_id}")
        if record.user != principal.name and not principal.admin:
            await guard.deny(principal, "revoke token", f"token {token_id}",
                             f"token {token_id} belongs to {record.user}")
        await asyncio.to_thread(store.revoke_token, token_id, clock())
        await guard.allow(principal, "revoke token", f"token {token_id}")
        return Response(status_code=204)

    @app.get(f"{API_PREFIX}/audit")
    async def audit(since: float | None = None,
                    limit: int = Query(1000, ge=1, le=100_000), principal: Principal = user_dep) -> list[AuditOut]:
        """The newest `limit` entries of the audit log (since `since`, epoch seconds), oldest first. Admins."""
        if not principal.admin:
            await guard.deny(principal, "read audit log", "", "only an admin can read the audit log")
        await guard.authn.flush_audit()
        entries = await asyncio.to_thread(store.audit_entries, since, limit)
        return [AuditOut(time=e.time, who=e.who, credential=e.credential, action=e.action, target=e.target,
                         outcome=e.outcome, detail=e.detail) for e in entries]
