import pytest

from corral.cli.client import API_PREFIX, PAGE_JOBS, Client, ClientError, ControllerUnreachable, error_message
from corral.protocol import API_PREFIX as PROTOCOL_API_PREFIX

from .standin import SECRET


def test_api_prefix_matches_the_protocol():
    assert API_PREFIX == PROTOCOL_API_PREFIX


def test_endpoints(standin):
    with Client(standin.url, SECRET) as client:
        assert client.health() == {"status": "ok", "cluster": "standin"}
        assert [j["id"] for j in client.jobs()] == [1, 2]
        assert [j["id"] for j in client.jobs(include_finished=True, user="bob")] == [2, 4]
        assert client.job(3)["name"] == "old"
        assert [n["name"] for n in client.nodes()] == ["node1", "node2"]
        assert client.partitions()[0]["name"] == "gpu"
        assert [j["id"] for j in client.accounting(ids=[1, 4], states=["FAILED"], since=5.2)] == [4]
        assert standin.state.queries[-1] == ("/accounting", {"ids": "1,4", "states": "FAILED", "since": "5",
                                                             "limit": str(PAGE_JOBS)})
        body = {"workdir": "/", "user": "u", "argv": ["true"], "nodes": 2}
        assert client.submit(body) == {"job_id": 5, "task_ids": []}
        assert standin.state.submissions[-1] == body
        assert client.cancel(5)["state"] == "CANCELLED"


def test_scheduling_endpoints(standin):
    with Client(standin.url, SECRET) as client:
        assert client.requeue(1)["state"] == "PENDING"
        assert client.hold(2)["held"] is True
        assert client.release(2)["held"] is False
        assert standin.state.actions == [("requeue", 1), ("hold", 2), ("release", 2)]
        assert [p["job_id"] for p in client.priority()] == [2, 7]
        assert [s["account"] for s in client.fairshare()] == ["physics", "hep", "bio"]
        assert [q["name"] for q in client.queues()] == ["hep-q", "solo"]


def test_tenancy_and_reservation_endpoints(standin):
    with Client(standin.url, SECRET) as client:
        spec = client.tenancy()
        assert [a["name"] for a in spec["accounts"]] == ["physics", "hep", "bio"]
        assert client.put_tenancy({"default_qos": "normal"})["accounts"] == []
        assert standin.state.tenancy_puts == [{"default_qos": "normal"}]
        assert [r["name"] for r in client.reservations()] == ["maint"]
        created = client.create_reservation({"name": "r1", "start": 10.0, "end": 20.0, "gpus": 2})
        assert created["node_names"] == ["node1"] and created["active"] is True
        assert client.delete_reservation("r1") is None
        assert standin.state.queries[-1] == ("/reservations/r1", {})
        with pytest.raises(ClientError) as info:
            client.delete_reservation("r1")
        assert (str(info.value), info.value.status) == ("reservation 'r1' not found", 404)
        with pytest.raises(ClientError) as info:
            client.create_reservation({"name": "maint", "start": 10.0, "end": 20.0, "gpus": 2})
        assert info.value.status == 409


def test_errors_carry_detail_and_status(standin):
    with Client(standin.url, SECRET) as client:
        with pytest.raises(ClientError) as info:
            client.job(42)
        assert (str(info.value), info.value.status) == ("job 42 not found", 404)
        with pytest.raises(ClientError) as info:
            client.cancel(3)
        assert info.value.status == 409
        with pytest.raises(ClientError) as info:
            client.submit({"workdir": "/", "user": "u", "nodes": 0, "bogus": 1})
        assert info.value.status == 422
        assert "nodes: Input should be greater than or equal to 1" in str(info.value)
        assert "bogus: Extra inputs are not permitted" in str(info.value)


def test_health_needs_no_secret_but_the_rest_does(standin):
    with Client(standin.url) as client:
        assert client.health()["status"] == "ok"
        with pytest.raises(ClientError, match="refused the request") as info:
            client.nodes()
        assert info.value.status == 401


def test_unreachable():
    with Client("http://127.0.0.1:9", timeout_s=1) as client, pytest.raises(ControllerUnreachable) as info:
        client.health()
    assert str(info.value) == "cannot reach the controller at http://127.0.0.1:9 (is 'corral up' running?)"


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (404, '{"detail": "job 7 not found"}', "job 7 not found"),
        (500, "Internal Server Error", "Internal Server Error"),
        (502, "", "HTTP 502"),
        (422, '{"detail": [{"loc": ["body"], "msg": "Field required"}]}', "Field required"),
        (409, '{"other": 1}', '{"other": 1}'),
        # A permission refusal is about the user's rights, not their credential: no advice to check it.
        (403, '{"detail": "Access/permission denied: job 7 belongs to alice"}',
         "the controller refused the request (Access/permission denied: job 7 belongs to alice)"),
        (401, '{"detail": "credential expired"}', "the controller refused the request (credential expired); "
         "check the credential: CORRAL_TOKEN, the cluster secret (CORRAL_SECRET, CORRAL_SECRET_FILE), or the "
         "cluster.json that 'corral up' writes"),
    ],
)
def test_error_message(status, body, message):
    assert error_message(status, body) == message
