import json
import time
import tomllib

import pytest

from corral.api.tenancy import TenancySpec

from .standin import T0, canned_tenancy

TENANCY_TOML = """\
default_qos = "normal"

[[accounts]]
name = "physics"
shares = 2

[[accounts]]
name = "astro"
parent = "physics"

[[users]]
name = "carol"
accounts = ["astro"]

[[qos]]
name = "normal"

[[qos]]
name = "urgent"
priority = 50
preempts = ["normal"]

[[queues]]
name = "astro-q"
cohort = "all"
accounts = ["astro"]
nominal = { gpu = 4 }

[[limits]]
user = "carol"
max_running_jobs = 2

[priority]
weight_fairshare = 5000
billing = { gpu = 1.0, cpu = 0.01 }
"""


pytestmark = pytest.mark.usefixtures("utc")  # local times shown in UTC (tests/conftest.py)


def test_tenancy_show_tables(standin, cli):
    result = cli("tenancy", "show")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.splitlines()[:5] == ["Accounts:", "NAME     PARENT   SHARES", "physics  -             3",
                                     "hep      physics       1", "bio      -             1"]
    assert "QOS (default normal):" in text
    assert "high         100  normal    requeue  00:02:00    00:00:00        -" in text
    assert "hep-q  all     hep       gpu=8,mem=64G  gpu=4        -" in text
    assert "Limits:" not in text  # empty parts are left out
    assert text.splitlines()[-1].startswith("Priority: weight_age=1000 weight_fairshare=10000")
    assert text.splitlines()[-1].endswith("billing=gpu=1")


def test_tenancy_show_json_and_toml(standin, cli):
    assert json.loads(cli("tenancy", "show", "--json").stdout) == canned_tenancy()
    result = cli("tenancy", "show", "--toml")
    assert result.exit_code == 0, result.output
    assert TenancySpec.model_validate(tomllib.loads(result.stdout)).model_dump() == canned_tenancy()


def test_tenancy_show_takes_one_format(standin, cli):
    result = cli("tenancy", "show", "--json", "--toml")
    assert result.exit_code == 2
    assert result.stderr == "corral: error: give at most one of --json and --toml\n"


def test_tenancy_apply(standin, cli, tmp_path):
    path = tmp_path / "tenancy.toml"
    path.write_text(TENANCY_TOML)
    result = cli("tenancy", "apply", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout == (f"Applied tenancy from {path}: 2 accounts, 1 user, 2 QOS, 1 queue, 1 limit; "
                             "default QOS normal\n")
    assert result.stderr == ""
    assert standin.state.tenancy_puts == [tomllib.loads(TENANCY_TOML)]
    assert standin.state.tenancy["priority"]["weight_fairshare"] == 5000


def test_tenancy_apply_takes_the_controller_config_file(standin, cli, tmp_path):
    path = tmp_path / "controller.toml"
    path.write_text('cluster_name = "c1"\nkill_grace_s = 5\n' + TENANCY_TOML +
                    '\n[scheduler]\nmax_jobs_considered = 10\n\n[[partitions]]\nname = "gpu"\nnodes = "n[1-2]"\n')
    result = cli("tenancy", "apply", str(path))
    assert result.exit_code == 0, result.output
    assert result.stderr == (f"corral: {path}: leaving out cluster_name, kill_grace_s, partitions, scheduler: "
                             "controller settings, read when it starts\n")
    assert standin.state.tenancy_puts == [tomllib.loads(TENANCY_TOML)]


def test_controller_setting_keys_match_the_controller():
    from corral.cli.tenancy import CONTROLLER_SETTING_KEYS
    from corral.controller import settings

    assert CONTROLLER_SETTING_KEYS == settings._TOP - settings._TENANCY


def test_tenancy_show_then_apply_round_trips(standin, cli, tmp_path):
    path = tmp_path / "current.toml"
    path.write_text(cli("tenancy", "show", "--toml").stdout)
    assert cli("tenancy", "apply", str(path)).exit_code == 0
    assert standin.state.tenancy == canned_tenancy()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[accounts]]\nname = "a"\nparent = "nope"\n', "Value error, account 'a': unknown parent 'nope'"),
        ('default_qos = "gold"\n', "Value error, default_qos 'gold' is not a defined qos"),
        ('colour = "blue"\n', "Extra inputs are not permitted"),
    ],
)
def test_tenancy_apply_shows_the_servers_refusal(standin, cli, tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    result = cli("tenancy", "apply", str(path))
    assert result.exit_code == 1
    assert result.stderr == f"corral: error: {message}\n"
    assert result.stdout == ""
    assert standin.state.tenancy == canned_tenancy()  # unchanged


def test_tenancy_apply_file_problems(standin, cli, tmp_path):
    missing = tmp_path / "missing.toml"
    result = cli("tenancy", "apply", str(missing))
    assert result.exit_code == 1 and result.stderr == f"corral: error: cannot read {str(missing)!r}: no such file\n"
    broken = tmp_path / "broken.toml"
    broken.write_text("[[accounts]\nname = 1\n")
    result = cli("tenancy", "apply", str(broken))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"corral: error: {str(broken)!r} is not valid TOML: ")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"name = '\xff'\n")
    assert cli("tenancy", "apply", str(binary)).exit_code == 1
    assert cli("tenancy", "apply", str(tmp_path)).exit_code == 1  # a directory
    assert standin.state.tenancy_puts == []


def test_reservation_create_with_nodes(standin, cli):
    result = cli("reservation", "create", "train", "--start", "2026-11-22T10:00", "--duration", "2:00:00",
                 "--nodes", "node[1-2]", "--users", "alice, bob", "--accounts", "hep", "--maintenance")
    assert result.exit_code == 0, result.output
    assert result.stdout == ("Created reservation train: nodes node[1-2], 2026-11-22T10:00:00 to "
                             "2026-11-22T12:00:00 (02:00:00)\n")
    assert standin.state.reservation_posts[-1] == {
        "name": "train", "start": 1_795_341_600.0, "end": 1_795_348_800.0, "nodes": "node[1-2]",
        "users": ["alice", "bob"], "accounts": ["hep"], "maintenance": True}


def test_reservation_create_with_gpus_and_end(standin, cli):
    before = time.time()
    result = cli("reservation", "create", "soon", "--start", "now+1h", "--end", "now+3h", "--gpus", "4", "--json")
    assert result.exit_code == 0, result.output
    created = json.loads(result.stdout)
    assert created["name"] == "soon" and created["gpus"] == 4 and created["node_names"] == ["node1"]
    sent = standin.state.reservation_posts[-1]
    assert sent["end"] - sent["start"] == 7200 and before + 3600 <= sent["start"] <= time.time() + 3600
    assert "nodes" not in sent and sent["users"] == [] and sent["maintenance"] is False


def test_reservation_create_epoch_times(standin, cli):
    result = cli("reservation", "create", "e", "--start", str(int(T0)), "--duration", "90", "--gpus", "1")
    assert result.exit_code == 0, result.output
    sent = standin.state.reservation_posts[-1]
    assert (sent["start"], sent["end"]) == (T0, T0 + 5400)  # a bare duration is minutes, as Slurm's


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--start", "now", "--gpus", "1"], "give exactly one of --end and --duration"),
        (["--start", "now", "--end", "now+1h", "--duration", "60", "--gpus", "1"],
         "give exactly one of --end and --duration"),
        (["--start", "now", "--duration", "60"], "give exactly one of --nodes and --gpus"),
        (["--start", "now", "--duration", "60", "--nodes", "n1", "--gpus", "1"],
         "give exactly one of --nodes and --gpus"),
        (["--start", "now", "--duration", "60", "--nodes", "node[3-1]"],
         "invalid --nodes: descending range '3-1' in hostlist 'node[3-1]'"),
        (["--start", "now", "--duration", "60", "--nodes", ","], "--nodes is empty"),
        (["--start", "now+2h", "--end", "now+1h", "--gpus", "1"], "--end 'now+1h' is not after --start"),
        (["--start", "soon", "--duration", "60", "--gpus", "1"],
         "invalid time 'soon': expected now, now+N with an optional unit s, m, h, d or w (seconds by default, "
         "e.g. now+1h), YYYY-MM-DDTHH:MM[:SS] (local time), epoch seconds"),
        (["--start", "now", "--duration", "forever", "--gpus", "1"],
         "invalid duration 'forever': expected M, M:S, H:M:S, D-H, D-H:M or D-H:M:S"),
        (["--start", "now", "--duration", "60", "--gpus", "1"], "reservation 'maint' already exists"),  # 409
    ],
)
def test_reservation_create_errors(standin, cli, args, message):
    result = cli("reservation", "create", "maint", *args)
    assert result.exit_code == 1, result.output
    assert result.stderr == f"corral: error: {message}\n"
    assert result.stdout == ""


def test_reservation_create_server_validation(standin, cli):
    result = cli("reservation", "create", "bad name", "--start", "now", "--duration", "60", "--gpus", "1")
    assert result.exit_code == 1
    assert result.stderr.startswith("corral: error: name: String should match pattern")


def test_reservation_create_usage_errors(standin, cli):
    assert cli("reservation", "create", "x", "--duration", "60", "--gpus", "1").exit_code == 2  # --start needed
    assert cli("reservation", "create", "x", "--start", "now", "--duration", "60", "--gpus", "0").exit_code == 2
    assert standin.state.reservation_posts == []


def test_reservation_list(standin, cli):
    cli("reservation", "create", "gpus", "--start", str(int(T0)), "--duration", "1-00:00:00", "--gpus", "2",
        "--users", "bob")
    result = cli("reservation", "list")
    assert result.exit_code == 0, result.output
    header, *rows = [line.split() for line in result.stdout.strip().splitlines()]
    assert header == ["NAME", "STATE", "START", "END", "DURATION", "NODES", "GPUS", "USERS", "ACCOUNTS", "FLAGS"]
    assert rows == [
        ["maint", "INACTIVE", "2023-11-14T23:13:20", "2023-11-15T00:13:20", "01:00:00", "node[1-2]", "-", "-", "-",
         "MAINT"],
        ["gpus", "ACTIVE", "2023-11-14T22:13:20", "2023-11-15T22:13:20", "1-00:00:00", "node1", "2", "bob", "-",
         "-"],
    ]
    assert [r["name"] for r in json.loads(cli("reservation", "list", "--json").stdout)] == ["maint", "gpus"]


def test_reservation_delete(standin, cli):
    result = cli("reservation", "delete", "maint")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Deleted reservation maint\n"
    assert standin.state.reservations == {}
    result = cli("reservation", "delete", "maint")
    assert result.exit_code == 1
    assert result.stderr == "corral: error: reservation 'maint' not found\n"


def test_group_commands_without_a_subcommand_show_help(cli):
    for group in ("tenancy", "reservation"):
        result = cli(group)
        assert "Usage:" in result.output
