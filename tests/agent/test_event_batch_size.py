"""An event batch the controller refuses as too large (413, [http] max_agent_body_mib) goes again in
halves, in order, until it fits; an event too large alone is dropped (it can never be accepted) and the
rest still arrive."""
from __future__ import annotations

from corral.protocol import NodeUnhealthy

REASON_CHARS = 20_000


def _reasons(count: int, chars: int = REASON_CHARS) -> list[str]:
    return [f"{i:03d}" + "x" * (chars - 3) for i in range(count)]


def test_a_batch_over_the_cap_is_sent_again_in_halves(controller, run_with_agent):
    controller.max_events_bytes = 3 * REASON_CHARS + 1000  # three events fit, four do not
    reasons = _reasons(10)

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        for reason in reasons:
            agent._post(NodeUnhealthy(reason=reason))
        await controller.until(lambda: len(controller.events) == len(reasons) and not agent._outbox, timeout_s=10)

    run_with_agent(scenario)
    assert [e.reason for e in controller.events] == reasons


def test_an_event_over_the_cap_alone_is_dropped_and_the_rest_arrive(controller, run_with_agent):
    controller.max_events_bytes = 2 * REASON_CHARS
    small, big = _reasons(3), _reasons(1, 3 * REASON_CHARS)[0]

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        for reason in [small[0], big, small[1], small[2]]:
            agent._post(NodeUnhealthy(reason=reason))
        await controller.until(lambda: len(controller.events) == 3 and not agent._outbox, timeout_s=10)

    run_with_agent(scenario)
    assert [e.reason for e in controller.events] == small
