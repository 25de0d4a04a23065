"""The controller's endpoints reply, parsed: the first port of each non-draining replica; a reply of another
shape is refused with a message naming what is wrong (the table keeps what it had)."""
from __future__ import annotations

import pytest

from corral.gateway.controller_source import EndpointsMalformed, parse_endpoints
from corral.gateway.routes import Endpoint


def test_ready_replicas_first_port_and_draining_ones_skipped():
    route = parse_endpoints("web", {"service": "web", "version": 7, "public": True, "endpoints": [
        {"replica": 0, "job_id": 10, "ports": {"http": "n1:9000", "metrics": "n1:9001"}, "draining": False},
        {"replica": 1, "job_id": 11, "ports": {"http": "n2:9000"}, "draining": True},
        {"replica": 2, "job_id": 12, "ports": {"http": "n3:9000"}}]})
    assert route.endpoints == (Endpoint("n1:9000", 0), Endpoint("n3:9000", 2))
    assert (route.version, route.public, route.owner, route.keep_prefix) == (7, True, "", False)


def test_a_sessions_owner_and_kept_prefix():
    route = parse_endpoints("nb", {"service": "nb", "version": 1, "public": False, "owner": "alice",
                                   "keep_prefix": True, "endpoints": []})
    assert (route.owner, route.keep_prefix) == ("alice", True)


@pytest.mark.parametrize(("body", "named"), [
    ([], "not a JSON object"),
    ({"version": "7", "endpoints": []}, "'version' is '7'"),
    ({"version": True, "endpoints": []}, "'version' is True"),
    ({"version": 1, "public": "yes", "endpoints": []}, "'public' is 'yes'"),
    ({"version": 1}, "'endpoints' is None"),
    ({"version": 1, "endpoints": [{"replica": 0}]}, "has no 'ports'"),
    ({"version": 1, "endpoints": [{"ports": {"http": 9000}}]}, "has no 'ports'"),
    ({"version": 1, "owner": 7, "endpoints": []}, "'owner' is 7"),
    ({"version": 1, "keep_prefix": "yes", "endpoints": []}, "'keep_prefix' is 'yes'"),
])
def test_a_malformed_reply_is_refused_naming_the_field(body, named):
    with pytest.raises(EndpointsMalformed, match="service web: .*" + named.replace("(", r"\(")):
        parse_endpoints("web", body)
