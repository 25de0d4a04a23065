"""A share of one GPU through admission, the engine's node usage and the store's slice records."""
from __future__ import annotations

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
