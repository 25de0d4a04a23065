"""A load generator that is not the bottleneck: submissions due at fixed times, POSTed by several processes,
each with a few threads on their own keep-alive `http.client` connections and bodies serialized once. One
Python process with httpx's async client managed about 45 submissions/s on this loaded 2-core machine, far
below what Kueue's baseline offers (385/s in its first 35 s) and the 1,000/s asked of the controller.

    submitted = submit_on_schedule(url, secret, [(due_offset_s, body), ...], processes=4, threads=4)

Returns, per submission in the order given, (job id, due wall time, answered wall time)."""
from __future__ import annotations

import http.client
import json
import multiprocessing
import threading
import time
from urllib.parse import urlsplit

API = "/api/v1"


def _submit_share(url: str, secret: str, t0: float, share: list[tuple[int, float, bytes]], threads: int
                  ) -> list[tuple[int, int, float]]:
    """This process's submissions (index, due offset, body), `threads` at a time; (index, job id, answered)."""
    parts = urlsplit(url)
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    out: list[tuple[int, int, float]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(items: list[tuple[int, float, bytes]]) -> None:
        try:
            post_all(items)
        except BaseException as error:  # re-raised in the process below, with the others' results dropped
            errors.append(error)

    def post_all(items: list[tuple[int, float, bytes]]) -> None:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        mine = []
        for index, due, body in items:
            wait = t0 + due - time.time()
            if wait > 0:
                time.sleep(wait)
            conn.request("POST", f"{API}/jobs", body=body, headers=headers)
            reply = conn.getresponse()
            data = reply.read()
            if reply.status != 201:
                raise RuntimeError(f"submission refused: {reply.status} {data[:300]!r}")
            mine.append((index, json.loads(data)["job_id"], time.time()))
        conn.close()
        with lock:
            out.extend(mine)

    workers = [threading.Thread(target=run, args=(share[k::threads],)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    return out


def submit_on_schedule(url: str, secret: str, plan: list[tuple[float, dict]], processes: int = 4,
                       threads: int = 4, start_in_s: float = 1.0) -> list[tuple[int, float, float]]:
    """Submit every body of `plan` at its due offset from a common start `start_in_s` from now."""
    t0 = time.time() + start_in_s
    encoded = [(i, due, json.dumps(body).encode()) for i, (due, body) in enumerate(plan)]
    shares = [encoded[p::processes] for p in range(processes)]
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        parts = pool.starmap(_submit_share, [(url, secret, t0, share, threads) for share in shares])
    by_index = {index: (job_id, answered) for part in parts for index, job_id, answered in part}
    return [(by_index[i][0], t0 + plan[i][0], by_index[i][1]) for i in range(len(plan))]
