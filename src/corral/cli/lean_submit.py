"""`corral submit` without Typer, click or httpx (issue 24 item 3; decisions 0019 and 0021): the same command line
and job body as the Typer command (corral.cli.submit_line), sent over the Slurm commands' stdlib client
(corral.slurm.common.http), with the Typer command's outputs, messages and exit statuses.

It hands the call on (returns None, and the Typer command runs it from the start) only where nothing was read
from stdin nor sent: a controller setting it cannot use (the Typer command words that error). Once the job's
body is built it reports everything itself; once the POST may have reached a controller it is never sent again.
Where the request failed after it was sent (a connection closed or timed out while waiting for the answer), its
message says the job may have been submitted: the one place where its words are not the Typer command's."""
from __future__ import annotations

import sys
from _collections_abc import Mapping, Sequence

SUBMIT_TIMEOUT_S = 10.0  # corral.cli.connect.open_client's


def run_submit(args: Sequence[str], env: Mapping[str, str]) -> int | None:
    """The exit status of `corral submit ARGS`; None to hand it to the Typer command."""
    from corral.cli.errors import CliError
    from corral.cli.submit_line import USAGE, build_body, split_command_line
    from corral.jobscript.errors import DirectiveError

    try:
        line = split_command_line(args)
    except (CliError, DirectiveError) as exc:
        _error(str(exc))
        return 1
    if line.help:
        sys.stdout.write(USAGE)
        return 0
    controller = _controller(line.url, env)
    if controller is None:
        return None  # a setting the Typer command reports in its own words; nothing read or sent yet
    try:
        body = build_body(line, sys.stdin, env)
    except (CliError, DirectiveError) as exc:
        _error(str(exc))
        return 1
    reply = _post(controller, body)
    if not isinstance(reply, dict):
        return 1
    if line.json:
        import json

        sys.stdout.write(json.dumps(reply, indent=2) + "\n")
    elif line.parsable:
        sys.stdout.write(f"{reply['job_id']}\n")
    else:
        sys.stdout.write(f"Submitted job {reply['job_id']}\n")
    return 0


def _controller(url_option: str | None, env: Mapping[str, str]):  # noqa: ANN202 - corral.slurm.common.http.Controller
    """As corral.cli.connect.open_client (the same target, URL checks and leader wait); None where the
    Typer command would report an error."""
    from corral.cli.errors import ConfigError
    from corral.slurm.common.http import Controller
    from corral.slurm.common.leader import leader_wait_s
    from corral.slurm.common.target import TargetError, resolve_target

    try:
        target = resolve_target(env, url_option, reuse=True)
        from corral.cli.config import check_url

        for url in target.urls:
            check_url(url, target.source)
        wait_s = leader_wait_s(env)
    except (TargetError, ConfigError, ValueError, OSError):
        return None
    return Controller(target.urls, target.secret, timeout_s=SUBMIT_TIMEOUT_S, source=target.source,
                      ca_file=target.ca_file, leader_wait_s=wait_s, reused_from=target.reused_from)


def _post(controller, body: dict) -> dict | None:  # noqa: ANN001 - corral.slurm.common.http.Controller
    """The controller's reply to POST /jobs, sent once; None after printing what went wrong, as
    corral.cli.client.Client words it."""
    from corral.cli.client import error_message
    from corral.slurm.common import jsontext
    from corral.slurm.common.http import ApiError, ControllerError, NotReached

    try:
        (status, data), _headers = controller.exchange("POST", "/jobs", body=body, decode=_as_sent)
    except NotReached as exc:
        _error(_unreached(controller, exc))
        return None
    except ApiError as exc:  # over the rate limit after every retry: refused, not done
        _error(error_message(exc.status, jsontext.dumps({"detail": exc.detail})))
        return None
    except ControllerError as exc:  # sent, perhaps acted on: never sent again
        _error(f"{exc} (the job may have been submitted: check with corral queue)")
        return None
    text = data.decode("utf-8", "replace")
    if status >= 400:
        _error(error_message(status, text))
        return None
    try:
        reply = jsontext.loads(data)
    except ValueError:
        reply = None
    if not isinstance(reply, dict) or "job_id" not in reply:
        _error(f"the controller at {controller.url} sent a reply that is not JSON")
        return None
    return reply


def _unreached(controller, exc) -> str:  # noqa: ANN001
    """corral.cli.client.ControllerUnreachable's words for a request no controller took."""
    urls = ", ".join(controller.controllers.urls)
    if len(controller.controllers.urls) == 1 and exc.no_leader.waited_s is None:
        return f"cannot reach the controller at {urls} (is 'corral up' running?)"
    return f"no leading controller at {urls}: {exc.no_leader.reason} (is 'corral up' running?)"


def _as_sent(status: int, data: bytes) -> tuple[int, bytes]:
    return status, data


def _error(message: str) -> None:
    sys.stderr.write(f"corral: error: {message}\n")
