"""Does every tenant get its nominal share whenever it has demand? Measured on a finished replay.

For each queue (VC), over time: demand(t) = GPUs of its jobs submitted and not yet finished (waiting or
running), allocation(t) = GPUs its running jobs hold. The queue is *short* at t when
allocation(t) < min(demand(t), nominal): it wants at least what it holds plus more, up to its share, and
holds less. A short spell shorter than `grace_s` is normal scheduling latency (a job waits for the one
that holds its GPUs to be stopped, a gang waits for a whole node); only the part of a spell beyond the
grace counts. Reported per queue: the counted seconds as a fraction of the replay's span, the longest
spell, and the mean GPU shortfall while counted.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from corral.sim.metrics import JobResult


@dataclass(frozen=True)
class ShareGuarantee:
    queue: str
    nominal_gpus: int
    short_fraction: float  # of the span: time below min(demand, nominal), beyond the grace period
    longest_short_s: float  # the longest spell below it (grace included)
    mean_shortfall_gpus: float  # while counted: min(demand, nominal) - allocation

    def to_dict(self) -> dict:
        return asdict(self)


def share_guarantee(results: Iterable[JobResult], nominal: Mapping[str, int], *, grace_s: float = 600.0
                    ) -> list[ShareGuarantee]:
    done = list(results)
    if not done:
        return []
    start = min(r.job.submit_s for r in done)
    end = max(r.end_s for r in done)
    span = max(end - start, 1e-9)
    events: dict[str, list[tuple[float, float, float]]] = {q: [] for q in nominal}
    for r in done:
        changes = events.setdefault(r.job.queue, [])
        gpus = r.held_gpus
        changes.append((r.job.submit_s, gpus, 0.0))
        changes.append((r.end_s, -gpus, 0.0))
        for run_start, run_end in r.runs():
            changes.append((run_start, 0.0, gpus))
            changes.append((run_end, 0.0, -gpus))
    out = []
    for queue in sorted(events):
        share = nominal.get(queue, 0)
        counted_s = longest = shortfall_gpu_s = 0.0
        demand = held = 0.0
        spell_start = None
        items = sorted(events[queue])
        i = 0
        while i < len(items):
            t = items[i][0]
            while i < len(items) and items[i][0] == t:  # simultaneous changes are one step
                demand += items[i][1]
                held += items[i][2]
                i += 1
            next_t = items[i][0] if i < len(items) else end
            want = min(demand, share)
            if held < want - 1e-9:
                if spell_start is None:
                    spell_start = t
                counted_from = max(t, spell_start + grace_s)
                if next_t > counted_from:
                    counted_s += next_t - counted_from
                    shortfall_gpu_s += (want - held) * (next_t - counted_from)
                longest = max(longest, next_t - spell_start)
            else:
                spell_start = None
        out.append(ShareGuarantee(queue, share, counted_s / span, longest,
                                  shortfall_gpu_s / counted_s if counted_s else 0.0))
    return out
