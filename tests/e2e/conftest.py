from __future__ import annotations

import pytest

from tests.e2e.harness import Cluster


@pytest.fixture
def cluster_factory(tmp_path):
    made: list[Cluster] = []

    def make(nodes: int = 2, gpus: int = 4, config: str = "", db: str | None = None,
             nvml_names: dict[str, list[str]] | None = None, tls_names: tuple[str, ...] | None = None,
             controller_args: tuple[str, ...] = (), node_features: dict[str, str] | None = None) -> Cluster:
        c = Cluster(tmp_path, nodes=nodes, gpus=gpus, config=config, db=db, nvml_names=nvml_names,
                    tls_names=tls_names, controller_args=controller_args, node_features=node_features)
        made.append(c)
        return c.start()

    yield make
    for c in made:
        c.stop()


@pytest.fixture
def cluster(cluster_factory) -> Cluster:
    return cluster_factory()
