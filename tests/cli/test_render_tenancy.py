import pytest

from corral.cli import render_tenancy as rt

from .standin import canned_fairshare, canned_tenancy


@pytest.mark.parametrize(
    ("amounts", "order", "text"),
    [
        ({"gpu": 8, "cpu": 64, "mem_mib": 65536}, (), "gpu=8,cpu=64,mem=64G"),
        ({"mem_mib": 512, "gpu": 2}, ("gpu", "mem_mib"), "gpu=2,mem=512M"),
        ({"cpu": 1, "gpu": 0}, ("gpu",), "gpu=0,cpu=1"),
        ({}, ("gpu",), "-"),
    ],
)
def test_format_resources(amounts, order, text):
    assert rt.format_resources(amounts, order) == text


@pytest.mark.parametrize(
    ("parents", "account", "depth"),
    [
        ({"root": None, "a": "root", "b": "a"}, "b", 2),
        ({"a": None}, "a", 0),
        ({"b": "gone"}, "b", 1),  # a parent not listed counts once
        ({"a": "b", "b": "a"}, "a", 1),  # a loop stops
    ],
)
def test_account_depth(parents, account, depth):
    assert rt.account_depth(account, parents) == depth


def test_share_rows():
    assert rt.share_rows(canned_fairshare())[1] == (" hep", "physics", "1", "0.750000", "7200", "0.900000",
                                                    "0.250000")


def test_tenancy_summary():
    assert rt.tenancy_summary(canned_tenancy()) == "3 accounts, 2 users, 2 QOS, 1 queue, 0 limits; default QOS normal"
    assert rt.tenancy_summary({}) == "0 accounts, 0 users, 0 QOS, 0 queues, 0 limits; default QOS normal"
    with_default = dict(canned_tenancy(), default_account="physics")
    assert rt.tenancy_summary(with_default).endswith("; users without an entry: account physics")
    assert rt.tenancy_sections(with_default)[0][0] == "Accounts (users without an entry: physics)"


def test_tenancy_sections_with_limits():
    spec = canned_tenancy()
    spec["limits"] = [{"user": "bob", "account": None, "max_running_jobs": 2, "max_submit_jobs": None,
                       "max_gpus": 8},
                      {"user": None, "account": "bio", "max_running_jobs": None, "max_submit_jobs": 10,
                       "max_gpus": None}]
    title, headers, rows, right = rt.tenancy_sections(spec)[-1]
    assert title == "Limits" and headers == ("SUBJECT", "MAXRUNNING", "MAXSUBMIT", "MAXGPUS")
    assert rows == [("user=bob", "2", "-", "8"), ("account=bio", "-", "10", "-")]
    assert [s[0] for s in rt.tenancy_sections({"qos": [{"name": "normal"}]})] == ["QOS (default normal)"]


def test_priority_weights_line():
    spec = {"priority": {"weight_age": 1000, "half_life_s": 86400.0, "billing": {"gpu": 1.0, "cpu": 0.05}}}
    assert rt.priority_weights_line(spec) == "Priority: weight_age=1000 half_life_s=86400 billing=gpu=1,cpu=0.05"


def test_reservation_rows_without_node_names():
    item = {"name": "r", "start": 0.0, "end": 60.0, "nodes": None, "gpus": 3, "users": [], "accounts": ["a", "b"],
            "maintenance": False, "node_names": [], "active": False}
    row = rt.reservation_rows([item])[0]
    assert row[1] == "INACTIVE" and row[4:] == ("00:01:00", "-", "3", "-", "a,b", "-")
