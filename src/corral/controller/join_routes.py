"""One-time join tokens: an admin makes one (`corral token create --join`), a new machine's agent exchanges
it once for its node's agent credential (`corral agent join`). docs/security.md has the threat model."""
from __future__ import annotations

import asyncio
import hmac
import secrets
from collections.abc import Callable
from typing import Annotated, NoReturn

from fastapi import Depends, FastAPI, HTTPException, Request, Response, Security
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from corral.api.fields import Comment
from corral.controller import credentials as cred
from corral.controller.auth import Principal
from corral.controller.auth_routes import TokenIdPath
from corral.controller.guard import DENIED, Guard, bearer
from corral.hostlist import check_node_name
from corral.protocol import API_PREFIX, JoinReply, JoinRequest
from corral.store.auth_store import JoinTokenRecord

DEFAULT_JOIN_TOKEN_LIFETIME_S = 3600
# Long enough to install a rack, short enough that a token left in a shell history is soon worthless.
MAX_JOIN_TOKEN_LIFETIME_S = 7 * 86400
ACTION = "join node"
_KINDS = {"user": "a user", "job": "a job", "agent": "an agent", "service": "the service"}


class JoinTokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node: Annotated[str, AfterValidator(check_node_name)] | None = None  # None: any node not in the cluster
    expires_s: int = Field(DEFAULT_JOIN_TOKEN_LIFETIME_S, ge=60, le=MAX_JOIN_TOKEN_LIFETIME_S,
                           description="Lifetime in seconds")
    description: Comment = ""


class JoinTokenOut(BaseModel):
    id: int
    node: str | None
    description: str
    created: float
    created_by: str
    expires: float
    revoked: float | None
    used: float | None
    used_by: str | None
    used_from: str | None
    token: str | None = None  # only in the reply that creates it: it is stored hashed


def _out(record: JoinTokenRecord, token: str | None = None) -> JoinTokenOut:
    fields = {k: getattr(record, k) for k in JoinTokenOut.model_fields if k != "token"}
    return JoinTokenOut(**fields, token=token)


def join_routes(app: FastAPI, guard: Guard, node_exists: Callable[[str], bool]) -> None:
    """`node_exists(name)`: whether the cluster knows the node (it registered once)."""
    user_dep = Depends(guard.user)
    store = guard.authn.tokens

    async def admin_only(principal: Principal, action: str, target: str) -> None:
        if principal.kind == "job":  # even an admin's job: what runs in a job cannot let machines in
            await guard.deny(principal, action, target, "a job's credential cannot handle join tokens")
        if not principal.admin:
            await guard.deny(principal, action, target, f"{action} needs the admin role: a node's agent can "
                             "vouch for any ordinary user")

    @app.post(f"{API_PREFIX}/join-tokens", status_code=201)
    async def create_join_token(body: JoinTokenCreate, principal: Principal = user_dep) -> JoinTokenOut:
        """A one-time token that joins one new machine (admins); its text is in this reply only."""
        await admin_only(principal, "create join token", f"node {body.node or '(any new)'}")
        secret, now = secrets.token_urlsafe(24), guard.authn.clock()
        token_id = await asyncio.to_thread(store.add_join_token, cred.token_hash(secret), body.node,
                                           body.description, now, principal.name, now + body.expires_s)
        await guard.allow(principal, "create join token", f"join token {token_id}",
                          f"for node {body.node or '(any new)'}, valid {body.expires_s} s")
        record = await asyncio.to_thread(store.join_token, token_id)
        assert record is not None  # just written
        return _out(record, cred.new_token(token_id, secret, cred.JOIN_PREFIX))

    @app.get(f"{API_PREFIX}/join-tokens")
    async def list_join_tokens(principal: Principal = user_dep) -> list[JoinTokenOut]:
        await admin_only(principal, "list join tokens", "")
        return [_out(r) for r in await asyncio.to_thread(store.join_tokens)]

    @app.delete(f"{API_PREFIX}/join-tokens/{{token_id}}", status_code=204)
    async def revoke_join_token(token_id: TokenIdPath, principal: Principal = user_dep) -> Response:
        await admin_only(principal, "revoke join token", f"join token {token_id}")
        if await asyncio.to_thread(store.join_token, token_id) is None:
            raise HTTPException(404, f"unknown join token {token_id}")
        await asyncio.to_thread(store.revoke_join_token, token_id, guard.authn.clock())
        await guard.allow(principal, "revoke join token", f"join token {token_id}")
        return Response(status_code=204)

    async def join_token(request: Request,
                         credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> str:
        """The bearer, a join token; any other credential is refused here (401 or 403, audited)."""
        text = credentials.credentials if credentials else None
        if not text or not text.startswith(cred.JOIN_PREFIX):
            principal = await guard.principal(request, credentials)  # 401 for none or a bad one
            await guard.deny(principal, ACTION, "", f"{_KINDS.get(principal.kind, principal.kind)} credential "
                             "cannot join a node: only a join token can (corral token create --join)")
        return text

    @app.post(f"{API_PREFIX}/agents/join")
    async def join(body: JoinRequest, request: Request, token: str = Depends(join_token)) -> JoinReply:
        """Exchange a one-time join token (the bearer) for node `node`'s agent credential. The token is
        used up by the first join that presents it; every refusal is audited and changes nothing."""
        address = request.client.host if request.client else "-"
        await _use_token(guard, token, body.node, address, node_exists)
        return JoinReply(node=body.node, credential=cred.issue_agent(guard.authn.key, body.node))


async def _use_token(guard: Guard, text: str, node: str, address: str, node_exists: Callable[[str], bool]) -> None:
    """Use the token up for `node`, audited; or refuse (401 or 403, audited) and change nothing."""
    store, now = guard.authn.tokens, guard.authn.clock()
    try:
        token_id, secret = cred.split_token(text, cred.JOIN_PREFIX)
    except cred.BadCredential as exc:
        await _refuse(guard, Principal("agent", node, credential="join token ?"), 401, str(exc), address)
    joiner = Principal("agent", node, credential=f"join token {token_id}")
    record = await asyncio.to_thread(store.join_token, token_id)
    if record is None or not hmac.compare_digest(record.secret_sha256, cred.token_hash(secret)):
        await _refuse(guard, joiner, 401, f"join token {token_id} is unknown or its secret is wrong", address)
    if record.node is not None and record.node != node:
        await _refuse(guard, joiner, 403, f"join token {token_id} is for node {record.node}, not {node}", address)
    if record.node is None and node_exists(node):
        await _refuse(guard, joiner, 403, f"node {node} is already in the cluster: only a join token made for it "
                      f"(corral token create --join --node {node}) joins it again", address)
    # Unused, unrevoked and unexpired are checked by the UPDATE that uses the token up, atomically.
    if not await asyncio.to_thread(store.use_join_token, token_id, node, address, now):
        current = await asyncio.to_thread(store.join_token, token_id)
        await _refuse(guard, joiner, 401, _why_unusable(token_id, current or record, now), address)
    await guard.allow(joiner, ACTION, f"node {node}", f"from {address}; token made by {record.created_by}")


def _why_unusable(token_id: int, record: JoinTokenRecord, now: float) -> str:
    if record.used is not None:
        return f"join token {token_id} was already used"
    if record.revoked is not None:
        return f"join token {token_id} was revoked"
    return f"join token {token_id} expired" if record.expires <= now else f"join token {token_id} cannot be used"


async def _refuse(guard: Guard, joiner: Principal, status: int, reason: str, address: str) -> NoReturn:
    outcome = "unauthenticated" if status == 401 else "denied"
    await guard.authn.audit(joiner, ACTION, f"node {joiner.name}", outcome, f"{reason} (from {address})")
    if status == 401:
        raise HTTPException(401, f"not authenticated: {reason}", headers={"WWW-Authenticate": "Bearer"})
    raise HTTPException(403, f"{DENIED}: {reason}")
