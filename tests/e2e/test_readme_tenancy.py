"""The README's tenancy example, taken from README.md itself, applied to a real controller with
`corral tenancy apply` and used as the README says: the person applying it can still submit, alice's jobs
go to her account and queue, and the `urgent` QOS raises a job's priority."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from tests.e2e.harness import API

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_tenancy_example() -> str:
    section = README.read_text().split("## Teams, quotas and priorities", 1)[1]
    return section.split("```toml\n", 1)[1].split("```", 1)[0]


def test_the_readme_tenancy_example_works_as_written(cluster, tmp_path) -> None:
    example = tmp_path / "tenancy.toml"
    example.write_text(readme_tenancy_example())
    env = {"CORRAL_URL": cluster.url, "CORRAL_SECRET": cluster.secret, "CORRAL_SECRET_FILE": None,
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    runner = CliRunner()

    def corral(*args: str) -> str:
        result = runner.invoke(app, list(args), env=env)
        assert result.exit_code == 0, result.output
        return result.output

    assert "Applied tenancy" in corral("tenancy", "apply", str(example))
    submit = ("submit", "--hold", "--parsable", "-D", str(tmp_path), "--wrap", "true")
    mine = int(corral(*submit))
    urgent = int(corral(*submit, "--qos", "urgent"))
    alices = cluster.submit(user="alice", argv=["true"], hold=True)
    assert cluster.job(mine)["account"] == "lab", "the person applying it is not locked out"
    assert (cluster.job(alices)["account"], cluster.job(alices)["queue"]) == ("vision", "vision-q")
    priorities = {p["job_id"]: p for p in cluster.http.get(f"{API}/priority").json()}
    assert priorities[urgent]["qos_factor"] > 0
    assert priorities[urgent]["priority"] > max(priorities[mine]["priority"], priorities[alices]["priority"])
