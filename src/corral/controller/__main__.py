"""python -m corral.controller --listen HOST:PORT --db URL --secret-file PATH [--config PATH]
[--auth-socket PATH] [--tls-cert PEM --tls-key PEM] [--advertise-url URL]; or --secret-file PATH
--agent-credential NODE to print a node's agent credential.

Controllers started with the same --db take turns leading (controller/leadership.py): each names itself
by --advertise-url, which a standby gives clients as the leader's address."""
from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import sys
import time
from pathlib import Path

DB_WAIT_S = 60.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="corral-controller", description="corral controller daemon")
    p.add_argument("--listen", default="127.0.0.1:6817", help="HOST:PORT to serve the API on")
    p.add_argument("--db", default=None, help="SQLAlchemy URL (default: sqlite in the state dir)")
    p.add_argument("--db-wait", type=float, default=DB_WAIT_S, metavar="SECONDS",
                   help=f"how long to keep trying a PostgreSQL server that cannot be reached yet at start (default "
                        f"{DB_WAIT_S:g}): a standby started while the database restarts waits for it")
    p.add_argument("--secret-file", required=True, help="file holding the cluster secret")
    p.add_argument("--config", default=None, help="TOML configuration (partitions, scheduler)")
    p.add_argument("--auth-socket", default=None, metavar="PATH",
                   help="serve user credentials on this Unix socket (overrides the config's [auth] socket)")
    p.add_argument("--state-dir", default=None, help="where the default SQLite database lives")
    p.add_argument("--agent-credential", default=None, metavar="NODE",
                   help="print node NODE's agent credential (for its agent's --secret-file) and exit")
    p.add_argument("--tls-cert", default=None, metavar="PEM",
                   help="serve HTTPS with this certificate (chain) file; needs --tls-key")
    p.add_argument("--tls-key", default=None, metavar="PEM", help="the private key of --tls-cert")
    p.add_argument("--advertise-url", default=None, metavar="URL",
                   help="the URL clients and agents reach this controller at, which standbys name when it leads "
                        "(default: from --listen, this host's name for a wildcard address)")
    p.add_argument("--cluster-id", default=None, type=_cluster_id, metavar="ID",
                   help="the cluster's id on its hosts (`corral up` gives one), which /health tells a machine "
                        "joining the cluster so that its agent carries it too (docs/security.md)")
    p.add_argument("--gateway-url", default=None, metavar="URL",
                   help="the services' gateway as users' browsers reach it, which /health tells the dashboard "
                        "(overrides the config's [gateway] url; `corral up` gives the gateway it starts)")
    p.add_argument("--log-level", default="info")
    return p.parse_args(argv)


def _cluster_id(text: str) -> str:
    from corral.protocol import check_cluster_id

    try:
        return check_cluster_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def open_store(url: str, wait_s: float):
    """The store; a PostgreSQL server that refuses or drops connections is tried again for `wait_s` (a
    database restarting, or not started yet, as when `corral up` or systemd start everything at once).
    Anything else (a bad URL, a refused login, a SQLite file that cannot be opened) fails at once."""
    from sqlalchemy.exc import OperationalError

    from corral.store import Store, StoreError

    deadline, said = time.monotonic() + wait_s, False
    while True:
        try:
            return Store.open(url)
        except StoreError as exc:
            transient = url.startswith("postgresql") and isinstance(exc.__cause__, OperationalError) and (
                "connection failed" in str(exc) or "could not connect" in str(exc))
            if not transient or time.monotonic() >= deadline:
                raise
            if not said:
                logging.getLogger("corral.controller").warning(
                    "%s; trying again for up to %g s", exc, max(0.0, deadline - time.monotonic()))
                said = True
            time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        print(f"corral-controller: error: --listen must be HOST:PORT, not {args.listen!r}", file=sys.stderr)
        return 2
    secret = _read_secret(args.secret_file)
    if secret is None:
        return 2
    if args.agent_credential:
        from corral.controller.credentials import issue_agent, signing_key

        print(issue_agent(signing_key(secret), args.agent_credential))
        return 0
    tls_problem = _check_tls(args.tls_cert, args.tls_key)
    if tls_problem:
        print(f"corral-controller: error: {tls_problem}", file=sys.stderr)
        return 2
    from corral.controller.settings import (
        SettingsError,
        check_gateway_url,
        load_auth_settings,
        load_gateway_url,
        load_http_settings,
        load_ratelimit_settings,
        load_settings,
    )
    from corral.store import StoreError
    from corral.unix_auth_socket import listening

    try:
        config, tenancy = load_settings(args.config)
        auth = load_auth_settings(args.config)
        ratelimit = load_ratelimit_settings(args.config)
        http = load_http_settings(args.config)
        gateway_url = (check_gateway_url(args.gateway_url, "--gateway-url") if args.gateway_url is not None
                       else load_gateway_url(args.config))
    except SettingsError as exc:
        print(f"corral-controller: error: {exc}", file=sys.stderr)
        return 2
    state_dir = Path(args.state_dir or Path.home() / ".local/state/corral")
    url = args.db or f"sqlite:///{state_dir / 'corral.db'}"
    try:
        store = open_store(url, args.db_wait)
    except StoreError as exc:
        print(f"corral-controller: error: {exc}", file=sys.stderr)
        return 2
    if args.auth_socket:
        auth = dataclasses.replace(auth, socket=os.path.abspath(args.auth_socket))
    if auth.socket and listening(auth.socket):  # serving it would cut another cluster's users off
        print(f"corral-controller: error: the auth socket {auth.socket} is served by another running process: "
              "give each cluster its own (--auth-socket, or [auth] socket)", file=sys.stderr)
        return 2
    advertise_url = args.advertise_url or default_advertise_url(host, int(port), tls=args.tls_cert is not None)
    if not advertise_url.startswith(("http://", "https://")):
        print(f"corral-controller: error: --advertise-url must be an http:// or https:// URL, not {advertise_url!r}",
              file=sys.stderr)
        return 2
    app = build_app(config, store, secret, tenancy=tenancy, auth=auth, advertise_url=advertise_url.rstrip("/"),
                    ratelimit=ratelimit, http=http, cluster_id=args.cluster_id, gateway_url=gateway_url,
                    settle_heap=True)
    return _serve(app, host, int(port), http, args.tls_cert, args.tls_key)


def default_advertise_url(host: str, port: int, tls: bool) -> str:
    """This controller's URL as its peers' clients can use it: the --listen address, or this host's name
    when that address is a wildcard."""
    if host in ("0.0.0.0", "::", "[::]"):
        import socket

        host = socket.getfqdn()
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}"


def fencing_after_s(node_timeout_s: float) -> float | None:
    """How long an agent may be without contact before its task leaders kill the node's tasks (decision 0017):
    two thirds of the node timeout, so that the last third is left for the kill (a leader looks every
    fence_after_s / 8, at most every second, and SIGKILL is immediate) and for clocks running at slightly
    different rates. None: no fencing, as no node is ever declared down (the setting self_fencing = false
    turns it off too)."""
    if not math.isfinite(node_timeout_s):
        return None
    return node_timeout_s * 2 / 3


def build_app(config, store, secret: str, clock=time.time, tenancy=None, auth=None, advertise_url: str | None = None,
              ratelimit=None, http=None, cluster_id: str | None = None, gateway_url: str | None = None,
              settle_heap: bool = False):
    """The controller's app. With `advertise_url`, it takes part in leadership (the lease loop starts with
    the app): it builds its engine when it takes the lease. Without, it leads alone, engine built now.
    With `settle_heap` (the controller's own process, not an app built inside another), Python's collector
    is settled after every engine is built (corral/collector.py), so that cycles do not walk the restored
    state."""
    from corral.controller.app import create_app
    from corral.controller.restore import restore_engine
    from corral.controller.service import ControllerService
    from corral.engine.config import LIVE

    def restore(now: float):
        return restore_engine(config, LIVE, store, now, tenancy)

    # Agents poll at least three times per node timeout, so one late poll never makes a node look lost.
    heartbeat_s = min(5.0, config.node_timeout_s / 3)
    fence_after_s = fencing_after_s(config.node_timeout_s) if config.self_fencing else None
    after_install = None
    if settle_heap:
        from corral import collector

        after_install = collector.settle
    # The same function builds the engine now (or on taking the lease) and again after a failed commit.
    if advertise_url is None:
        service = ControllerService(restore(clock()), store, clock, heartbeat_s=heartbeat_s, restore=restore,
                                    fence_after_s=fence_after_s, after_install=after_install)
    else:
        from corral.controller.leadership import Leadership

        service = ControllerService(None, store, clock, heartbeat_s=heartbeat_s, restore=restore,
                                    leadership=Leadership(store, advertise_url), config=config,
                                    fence_after_s=fence_after_s, after_install=after_install)
    return create_app(service, secret, auth, ratelimit, http, cluster_id, gateway_url)


def _read_secret(path: str) -> str | None:
    try:
        secret = Path(path).read_text().strip()
    except OSError as exc:
        print(f"corral-controller: error: cannot read secret file: {exc}", file=sys.stderr)
        return None
    if not secret:
        print(f"corral-controller: error: secret file {path} is empty", file=sys.stderr)
        return None
    return secret


def _check_tls(cert: str | None, key: str | None) -> str | None:
    """Why the certificate and key cannot serve HTTPS (loaded as the server will load them), or None."""
    if (cert is None) != (key is None):
        return "--tls-cert and --tls-key go together"
    if cert is None:
        return None
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except ssl.SSLError as exc:  # an OSError too: caught first
        return f"the TLS certificate {cert} and key {key} cannot be used together: {exc.reason or exc}"
    except OSError as exc:
        return f"cannot read the TLS certificate or key ({exc.filename or cert}): {exc.strerror or exc}"
    return None


def _serve(app, host: str, port: int, http, tls_cert: str | None = None, tls_key: str | None = None) -> int:
    import uvicorn

    from corral.controller.http_server import server_config

    # Agents hold long polls open: do not wait for them at shutdown (they reconnect and re-register).
    server = uvicorn.Server(server_config(app, host, port, http.idle_timeout_s, http.header_timeout_s,
                                          log_level="warning", access_log=False, timeout_graceful_shutdown=1,
                                          ssl_certfile=tls_cert, ssl_keyfile=tls_key))
    server.run()
    return 0 if server.started else 1


if __name__ == "__main__":
    sys.exit(main())
