"""`corral queue`, `corral show`, `corral cancel` (and `corral submit`, corral.cli.lean_submit) without Typer, click
or httpx: what people run most, started in tens of milliseconds instead of hundreds
(docs/decisions/0019-fast-commands.md).

`run(argv)` handles the plain forms of these commands, the same requests over the Slurm commands' stdlib
client (corral.slurm.common.http) and the same rendering (corral.cli.render) as corral.cli.jobs, and returns
the exit status. Anything else it returns None for, and the full command line (corral.cli.app) runs instead:
another command, --help, --watch, an option or form it does not parse (clustered flags such as `-al`), and
any failed read. A call is handed on only before anything was done (queue and show only read; cancel looks
every id up before it sends a cancel), so it is asked again and its error is the full command line's, word
for word; once a cancel was sent, this path reports what follows itself, and never sends it again."""
from __future__ import annotations

import os
import sys
import time
from _collections_abc import Mapping, Sequence

Options = dict[str, object]

# Per command: option spellings -> (name, takes a value). Nothing outside these tables is handled here.
QUEUE_OPTIONS = {
    "--all": ("all", False), "-a": ("all", False), "--long": ("long", False), "-l": ("long", False),
    "--json": ("json", False), "--user": ("user", True), "-u": ("user", True), "--states": ("states", True),
    "-t": ("states", True), "--url": ("url", True),
}
SHOW_OPTIONS = {"--json": ("json", False), "--url": ("url", True)}
CANCEL_OPTIONS = {"--url": ("url", True)}
ALREADY_ENDED = 409  # what the controller answers a cancel of a finished job: not an error for the user


def run(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> int | None:
    """The exit status of `corral ARGV` when handled here; None to hand it to the full command line."""
    if not argv:
        return None
    command, rest = argv[0], argv[1:]
    if command == "queue":
        options = parse_options(rest, QUEUE_OPTIONS)
        return None if options is None or options.get("args") else _queue(options, env)
    if command == "show":
        options = parse_options(rest, SHOW_OPTIONS)
        return None if options is None else _show(options, env)
    if command == "cancel":
        options = parse_options(rest, CANCEL_OPTIONS)
        return None if options is None else _cancel(options, env)
    if command == "submit":
        from corral.cli.lean_submit import run_submit

        return run_submit(rest, env)
    return None


def parse_options(args: Sequence[str], table: Mapping[str, tuple[str, bool]]) -> Options | None:
    """Options by name and the positional arguments (`args`), as click reads them for these tables; None
    for anything else (click then says what is wrong, or does what was asked)."""
    options: Options = {}
    positional: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            positional.extend(args[index:])
            break
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        spelling, has_value, value = arg.partition("=") if arg.startswith("--") else (arg[:2], False, arg[2:])
        known = table.get(spelling)
        if known is None:
            return None
        name, takes_value = known
        if not takes_value:
            if has_value or value:  # --json=x, or -al: click's own rules
                return None
            options[name] = True
            continue
        if not has_value and not value:
            if index >= len(args):
                return None
            value = args[index]
            index += 1
        options[name] = value
    options["args"] = positional
    return options


def _controller(options: Options, env: Mapping[str, str]):  # noqa: ANN202 - corral.slurm.common.http.Controller
    """The same cluster, credential and leader wait as corral.cli.connect.open_client."""
    from corral.slurm.common.http import Controller
    from corral.slurm.common.leader import leader_wait_s
    from corral.slurm.common.target import resolve_target

    url = options.get("url")
    target = resolve_target(env, url if isinstance(url, str) else None, reuse=True)
    return Controller(target.urls, target.secret, timeout_s=10.0, source=target.source, ca_file=target.ca_file,
                      leader_wait_s=leader_wait_s(env), reused_from=target.reused_from)


def _read(options: Options, env: Mapping[str, str], request, controller=None) -> object | None:  # noqa: ANN001
    """request(controller)'s answer (a new controller unless given); None where anything failed (the full
    command line then reports it)."""
    from corral.slurm.common.http import ControllerError
    from corral.slurm.common.target import TargetError

    try:
        return request(controller or _controller(options, env))
    except (ControllerError, TargetError, ValueError, OSError):
        return None


def _queue(options: Options, env: Mapping[str, str]) -> int | None:
    states = [part.strip().upper() for part in str(options.get("states") or "").split(",") if part.strip()]
    user = options.get("user")
    all_jobs, json_output = bool(options.get("all")), bool(options.get("json"))
    from corral.cli import render
    from corral.slurm.common.table import JobColumns

    long = bool(options.get("long"))
    params = {"all": all_jobs, "user": user, "states": states or None, "combine_arrays": not json_output}
    if json_output:
        records = _read(options, env, lambda controller: controller.pages("/jobs", params))
        return _print_json(records) if isinstance(records, list) else None
    fields = render.QUEUE_LONG_FIELDS if long else render.QUEUE_FIELDS
    table = _read(options, env, lambda controller: controller.job_columns("/jobs", params, fields))
    if not isinstance(table, JobColumns):
        return None
    if not len(table):
        sys.stdout.write(render.empty_queue_text(all_jobs, bool(user or states)) + "\n")
        return 0
    from corral.cli.tables import print_columns, print_table

    now = time.time()
    columns = render.queue_columns(table, now, long)
    if columns is not None:
        headers, right, state = ((render.QUEUE_LONG_HEADERS, render.QUEUE_LONG_RIGHT, render.QUEUE_LONG_STATE_COLUMN)
                                 if long else (render.QUEUE_HEADERS, render.QUEUE_RIGHT, render.QUEUE_STATE_COLUMN))
        print_columns(headers, columns, right, state_column=state)
        return 0
    from corral.slurm.squeue.select import combine_pending_array_tasks

    shown = combine_pending_array_tasks(table.records())
    if options.get("long"):
        print_table(render.QUEUE_LONG_HEADERS, render.queue_long_rows(shown, now), render.QUEUE_LONG_RIGHT,
                    state_column=render.QUEUE_LONG_STATE_COLUMN)
    else:
        print_table(render.QUEUE_HEADERS, render.queue_rows(shown, now), render.QUEUE_RIGHT,
                    state_column=render.QUEUE_STATE_COLUMN)
    return 0


def _show(options: Options, env: Mapping[str, str]) -> int | None:
    from corral.jobref import JobIdError, parse_job_ref

    args = options["args"]
    if not isinstance(args, list) or len(args) != 1:
        return None
    try:
        ref = parse_job_ref(args[0])
    except JobIdError:
        return None
    jobs = _read(options, env, lambda controller: controller.jobs(include_finished=True, ids=[ref.text]))
    if not isinstance(jobs, list) or not jobs:  # none: the full command line says it is not found
        return None
    whole_array = ref.tasks is None and jobs[0].get("array_job_id") == ref.job_id
    if options.get("json"):
        return _print_json(jobs if whole_array else jobs[0])
    from corral.cli import render

    blocks = [render.format_fields(render.job_fields(job)) + render.history_lines(job) for job in jobs]
    lines = [line for index, block in enumerate(blocks) for line in ([""] if index else []) + block]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _cancel(options: Options, env: Mapping[str, str]) -> int | None:
    """Every id is looked up first (reads: any failure hands the whole call on, nothing done yet); then the
    cancels are sent, and from there on this path reports its own errors as the Typer command does."""
    from corral.jobref import JobIdError, parse_job_ref

    args = options["args"]
    if not isinstance(args, list) or not args:
        return None
    try:
        refs = [parse_job_ref(arg, task_lists=True) for arg in args]
    except JobIdError:
        return None
    from corral.slurm.common.target import TargetError

    try:
        controller = _controller(options, env)
    except (TargetError, ValueError, OSError):  # the Typer command reports a bad setting in its own words
        return None
    named = _read(options, env, lambda found: [found.jobs(ids=[ref.text], include_finished=True) for ref in refs],
                  controller)
    if not isinstance(named, list):
        return None
    unknown = 0
    for ref, jobs in zip(refs, named, strict=True):
        if not jobs:
            unknown += 1
            sys.stderr.write(f"corral: error: job {ref} not found\n")
            continue
        if not _cancel_each(controller, ref.text, jobs):
            return 1
    return 1 if unknown else 0


def _cancel_each(controller, ref: str, jobs: list) -> bool:  # noqa: ANN001 - corral.slurm.common.http.Controller
    """Cancel `jobs` (what `ref` names), printing as corral.cli.jobs does; False after an error it printed."""
    from corral.cli.render import cancelled_line
    from corral.slurm.common.http import ApiError, ControllerError

    ended: list[str] = []
    for job in jobs:
        try:
            done = controller.call("POST", f"/jobs/{job['id']}/cancel")
        except ApiError as exc:
            from corral.cli.client import error_message  # the Typer command's words for a refusal

            message = error_message(exc.status, _detail_body(exc.detail))
            if exc.status != ALREADY_ENDED:
                sys.stderr.write(f"corral: error: {message}\n")
                return False
            ended.append(message)
            continue
        except ControllerError as exc:  # sent, perhaps acted on: never sent again
            sys.stderr.write(f"corral: error: {exc} (the cancel may have been done: check with corral queue)\n")
            return False
        sys.stdout.write(cancelled_line(done) + "\n")
        sys.stdout.flush()
    if len(jobs) == 1 and ended:
        sys.stderr.write(f"corral: job {ref} not cancelled: {ended[0]}\n")
    elif ended:
        sys.stderr.write(f"corral: {len(ended)} of the {len(jobs)} jobs of {ref} had already ended\n")
    return True


def _detail_body(detail: str) -> str:
    import json

    return json.dumps({"detail": detail})


def _print_json(data: object) -> int:
    import json

    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    return 0
