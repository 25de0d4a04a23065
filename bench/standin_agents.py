"""Stand-in agents for benchmarks of the live controller: `--nodes N` nodes in one asyncio process that speak
the real agent protocol over HTTP (register, long-poll their commands, post `started` and `finished`)
but run nothing. A launched job "runs" for the seconds of its argv when that is `sleep SECONDS` (else it ends
at once), then reports exit 0; a kill ends it at once with the signal. So the controller, its store and its
scheduling are what is measured, not process starts (bench/throughput.py measures those).

    python bench/standin_agents.py --url URL --secret-file FILE --nodes 20 --cpus 64 --gpus 0

Events are posted in batches: everything that happened to a node since its last post, at most every 20 ms."""
from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from corral.protocol import API_PREFIX, EPOCH_HEADER  # noqa: E402

FLUSH_S = 0.02
POLL_WAIT_S = 10


class StandInAgent:
    def __init__(self, name: str, http: httpx.AsyncClient, cpus: int, gpus: int, mem_mib: int) -> None:
        self.name, self.http = name, http
        self.cpus, self.gpus, self.mem_mib = cpus, gpus, mem_mib
        self.epoch = ""
        self.seq = 0
        self.running: dict[int, tuple[asyncio.TimerHandle, list[int]]] = {}  # job id -> (its end, ranks)
        self.outbox: list[dict] = []
        self.has_events = asyncio.Event()

    async def register(self) -> None:
        body = {"node": self.name, "address": "127.0.0.1", "cpus": self.cpus, "mem_mib": self.mem_mib,
                "gpus": [{"index": i, "model": "sim-gpu"} for i in range(self.gpus)],
                "running_jobs": list(self.running)}
        reply = await self.http.post(f"{API_PREFIX}/agents/register", json=body)
        reply.raise_for_status()
        self.epoch = reply.json()["epoch"]
        self.seq = 0

    async def poll_forever(self) -> None:
        while True:
            reply = await self.http.get(f"{API_PREFIX}/agents/{self.name}/commands",
                                        params={"after": self.seq, "wait_s": POLL_WAIT_S},
                                        headers={EPOCH_HEADER: self.epoch}, timeout=POLL_WAIT_S + 30)
            if reply.status_code == 409:
                await self.register()
                continue
            reply.raise_for_status()
            commands = reply.json()["commands"]
            for command in sorted(commands, key=lambda c: c["seq"]):
                self.seq = max(self.seq, command["seq"])
                self.carry_out(command)

    def carry_out(self, command: dict) -> None:
        job_id = command.get("job_id")
        if command["kind"] == "launch":
            argv = command.get("argv") or []
            run_s = float(argv[1]) if len(argv) == 2 and argv[0] == "sleep" else 0.0
            ranks = [task["rank"] for task in command["tasks"]]
            end = asyncio.get_running_loop().call_later(run_s, self.finish, job_id, 0)
            self.running[job_id] = (end, ranks)
            self.emit({"kind": "started", "job_id": job_id, "restart_count": command.get("restart_count", 0)})
        elif command["kind"] == "kill" and job_id in self.running and command.get("grace_s", 0) >= 0:
            self.running[job_id][0].cancel()
            self.finish(job_id, int(command.get("signal") or 15))

    def finish(self, job_id: int, signal: int) -> None:
        _, ranks = self.running.pop(job_id)
        self.emit({"kind": "finished", "job_id": job_id,
                   "tasks": [{"rank": r, "exit_code": 0, "signal": signal} for r in ranks]})

    def emit(self, event: dict) -> None:
        self.outbox.append(event)
        self.has_events.set()

    async def send_forever(self) -> None:
        while True:
            await self.has_events.wait()
            await asyncio.sleep(FLUSH_S)
            self.has_events.clear()
            events, self.outbox = self.outbox, []
            reply = await self.http.post(f"{API_PREFIX}/agents/{self.name}/events", json={"events": events},
                                         headers={EPOCH_HEADER: self.epoch}, timeout=60)
            if reply.status_code == 409:
                await self.register()
                self.outbox[:0] = events
                self.has_events.set()
            else:
                reply.raise_for_status()


async def run(url: str, secret: str, nodes: int, cpus: int, gpus: int, mem_mib: int, prefix: str) -> None:
    limits = httpx.Limits(max_connections=2 * nodes + 4, max_keepalive_connections=2 * nodes + 4)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {secret}"}, limits=limits,
                                 timeout=60) as http:
        agents = [StandInAgent(f"{prefix}{i}", http, cpus, gpus, mem_mib) for i in range(nodes)]
        for agent in agents:
            await agent.register()
        print(f"registered {nodes}", flush=True)
        await asyncio.gather(*(agent.poll_forever() for agent in agents), *(agent.send_forever() for agent in agents))



def spawn(url: str, secret_file: Path, *, nodes: int, gpus: int, prefix: str, cpus: int = 64,
          log: Path | None = None) -> subprocess.Popen:
    """These stand-in agents in a process (and session) of their own, for a bench's controller at `url`; their
    output goes to `log` (none: discarded). The caller waits for them to register and ends them."""
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--url", url, "--secret-file", str(secret_file),
         "--nodes", str(nodes), "--cpus", str(cpus), "--gpus", str(gpus), "--prefix", prefix],
        stdout=open(log, "wb") if log else subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--secret-file", required=True, type=Path)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--cpus", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--mem-mib", type=int, default=512_000)
    parser.add_argument("--prefix", default="standin")
    args = parser.parse_args()
    asyncio.run(run(args.url, args.secret_file.read_text().strip(), args.nodes, args.cpus, args.gpus, args.mem_mib,
                    args.prefix))


if __name__ == "__main__":
    main()
