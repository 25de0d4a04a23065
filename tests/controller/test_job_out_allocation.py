"""JobOut says whether a job is an allocation (salloc, `corral run`): its clients then name no output file."""
from __future__ import annotations

import dataclasses

from corral.controller.views import job_out
from tests.store.factories import full_job


def test_job_out_carries_the_allocation_flag() -> None:
    allocation = dataclasses.replace(full_job(7), runs={})  # no usage samples: not what this is about
    assert allocation.spec.allocation
    assert job_out(allocation, now=allocation.submit_time, gpu_idle_flag_s=600).allocation is True
    batch = dataclasses.replace(allocation, spec=dataclasses.replace(allocation.spec, allocation=False))
    assert job_out(batch, now=batch.submit_time, gpu_idle_flag_s=600).allocation is False
