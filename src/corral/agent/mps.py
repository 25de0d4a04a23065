"""The NVIDIA MPS control daemon for jobs on a share of a GPU (`--gres=shard:N`, `mps:P`).

A share's limits (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: environment.py) bind
only under MPS: without its daemon each process has the whole device. Where the node has
`nvidia-cuda-mps-control`, the agent starts it (`-d`) before the first share job's tasks and stops it
(`quit` on its standard input) once the last one has ended here, as Slurm's gres/mps prolog and epilog do.
The daemon uses its default pipe and log directories, which the jobs' CUDA finds without being told.
A node without the program runs share jobs unbounded (the variables are still set, for an MPS the
operator runs); a daemon that will not start refuses the job rather than run it unbounded."""
from __future__ import annotations

import asyncio
import logging
import shutil

log = logging.getLogger(__name__)

CONTROL = "nvidia-cuda-mps-control"
TIMEOUT_S = 10.0


class MpsError(RuntimeError):
    pass


class MpsDaemon:
    def __init__(self, control: str | None = None) -> None:
        """`control`: the program's path; default: found on the agent's PATH (None: this node has no MPS)."""
        self.control = control if control is not None else shutil.which(CONTROL)
        self._holders: set[int] = set()
        self._lock = asyncio.Lock()

    async def acquire(self, job_id: int) -> None:
        """The daemon runs for `job_id` (started if it is the first share job here); MpsError if it cannot."""
        if self.control is None:
            return
        async with self._lock:
            if not self._holders:
                await self._run(["-d"], b"", "start")
                log.info("MPS control daemon started for job %d", job_id)
            self._holders.add(job_id)

    def adopt(self, job_id: int) -> None:
        """`job_id` ran here before the agent restarted: the daemon it started runs on, and now holds it too."""
        if self.control is not None:
            self._holders.add(job_id)

    async def release(self, job_id: int) -> None:
        """`job_id` has ended here; the last share job's end stops the daemon."""
        if self.control is None:
            return
        async with self._lock:
            if job_id not in self._holders:
                return
            self._holders.discard(job_id)
            if self._holders:
                return
            try:
                await self._run([], b"quit\n", "stop")
                log.info("MPS control daemon stopped after job %d", job_id)
            except MpsError as exc:
                log.warning("%s", exc)

    async def _run(self, args: list[str], stdin: bytes, what: str) -> None:
        assert self.control is not None
        try:
            process = await asyncio.create_subprocess_exec(
                self.control, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT)
            out, _ = await asyncio.wait_for(process.communicate(stdin), TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise MpsError(f"could not {what} the MPS control daemon ({self.control}): {exc}") from None
        if process.returncode != 0:
            said = out.decode(errors="replace").strip()[-300:]
            raise MpsError(f"could not {what} the MPS control daemon ({self.control}): exit {process.returncode}"
                           + (f": {said}" if said else ""))
