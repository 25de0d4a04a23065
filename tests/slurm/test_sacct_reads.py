"""sacct asks the controller only for the fields its format reads (sacct/reads.py): every sacct field, and
every golden recording, prints the same from records cut down to those fields as from whole records, and no
field's getter reads a sent key that fields_for left out."""
from __future__ import annotations

import pytest

from corral.slurm.sacct.fields import FIELDS
from corral.slurm.sacct.main import SACCT_FIELDS
from corral.slurm.sacct.opts import parse_sacct
from corral.slurm.sacct.output import sacct_output
from corral.slurm.sacct.reads import fields_for

from . import golden_records as golden
from .test_golden_jobs import CLUSTER, SACCT, _phase
from .test_sacct_fields import _only, _sent, golden_case

NOW = 2_000_000_000.0


class _Reading(dict):
    """A job record that remembers which of its keys were read."""

    def __init__(self, record: dict, seen: set[str]) -> None:
        super().__init__(record)
        self.seen = seen

    def get(self, key, default=None):
        self.seen.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.seen.add(key)
        return super().__getitem__(key)

    def __contains__(self, key) -> bool:
        self.seen.add(key)
        return super().__contains__(key)


def _golden_jobs() -> list[dict]:
    jobs = [job for name in SACCT for job in golden.jobs_from_sacct(_phase(golden.fixture(name)))]
    return _sent(list({job["id"]: job for job in jobs}.values()))


@pytest.mark.parametrize("field", [f.name for f in FIELDS])
@pytest.mark.parametrize("steps", [True, False])
def test_each_field_prints_the_same_from_the_fields_it_reads(field, steps) -> None:
    jobs = _golden_jobs()
    options = parse_sacct(["-a", "-P", "-o", field, *([] if steps else ["-X"])], {})
    asked = fields_for(options.layout, SACCT_FIELDS)
    full = sacct_output(options, jobs, NOW, cluster=CLUSTER)
    assert full[0].count("\n") > len(jobs) if steps else full[0].count("\n") == len(jobs) + 1
    assert sacct_output(options, _only(jobs, asked), NOW, cluster=CLUSTER) == full


@pytest.mark.parametrize("field", [f.name for f in FIELDS])
def test_no_field_reads_a_sent_key_it_did_not_ask_for(field) -> None:
    options = parse_sacct(["-a", "-P", "-o", field], {})
    asked = set(fields_for(options.layout, SACCT_FIELDS))
    seen: set[str] = set()
    sacct_output(options, [_Reading(job, seen) for job in _golden_jobs()], NOW, cluster=CLUSTER)
    assert seen  # the records were read through the wrapper
    assert (seen & set(SACCT_FIELDS)) - asked == set()


@pytest.mark.parametrize("name", SACCT)
def test_golden_outputs_are_the_same_from_the_fields_their_format_reads(name) -> None:
    options, jobs, now = golden_case(name)
    asked = fields_for(options.layout, SACCT_FIELDS, nodes=options.nodes is not None)
    assert sacct_output(options, _only(jobs, asked), now, cluster=CLUSTER) == sacct_output(options, jobs, now,
                                                                                         cluster=CLUSTER)


def test_the_default_format_asks_for_a_third_of_the_fields() -> None:
    asked = fields_for(parse_sacct(["-a"], {}).layout, SACCT_FIELDS)
    assert {"steps", "slices", "exit_code", "account"} <= set(asked)
    assert {"usage", "workdir", "time_limit_s", "nodelist"}.isdisjoint(asked)
    assert len(asked) < len(SACCT_FIELDS) / 3


def test_steps_are_asked_for_only_when_step_rows_print_and_the_node_list_only_for_a_node_filter() -> None:
    plain = parse_sacct(["-a", "-X", "-o", "JobID"], {})
    assert "steps" not in fields_for(plain.layout, SACCT_FIELDS)
    assert "nodelist" not in fields_for(plain.layout, SACCT_FIELDS)
    assert "nodelist" in fields_for(plain.layout, SACCT_FIELDS, nodes=True)
    assert "steps" in fields_for(parse_sacct(["-a", "-o", "JobID"], {}).layout, SACCT_FIELDS)
