"""Virtual hosts for the multi-host end-to-end mode: one Linux network namespace per host, each with its
own address on a private /24, its own host name and an /etc/hosts that names every other host.

Layout, made by `VirtualNetwork.create()` and undone by `destroy()` (also after a failure half-way):

    switch namespace: bridge br0 ── veth ── host namespace "head"  eth0 10.X.0.1  (the controller)
                                 ── veth ── host namespace "gpu1"  eth0 10.X.0.2  (an agent)
                                 ── ...
                                 ── veth ── this (root) namespace   10.X.0.254   (the test process)

The bridge lives in a namespace of its own, so the host's firewall and bridge settings play no part; the
root namespace gets one veth onto it, so that the test process can speak HTTP to the controller.
`ip netns exec` bind-mounts /etc/netns/<namespace>/hosts over /etc/hosts for what it runs, which is how
the host names resolve inside (and only inside) the namespaces. Processes also get a UTS namespace of
their own with the host name set (`unshare --uts`), so `hostname` in a job prints the node's name.
Every name carries a per-run tag: runs in parallel (or a run killed before its teardown) do not clash.
"""
from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

IP = shutil.which("ip") or "/usr/sbin/ip"
UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"
NETNS_ETC = Path("/etc/netns")
ROOT_HOST_INDEX = 254  # the test process's address on the network: 10.X.0.254


class NetnsUnavailable(Exception):
    """This machine cannot make the virtual hosts; the message says why (the tests skip with it)."""


def _ip(*args: str, netns: str | None = None) -> None:
    argv = [IP, *(("-n", netns) if netns else ()), *args]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


def unavailable_reason() -> str | None:
    """Why the virtual hosts cannot be made here, or None if they can."""
    if os.geteuid() != 0:
        return "multi-host mode needs root (network namespaces, veth, a bridge)"
    for tool in (IP, UNSHARE):
        if not os.access(tool, os.X_OK):
            return f"multi-host mode needs {tool} (iproute2, util-linux)"
    probe = f"corral-probe-{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
    except RuntimeError as exc:
        return f"network namespaces are unavailable: {exc}"
    try:
        _ip("link", "add", "br0", "type", "bridge", netns=probe)
        _ip("link", "add", "v0", "type", "veth", "peer", "name", "v1", netns=probe)
        entered = subprocess.run(Host("probe", probe, "").command(["true"]), capture_output=True, text=True)
        if entered.returncode != 0:
            return f"cannot run a process on a virtual host: {entered.stderr.strip()}"
    except RuntimeError as exc:
        return f"veth or bridge devices are unavailable: {exc}"
    finally:
        _ip("netns", "del", probe)
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.X.0.0/24 that no route of this machine covers yet."""
    routes = subprocess.run([IP, "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    used = [ipaddress.ip_network(word, strict=False) for line in routes.splitlines()
            for word in line.split()[:2] if word[0].isdigit()]
    for _ in range(64):
        candidate = ipaddress.ip_network(f"10.{secrets.randbelow(200) + 50}.0.0/24")
        if not any(candidate.overlaps(net) for net in used):
            return candidate
    raise NetnsUnavailable("no free 10.X.0.0/24 subnet for the virtual hosts")


@dataclass
class Host:
    name: str  # the host name, also its node name
    netns: str
    address: str

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run on this host: in its network namespace, with its /etc/hosts and host name."""
        return [IP, "netns", "exec", self.netns, UNSHARE, "--uts", "--", "/bin/sh", "-c",
                'hostname "$0" && exec "$@"', self.name, *argv]


@dataclass
class VirtualNetwork:
    host_names: list[str]
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    hosts: dict[str, Host] = field(default_factory=dict)
    root_address: str = ""
    _undo: list[tuple[str, ...]] = field(default_factory=list)

    @property
    def switch(self) -> str:
        return f"corral-{self.tag}-switch"

    @property
    def root_link(self) -> str:
        return f"crl{self.tag}"  # an interface name: 15 characters at most

    def create(self) -> "VirtualNetwork":
        try:
            self._create()
        except BaseException:
            self.destroy()
            raise
        return self

    def _create(self) -> None:
        subnet = _free_subnet()
        self._add_netns(self.switch)
        _ip("link", "add", "br0", "type", "bridge", netns=self.switch)
        _ip("link", "set", "br0", "up", netns=self.switch)
        for index, name in enumerate(self.host_names, start=1):
            host = Host(name, f"corral-{self.tag}-{name}", str(subnet[index]))
            self._add_netns(host.netns)
            _ip("link", "add", "eth0", "netns", host.netns, "type", "veth", "peer", "name", f"v{index}",
                "netns", self.switch)
            self._attach(f"v{index}")
            _ip("addr", "add", f"{host.address}/{subnet.prefixlen}", "dev", "eth0", netns=host.netns)
            _ip("link", "set", "eth0", "up", netns=host.netns)
            _ip("link", "set", "lo", "up", netns=host.netns)
            self.hosts[name] = host
        self.root_address = str(subnet[ROOT_HOST_INDEX])
        _ip("link", "add", self.root_link, "type", "veth", "peer", "name", "vroot", "netns", self.switch)
        self._undo.append(("link", "del", self.root_link))
        self._attach("vroot")
        _ip("addr", "add", f"{self.root_address}/{subnet.prefixlen}", "dev", self.root_link)
        _ip("link", "set", self.root_link, "up")
        self._write_hosts_files()

    def set_link(self, host: str, up: bool) -> None:
        """Plug `host` into the network or pull its cable (its switch port): a partition, made for real."""
        index = self.host_names.index(host) + 1
        _ip("link", "set", f"v{index}", "up" if up else "down", netns=self.switch)

    def _add_netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._undo.append(("netns", "del", name))

    def _attach(self, port: str) -> None:
        _ip("link", "set", port, "master", "br0", netns=self.switch)
        _ip("link", "set", port, "up", netns=self.switch)

    def _write_hosts_files(self) -> None:
        lines = ["127.0.0.1 localhost"] + [f"{h.address} {h.name}" for h in self.hosts.values()]
        for host in self.hosts.values():
            directory = NETNS_ETC / host.netns
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "hosts").write_text("\n".join(lines) + "\n")

    def destroy(self) -> None:
        """Kill what still runs on the virtual hosts (all of it was started by this run), delete the
        namespaces and the root namespace's link, and remove the hosts files. Safe to call twice."""
        for host in self.hosts.values():
            self._kill_processes_in(host.netns)
        for step in reversed(self._undo):
            try:
                _ip(*step)
            except RuntimeError:
                pass  # already gone (a namespace's veth dies with the namespace)
        self._undo.clear()
        for host in self.hosts.values():
            shutil.rmtree(NETNS_ETC / host.netns, ignore_errors=True)

    @staticmethod
    def _kill_processes_in(netns: str) -> None:
        pids = subprocess.run([IP, "netns", "pids", netns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
