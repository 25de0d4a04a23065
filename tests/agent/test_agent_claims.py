"""An agent uses only what is provably its own (issue 21, item 2): its cgroup tree, named by its cluster
and node, and its spool, each locked while it runs, so that a second agent given the same refuses to start
instead of killing the first one's jobs as leftovers."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from corral.agent.__main__ import claim_spool, default_spool_dir
from corral.agent.cgroups import CgroupError, CgroupTree, CgroupTreeTaken, default_root, tree_name
from tests.agent.test_confinement import (
    cgroup_tree,  # noqa: F401 - a fixture: a cgroup2 tree
    gpu_files,  # noqa: F401 - the fixture cgroup_tree uses
)


def agent_argv(tmp_path: Path, *extra: str) -> list[str]:
    secret_file = tmp_path / "secret"
    secret_file.write_text("test-secret\n")
    return [sys.executable, "-m", "corral.agent", "--controller", "http://127.0.0.1:9", "--secret-file",
            str(secret_file), "--node", "n1", "--gpus", "0", "--cpus", "2", "--mem-mib", "1024",
            "--tasks-as-agent-user", *extra]


def test_the_clusters_id_names_the_cgroup_tree_and_the_spool():
    assert tree_name("node1", "5eed") == "corral-5eed-node1" and tree_name("node1", None) == "corral-node1"
    root = default_root("node1", "5eed")
    assert root is None or root.name == "corral-5eed-node1"
    assert default_spool_dir("node1", run_as_user=True, cluster_id="5eed") == Path("/var/spool/corral/agent-5eed-node1")


@pytest.mark.parametrize("bad", ["", "A1", "../x", "a" * 33, "a-b"])
def test_a_cluster_id_that_cannot_name_files_is_refused(bad, tmp_path):
    result = subprocess.run(agent_argv(tmp_path, "--cluster-id", bad, "--no-cgroups"), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert f"argument --cluster-id: cluster id {bad!r} is not 1 to 32 lower-case letters and digits" in result.stderr


def test_a_second_claim_of_a_cgroup_tree_is_refused_naming_its_holder(cgroup_tree):  # noqa: F811
    cgroup_tree.claim()
    again = CgroupTree.open(cgroup_tree.root)
    with pytest.raises(CgroupTreeTaken, match=rf"the cgroup tree {cgroup_tree.root} is held by another running "
                                              rf"agent \(pid {os.getpid()}\): each agent on a host needs its own"):
        again.claim()
    release(cgroup_tree)
    again.claim()
    release(again)


def test_a_tree_of_the_same_name_elsewhere_in_cgroup_v2_is_refused_its_v1_hierarchies(cgroup_tree):  # noqa: F811
    if len(cgroup_tree.hierarchies) < 2:
        pytest.skip(f"no v1 hierarchy beside cgroup v2 here ({cgroup_tree.describe()})")
    cgroup_tree.claim()
    elsewhere = cgroup_tree.root.parent / f"clusters-{secrets.token_hex(3)}"
    elsewhere.mkdir()
    try:
        twin = CgroupTree.open(elsewhere / cgroup_tree.root.name)  # its v1 trees are the first one's
        with pytest.raises(CgroupTreeTaken, match=f"the cgroup tree {cgroup_tree.hierarchies[1].root} is held"):
            twin.claim()
        twin.root.rmdir()
    finally:
        elsewhere.rmdir()
        release(cgroup_tree)


def release(tree: CgroupTree) -> None:
    """Let the tree go, which removes it (empty) from every hierarchy; made again for the fixture's clean-up."""
    tree.release()
    assert not any(hierarchy.root.exists() for hierarchy in tree.hierarchies)
    for hierarchy in tree.hierarchies:
        hierarchy.root.mkdir()


def test_an_agent_given_a_running_agents_cgroup_tree_refuses_to_start(cgroup_tree, tmp_path):  # noqa: F811
    cgroup_tree.claim()  # as the running agent does
    cgroup_tree.for_job(1).leaf("batch")  # its job 1
    try:
        result = subprocess.run(agent_argv(tmp_path, "--cgroup-root", str(cgroup_tree.root), "--spool",
                                           str(tmp_path / "spool")), capture_output=True, text=True, timeout=60)
        assert result.returncode == 1, result.stderr
        assert f"corral agent: the cgroup tree {cgroup_tree.root} is held by another running agent (pid " \
               f"{os.getpid()})" in result.stderr
        assert (cgroup_tree.root / "job_1" / "batch").is_dir(), "the running agent's job is left alone"
    finally:
        cgroup_tree.for_job(1).remove_if_empty()
        release(cgroup_tree)


def test_an_agent_given_a_running_agents_spool_refuses_to_start(tmp_path):
    spool = tmp_path / "spool"
    held = claim_spool(spool)
    try:
        result = subprocess.run(agent_argv(tmp_path, "--no-cgroups", "--spool", str(spool)), capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 1
        assert f"corral agent: the spool {spool} is another running agent's: each agent needs its own" \
               in result.stderr
    finally:
        os.close(held)
    assert claim_spool(spool) >= 0, "free again once its agent is gone"


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a tree as root, then opens it as another uid")
def test_an_agent_never_opens_another_users_cgroup_tree():
    root = default_root("node1", f"clusters{secrets.token_hex(3)}")
    if root is None:
        pytest.skip("no cgroup v2 mount here")
    try:
        root.mkdir()
    except OSError as exc:
        pytest.skip(f"the host's cgroup2 mount is not writable here: {exc}")
    try:
        child = os.fork()
        if child == 0:  # as nobody: root's tree is there, but not this user's to use
            code = 1
            try:
                os.setuid(65534)
                CgroupTree.open(root)
            except CgroupError as exc:
                code = 0 if "Permission denied (another user's tree)" in str(exc) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        root.rmdir()


def test_an_agents_cluster_file_leaves_another_running_clusters_alone(tmp_path):
    import json

    from corral.agent.auth_socket import remove_cluster_file, write_cluster_file
    from tests.cli.test_cluster_files import auth_socket

    path = tmp_path / "etc" / "cluster.json"
    with auth_socket(tmp_path / "other.sock") as other:
        path.parent.mkdir()
        path.write_text(json.dumps({"url": "http://127.0.0.1:7001", "auth_socket": str(other)}))
        assert write_cluster_file(path, ["http://head:6817"], str(tmp_path / "mine.sock"), None) == \
            "http://127.0.0.1:7001"
        remove_cluster_file(path, str(tmp_path / "mine.sock"))
        assert json.loads(path.read_text())["auth_socket"] == str(other)
    assert write_cluster_file(path, ["http://head:6817"], str(tmp_path / "mine.sock"), None) is None, "stale"
    assert json.loads(path.read_text())["url"] == "http://head:6817"
