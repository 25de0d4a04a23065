"""A share of one GPU through admission, the engine's node usage and the store's slice records."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pydantic
import pytest

from corral.core.model import NodeSlice
from corral.engine.admission import AdmissionError, admit
from corral.engine.usage import NodeUsage
from corral.store.codec import _slice_from_json, _slice_to_json

from .test_admission import CONFIG, NODES, submit


def test_admission_keeps_the_share():
    req = admit(submit(gpus=1, gpu_milli=250), CONFIG, NODES).request
    assert (req.gpus_per_node, req.gpu_milli, req.gpu_amount) == (1, 250, 0.25)
    assert admit(submit(gpus=2), CONFIG, NODES).request.gpu_milli == 1000


def test_admission_refuses_a_share_of_several_gpus():
    with pytest.raises(AdmissionError, match="needs exactly 1 GPU per node"):
        admit(submit(gpus_per_node=2, gpu_milli=500), CONFIG, NODES)
    for bad in (0, 1001):
        with pytest.raises(pydantic.ValidationError):  # the API answers 422
            submit(gpus=1, gpu_milli=bad)


def test_node_usage_views_shared_devices():
    usage = NodeUsage()
    node = NODES[0]
    jobs = [SimpleNamespace(slices=(NodeSlice(node.name, (1,), 1, 0, milli),)) for milli in (300, 500)]
    for job in jobs:
        usage.add(job)
    view = usage.views([node])[0]
    assert view.shared_gpus == ((1, 800),) and 1 not in view.free_gpus and len(view.free_gpus) == 3
    usage.remove(jobs[0])
    assert usage.views([node])[0].shared_gpus == ((1, 500),)
    usage.remove(jobs[1])
    view = usage.views([node])[0]
    assert view.shared_gpus == () and 1 in view.free_gpus


def test_slice_records_round_trip():
    piece = NodeSlice("n1", (3,), 2, 100, 450)
    assert _slice_from_json(_slice_to_json(piece)) == piece
    assert "gpu_milli" not in _slice_to_json(NodeSlice("n1", (0, 1), 2, 100))


@pytest.mark.parametrize(("share", "shards_per_gpu", "milli"), [
    ("shard:2", 8, 250),
    ("shard:1", 8, 125),
    ("shard:8", 8, 1000),  # every shard of a GPU is the GPU
    ("shard:1", 3, 333),  # rounded down: three shards never add up past one GPU
    ("mps:50", 8, 500),
    ("mps:100", 8, 1000),
])
def test_a_share_in_slurms_terms_becomes_milli_gpus(share, shards_per_gpu, milli):
    config = dataclasses.replace(CONFIG, shards_per_gpu=shards_per_gpu)
    spec = admit(submit(gpus_per_node=1, gpu_share=share), config, NODES)
    assert (spec.request.gpus_per_node, spec.request.gpu_milli, spec.gpu_share) == (1, milli, share)
    # An API client may leave the GPU count out: a share is of one GPU per node.
    assert admit(submit(gpu_share=share), config, NODES).request.gpu_milli == milli


@pytest.mark.parametrize(("fields", "message"), [
    (dict(gpu_share="shard:9"), r"shard:9: a job takes 1 to 8 shards of one GPU per node \(this cluster has 8"),
    (dict(gpu_share="shard:0"), "shard:0: a job takes 1 to 8 shards"),
    (dict(gpu_share="mps:101"), "mps:101: mps is a percentage of one GPU, 1 to 100"),
    (dict(gpu_share="mps:50", gpu_milli=500), "as gpu_share or as gpu_milli, not both"),
    (dict(gpu_share="shard:2", gpus=1), "gres/gpu and gres/shard cannot be combined: gpus asks for whole GPUs"),
    (dict(gpu_share="mps:20", gpus_per_task=1), "gres/gpu and gres/mps cannot be combined: gpus_per_task"),
    (dict(gpu_share="shard:2", gpus_per_node=2), "needs exactly 1 GPU per node, not 2"),
])
def test_shares_slurm_refuses_are_refused(fields, message):
    with pytest.raises(AdmissionError, match=message):
        admit(submit(**fields), CONFIG, NODES)


def test_a_share_is_written_shard_or_mps():
    for bad in ("gpu:1", "shard", "shard:-1", "mps:1.5", "shard:2,mps:3"):
        with pytest.raises(pydantic.ValidationError):  # the API answers 422
            submit(gpu_share=bad)
