"""A controller that could not listen (paused, swapped, a blocked loop) does not blame agents for it."""
from __future__ import annotations

import asyncio
import time

from corral.controller.stall import StallWatch
from corral.engine.records import JobState
from tests.engine.builders import T0, engine_with_nodes, spec


def test_a_stall_is_not_counted_as_silence_but_a_dead_node_is_still_lost() -> None:
    engine = engine_with_nodes(count=2, node_timeout_s=30)
    job = engine.submit(spec(nodes=2), T0)
    engine.schedule(T0)
    for node in ("node1", "node2"):
        engine.node_started(node, job.id, T0)
    # The controller was stopped from T0 + 5 to T0 + 40: nobody was heard, through no fault of theirs.
    resume = T0 + 40
    engine.discount_stall(35.0, resume)
    assert engine.tick(resume) == []
    assert engine.jobs[job.id].state is JobState.RUNNING
    engine.contact("node1", resume + 1)
    # node2 stays silent: it was silent 5 s before the stall, so 25 s of listening after it, it is lost.
    assert engine.tick(resume + 24) == []
    engine.contact("node1", resume + 24)
    engine.tick(resume + 26)
    assert not engine.nodes["node2"].up and engine.nodes["node1"].up
    assert engine.jobs[job.id].state is not JobState.RUNNING


def test_without_the_discount_the_same_pause_loses_both_nodes() -> None:
    engine = engine_with_nodes(count=2, node_timeout_s=30)
    engine.tick(T0 + 40)
    assert not any(node.up for node in engine.nodes.values())


def test_a_discount_never_moves_a_contact_past_now() -> None:
    engine = engine_with_nodes(count=1, node_timeout_s=30)
    engine.contact("node1", T0 + 50)
    engine.discount_stall(20.0, T0 + 55)
    assert engine.nodes["node1"].last_seen == T0 + 55
    assert engine.tick(T0 + 84) == []


class PausableMonotonic:
    """The real monotonic clock plus jumps the test makes, as a SIGSTOP would, while the loop sleeps."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.t


def test_stall_watch_counts_a_stall_the_probe_saw() -> None:
    clock = PausableMonotonic()

    async def scenario() -> tuple[float, float]:
        watch = StallWatch(probe_s=0.05, threshold_s=1.0, monotonic=clock)  # late by ms under load: not a stall
        probe = asyncio.create_task(watch.probe())
        await asyncio.sleep(0.01)
        clock.t += 35.0  # the process was stopped for 35 s while the probe slept
        await asyncio.sleep(0.2)  # the probe wakes (late) and counts it
        stall = watch.take()
        await asyncio.sleep(0.2)
        quiet = watch.take()
        probe.cancel()
        return stall, quiet

    stall, quiet = asyncio.run(scenario())
    assert 34.9 < stall < 35.1
    assert quiet == 0.0


def test_stall_watch_counts_a_stall_the_probe_has_not_seen_yet() -> None:
    """After a resume the scheduling loop may run before the probe: it takes the stall still unseen, and
    the probe, waking next, does not count it again."""
    clock = PausableMonotonic()

    async def scenario() -> tuple[float, float]:
        watch = StallWatch(probe_s=0.05, threshold_s=1.0, monotonic=clock)  # late by ms under load: not a stall
        probe = asyncio.create_task(watch.probe())
        await asyncio.sleep(0.01)
        clock.t += 35.0  # stopped in the middle of a scheduling cycle: nothing ran since
        first = watch.take()
        await asyncio.sleep(0.2)
        again = watch.take()
        probe.cancel()
        return first, again

    first, again = asyncio.run(scenario())
    assert 34.9 < first < 35.1, "the whole stall, though the probe had no turn after it yet"
    assert again == 0.0, "counted once"
