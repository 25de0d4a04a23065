"""What running and completing jobs hold on each node, kept incrementally, and the core's node views
rebuilt only for nodes whose usage or state changed (a cycle at 1,000 nodes reuses the rest)."""
from __future__ import annotations

from collections.abc import Iterable

from corral.core.basepool import BasePool
from corral.core.model import NodeView, RunningJob
from corral.engine.records import Job, Node
from corral.engine.views import expected_end


class NodeUsage:
    def __init__(self) -> None:
        self.gpus: dict[str, set[int]] = {}
        self.cpus: dict[str, int] = {}
        self.mem_mib: dict[str, int] = {}
        # Devices shared by fractional jobs: node -> device -> milli-GPU in use (not in `gpus`).
        self.shared: dict[str, dict[int, int]] = {}
        self._views: dict[str, NodeView] = {}
        # The last tuple views() returned, with the node objects it was built for: reused while nothing
        # changed (most cycles, when no job started or ended since the previous one).
        self._all: tuple[tuple[object, ...], tuple[NodeView, ...]] | None = None
        self._positions: dict[str, int] = {}  # node name -> its place in _all
        self._stale: set[str] = set()  # nodes whose usage changed since _all was built: patched in place
        # The core's base pool as of now, kept between cycles (Snapshot.base): built from the views once,
        # then changed job by job; rebuilt when a node itself changes.
        self._base: BasePool | None = None
        self._base_nodes: tuple[Node, ...] = ()

    def add(self, job: Job) -> None:
        for s in job.slices:
            if s.gpu_milli < 1000:
                self._share(s.node, s.gpus, s.gpu_milli)
            else:
                self.gpus.setdefault(s.node, set()).update(s.gpus)
            self.cpus[s.node] = self.cpus.get(s.node, 0) + s.cpus
            self.mem_mib[s.node] = self.mem_mib.get(s.node, 0) + s.mem_mib
            self._views.pop(s.node, None)
            self._stale.add(s.node)
        if self._base is not None:
            self._base.hold(job.id, job.slices, expected_end(job))

    def remove(self, job: Job) -> None:
        for s in job.slices:
            if s.gpu_milli < 1000:
                self._share(s.node, s.gpus, -s.gpu_milli)
            else:
                self.gpus.get(s.node, set()).difference_update(s.gpus)
            self.cpus[s.node] = self.cpus.get(s.node, 0) - s.cpus
            self.mem_mib[s.node] = self.mem_mib.get(s.node, 0) - s.mem_mib
            self._views.pop(s.node, None)
            self._stale.add(s.node)
        if self._base is not None:
            self._base.unhold(job.id)

    def retime(self, job: Job) -> None:
        """A running job's expected end changed (it is being stopped)."""
        if self._base is not None:
            self._base.retime(job.id, expected_end(job))

    def _share(self, node: str, gpus: tuple[int, ...], milli: int) -> None:
        shared = self.shared.setdefault(node, {})
        for g in gpus:
            used = shared.get(g, 0) + milli
            if used > 0:
                shared[g] = used
            else:
                shared.pop(g, None)

    def changed(self, node: str) -> None:
        """The node itself changed (registered, drained, lost): rebuild its view."""
        self._views.pop(node, None)
        self._all = None
        self._base = None

    def base(self, nodes: Iterable[Node], running: Iterable[RunningJob]) -> BasePool:
        """The base pool for Snapshot.base: the nodes' views with the running jobs' releases."""
        nodes = tuple(nodes)
        if self._base is None or self._base_nodes != nodes:
            base = BasePool(self.views(nodes))
            for job in running:
                base.note_running(job.id, job.slices, job.expected_end)
            self._base, self._base_nodes = base, nodes
        return self._base

    def of(self, node: str) -> tuple[set[int], int, int]:
        return self.gpus.get(node, set()), self.cpus.get(node, 0), self.mem_mib.get(node, 0)

    def views(self, nodes: Iterable[Node]) -> tuple[NodeView, ...]:
        nodes = tuple(nodes)
        if self._all is not None and self._all[0] == nodes:
            if self._stale:  # a job started or ended: rebuild its nodes' views only
                out = list(self._all[1])
                for name in self._stale:
                    at = self._positions.get(name)
                    if at is not None:
                        out[at] = self._cached_view(nodes[at])
                self._all = (nodes, tuple(out))
                self._stale.clear()
            return self._all[1]
        self._all = (nodes, tuple(self._cached_view(node) for node in nodes))
        self._positions = {node.name: at for at, node in enumerate(nodes)}
        self._stale.clear()
        return self._all[1]

    def _cached_view(self, node: Node) -> NodeView:
        view = self._views.get(node.name)
        if view is None:
            view = self._views[node.name] = self._view(node)
        return view

    def _view(self, node: Node) -> NodeView:
        gpus, cpus, mem = self.of(node.name)
        shared = self.shared.get(node.name) or {}
        return NodeView(
            name=node.name, gpus=node.gpus, cpus=node.cpus, mem_mib=node.mem_mib,
            free_gpus=frozenset(g.index for g in node.gpus if g.index not in gpus and g.index not in shared),
            free_cpus=node.cpus - cpus, free_mem_mib=node.mem_mib - mem,
            partitions=node.partitions, schedulable=node.up and not node.drain,
            shared_gpus=tuple(sorted(shared.items())) if shared else ())
