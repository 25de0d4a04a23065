"""Container images and rootless runc tasks, for real: an image built here (container_image.py), imported into
a node cache, run by runc as a real Unix user made with useradd."""
from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

from corral.agent.cgroups import CgroupError, CgroupTree
from corral.agent.container_images import CachedImage, ImageCache, ImageError, node_architecture
from corral.agent.container_runtime import (
    BundleRequest,
    ContainerError,
    ContainerSpec,
    Mount,
    TaskUser,
    named_rootfs,
    parse_mounts,
    prepare_task,
    subordinate_id,
    user_can_reach,
)
from corral.agent.identity import TaskIdentity
from corral.agent.tasks import spawn_task
from corral.container_options import ContainerOptionError
from tests.agent.container_image import BUSYBOX, build_image, entry

needs_busybox = pytest.mark.skipif(BUSYBOX is None, reason="needs busybox-static")
needs_runc = pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("runc", "unshare", "newuidmap", "useradd")),
    reason="needs root, runc, unshare, newuidmap (Debian's uidmap) and useradd")


@pytest.fixture
def tmp_path():
    """A directory every user can reach: the tests run tasks and imports as a made user, and pytest's own
    temporary directories are root's alone (0700) unless a run names a --basetemp."""
    root = Path(tempfile.mkdtemp(prefix="corral-containers-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def image(tmp_path) -> Path:
    return build_image(tmp_path / "image.tar", node_architecture())


@pytest.fixture
def user(tmp_path):
    name = f"ctr{uuid.uuid4().hex[:6]}-containers"[:32]
    subprocess.run(["useradd", "-M", "-d", f"/nonexistent-{name}", "-s", "/bin/sh", name], check=True)
    subprocess.run(["usermod", "--add-subuids", "300000-300000", "--add-subgids", "300000-300000", name], check=True)
    yield pwd.getpwnam(name)
    subprocess.run(["userdel", name], check=False)


@needs_busybox
def test_an_image_is_imported_with_its_layers_applied_and_whiteouts_honoured(tmp_path, image):
    cache = ImageCache(tmp_path / "cache", limit_bytes=1 << 30)
    found = cache.acquire(str(image), "job1")
    assert (found.rootfs / "etc/image-release").read_text() == "corral-test-image\n"
    assert (found.rootfs / "bin/sh").is_symlink()
    assert not (found.rootfs / "gone/file").exists()
    assert found.architecture == node_architecture() and found.size_bytes > 100_000


@needs_busybox
def test_an_image_for_another_architecture_is_refused_and_nothing_is_cached(tmp_path):
    other = "arm64" if node_architecture() != "arm64" else "amd64"
    image = build_image(tmp_path / "other.tar", other)
    cache = ImageCache(tmp_path / "cache", limit_bytes=1 << 30)
    with pytest.raises(ImageError, match=f"built for {other}.*use an image built for {node_architecture()}"):
        cache.acquire(str(image), "job1")
    assert cache.images() == []


@needs_busybox
def test_a_top_level_whiteout_removes_what_a_lower_layer_made(tmp_path):
    image = build_image(tmp_path / "image.tar", node_architecture(),
                        [[entry("marker", data=b"x")], [entry(".wh.marker", data=b"")]])
    rootfs = ImageCache(tmp_path / "cache", limit_bytes=1 << 30).acquire(str(image), "job1").rootfs
    assert not (rootfs / "marker").exists() and (rootfs / "etc/image-release").exists()


@pytest.fixture
def victim(tmp_path) -> Path:
    """A host file that a hostile image tries to reach."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("host data\n")
    return outside / "victim"


def hostile_layers(victim: Path) -> dict[str, list[list]]:
    outside = str(victim.parent)
    return {
        "dot-dot whiteout": [[entry("../../outside/.wh.victim", data=b"")]],
        "whiteout through a symlink": [[entry("esc", tarfile.SYMTYPE, link=outside)],
                                       [entry("esc/.wh.victim", data=b"")]],
        "hard link out": [[entry("stolen", tarfile.LNKTYPE, link="../../outside/victim")]],
        "hard link through a symlink": [[entry("hop", tarfile.SYMTYPE, link=str(victim)),
                                         entry("stolen", tarfile.LNKTYPE, link="hop")]],
    }


@needs_busybox
@pytest.mark.parametrize("attack", ["dot-dot whiteout", "whiteout through a symlink", "hard link out",
                                    "hard link through a symlink"])
def test_an_image_that_reaches_outside_its_root_is_refused_and_the_host_file_is_untouched(tmp_path, victim,
                                                                                          attack):
    image = build_image(tmp_path / "image.tar", node_architecture(), hostile_layers(victim)[attack])
    cache = ImageCache(tmp_path / "cache", limit_bytes=1 << 30)
    with pytest.raises(ImageError, match="leaves the image"):
        cache.acquire(str(image), "job1")
    assert victim.read_text() == "host data\n" and victim.stat().st_nlink == 1
    assert cache.images() == [] and {p.name for p in (tmp_path / "cache").iterdir()} <= {".locks", ".sources"}


@needs_busybox
def test_device_files_in_an_image_are_not_made(tmp_path):
    disk = entry("etc/disk", tarfile.CHRTYPE, mode=0o666)
    disk[0].devmajor, disk[0].devminor = 1, 3  # /dev/null's numbers: harmless if a broken filter made it
    image = build_image(tmp_path / "image.tar", node_architecture(), [[disk]])
    rootfs = ImageCache(tmp_path / "cache", limit_bytes=1 << 30).acquire(str(image), "job1").rootfs
    assert not (rootfs / "etc/disk").exists() and (rootfs / "etc/image-release").exists()


@pytest.mark.skipif(shutil.which("skopeo") is None, reason="needs skopeo")
# .invalid never resolves (RFC 2606) and nothing listens on port 1: unreachable even where CI has a network
@pytest.mark.parametrize("reference", ["docker://registry.invalid/nvidia/pytorch:24.05-py3", "127.0.0.1:1/busybox:1",
                                       "registry.invalid#nvidia/pytorch:24.05-py3"])
def test_a_registry_these_machines_cannot_reach_fails_clearly(tmp_path, reference):
    with pytest.raises(ImageError, match="is unreachable from this node.*save the image to a file.*skopeo copy"):
        ImageCache(tmp_path / "cache", limit_bytes=1 << 30).acquire(reference, "job1")
    assert ImageCache(tmp_path / "cache", limit_bytes=1 << 30).images() == []


def test_a_missing_image_file_says_so(tmp_path):
    with pytest.raises(ImageError, match="not found on this node"):
        ImageCache(tmp_path / "cache", limit_bytes=1 << 30).acquire(str(tmp_path / "nope.tar"), "job1")


class CountingCache(ImageCache):
    imports = 0

    def _import(self, source, key):
        CountingCache.imports += 1
        super()._import(source, key)


class AtOnceCache(CountingCache):
    """Holds every asker at a barrier before it hashes the image file, so that all of them hash it, and
    remember its key, at the same time (the agent acquires each job's image in a thread of its own)."""
    barrier: threading.Barrier

    def _file_key(self, path, signature):
        AtOnceCache.barrier.wait(timeout=30)
        return super()._file_key(path, signature)


def ask_at_once(cache_directory: Path, image: Path, askers: int) -> list[CachedImage | BaseException]:
    """What each of `askers` threads, asking for `image` at once in one process, got: an image or an error."""
    AtOnceCache.barrier = threading.Barrier(askers)
    got: list[CachedImage | BaseException] = []

    def ask(lease):
        try:
            got.append(AtOnceCache(cache_directory, limit_bytes=1 << 30).acquire(str(image), lease))
        except BaseException as error:  # noqa: BLE001 - what a thread raised is what the test reports
            got.append(error)

    threads = [threading.Thread(target=ask, args=(f"job{n}",)) for n in range(askers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return got


@needs_busybox
def test_jobs_asking_for_one_image_at_once_import_it_once_and_all_get_it(tmp_path, image):
    # The window this guards (two threads of one agent writing the image file's remembered key through one
    # temporary file) is a few microseconds wide: threads switch after almost every bytecode, and the askers
    # race again, for the key alone, in rounds that forget it (with 30 rounds the old code failed 5 runs in 6).
    CountingCache.imports = 0
    cache = tmp_path / "cache"
    switch_interval_s = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _round in range(60):
            shutil.rmtree(cache / ".sources", ignore_errors=True)
            got = ask_at_once(cache, image, askers=8)
            assert [found for found in got if not isinstance(found, CachedImage)] == []
            assert len({found.key for found in got if isinstance(found, CachedImage)}) == 1 and len(got) == 8
    finally:
        sys.setswitchinterval(switch_interval_s)
    assert CountingCache.imports == 1


@needs_busybox
def test_eviction_removes_the_least_recently_used_unleased_image(tmp_path, image):
    second = tmp_path / "second.tar"
    shutil.copy(image, second)
    with open(second, "ab") as file:
        file.write(b"\0" * 1024)  # other content, same layers: another cache entry
    cache = ImageCache(tmp_path / "cache", limit_bytes=1 << 30)
    first_image = cache.acquire(str(image), "job1")
    cache.release(first_image.key, "job1")
    second_image = cache.acquire(str(second), "job2")
    cache.limit_bytes = second_image.size_bytes + 1  # room for one
    assert cache.evict() == [first_image.key]
    assert [found.key for found in cache.images()] == [second_image.key]
    cache.limit_bytes = 0  # second is leased by job2: kept while it is
    assert cache.evict() == []
    cache.release(second_image.key, "job2")
    assert cache.images() == []


def test_container_mounts_parse_as_pyxis_writes_them():
    assert parse_mounts("/data:/data:ro,/scratch") == (Mount("/data", "/data", True), Mount("/scratch", "/scratch"))
    with pytest.raises(ContainerOptionError, match="absolute"):
        parse_mounts("data:/data")
    with pytest.raises(ContainerOptionError, match="ro or rw"):
        parse_mounts("/data:/data:rx")


def run_in_container(tmp_path, rootfs, user, argv, spec, device_files=(), writable=False, name="t"):
    task_user = TaskUser(user.pw_uid, user.pw_gid)
    request = BundleRequest(spec=spec, user=task_user, rootfs=rootfs, argv=argv,
                            env={"SLURM_JOB_ID": "42", "CUDA_VISIBLE_DEVICES": "0"}, cwd="/",
                            device_files=list(device_files), rootfs_writable=writable,
                            subordinate_uid=subordinate_id(user.pw_name, "/etc/subuid"),
                            subordinate_gid=subordinate_id(user.pw_name, "/etc/subgid"))
    bundle = tmp_path / "bundles" / name
    command = prepare_task(request, bundle, f"corral-containers-{uuid.uuid4().hex[:8]}")
    return subprocess.run(command, user=user.pw_uid, group=user.pw_gid, extra_groups=[], cwd="/",
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def shared(tmp_path):
    """tmp_path, which the user may enter (pytest makes its base directory private to root)."""
    for directory in (tmp_path.parent, tmp_path):
        os.chmod(directory, 0o755)
    return tmp_path


@needs_busybox
@needs_runc
def test_a_task_runs_in_the_image_as_the_user_with_only_its_gpus_and_writes_the_mounted_workdir(shared, image,
                                                                                                  user):
    rootfs = ImageCache(shared / "cache", limit_bytes=1 << 30).acquire(str(image), "job42").rootfs
    work = shared / "work"
    work.mkdir()
    os.chown(work, user.pw_uid, user.pw_gid)
    gpus = shared / "dev"
    gpus.mkdir()
    for index in (0, 1):
        os.mknod(gpus / f"nvidia{index}", 0o666 | stat.S_IFCHR, os.makedev(195, index))
    spec = ContainerSpec(image=str(image), mounts=(Mount(str(work), "/work"),), workdir="/work")
    script = ("id -u; id -g; cat /etc/image-release; echo $SLURM_JOB_ID $CUDA_VISIBLE_DEVICES; pwd; "
              "ls /dev | grep nvidia; echo out > /work/result; touch /etc/x 2>/dev/null || echo rootfs-read-only")
    done = run_in_container(shared, rootfs, user, ["/bin/sh", "-c", script], spec,
                            device_files=[str(gpus / "nvidia1")])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n") == [str(user.pw_uid), str(user.pw_gid), "corral-test-image", "42 0", "/work",
                                       "nvidia1", "rootfs-read-only", ""]
    assert (work / "result").read_text() == "out\n" and (work / "result").stat().st_uid == user.pw_uid


@needs_busybox
@needs_runc
def test_remap_root_makes_the_user_root_inside_and_nothing_more(shared, image, user):
    rootfs = ImageCache(shared / "cache", limit_bytes=1 << 30).acquire(str(image), "job42").rootfs
    work = shared / "work"
    work.mkdir()
    os.chown(work, user.pw_uid, user.pw_gid)
    spec = ContainerSpec(image=str(image), mounts=(Mount(str(work), "/work"),), remap_root=True)
    done = run_in_container(shared, rootfs, user, ["/bin/sh", "-c", "id -u; touch /work/made"], spec)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0\n"
    assert (work / "made").stat().st_uid == user.pw_uid  # root inside is the user outside


@needs_busybox
@needs_runc
def test_a_named_container_keeps_its_state_between_two_steps(shared, image, user):
    cached = ImageCache(shared / "cache", limit_bytes=1 << 30).acquire(str(image), "job42").rootfs
    spec = ContainerSpec(image=str(image), name="env1")
    job_dir = shared / "job42"
    rootfs = named_rootfs(job_dir, "env1", cached, TaskUser(user.pw_uid, user.pw_gid))
    first = run_in_container(shared, rootfs, user, ["/bin/sh", "-c", "echo installed > /etc/step0"], spec,
                             writable=True, name="s0")
    assert first.returncode == 0, first.stderr
    again = named_rootfs(job_dir, "env1", cached, TaskUser(user.pw_uid, user.pw_gid))
    second = run_in_container(shared, again, user, ["/bin/cat", "/etc/step0"], spec, writable=True, name="s1")
    assert second.stdout == "installed\n", second.stderr
    assert not (cached / "etc/step0").exists()


@needs_busybox
@needs_runc
def test_a_mount_the_user_cannot_read_is_refused_before_anything_runs(shared, image, user):
    rootfs = ImageCache(shared / "cache", limit_bytes=1 << 30).acquire(str(image), "job42").rootfs
    private = shared / "private"
    private.mkdir(mode=0o700)
    spec = ContainerSpec(image=str(image), mounts=(Mount(str(private), "/data"),))
    with pytest.raises(ContainerError, match=f"{private} is not readable by uid {user.pw_uid}"):
        run_in_container(shared, rootfs, user, ["/bin/true"], spec)


@pytest.fixture
def job_cgroups(shared):
    """A job's cgroups on the host's v1 hierarchies, allowed GPU 1 of two fake ones (mknod, major 195)."""
    gpus = {index: shared / f"nvidia{index}" for index in (0, 1)}
    for index, path in gpus.items():
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(195, index))
    try:
        tree = CgroupTree.open(None, f"corral-containers-{uuid.uuid4().hex[:6]}", gpus)
    except CgroupError as exc:
        pytest.skip(f"no v1 hierarchies here: {exc}")
    yield tree, gpus
    for hierarchy in tree.hierarchies:
        for path in sorted((p for p in hierarchy.root.rglob("*") if p.is_dir()), reverse=True):
            path.rmdir()
        hierarchy.root.rmdir()


@needs_busybox
@needs_runc
def test_a_task_leader_starts_the_container_in_the_jobs_cgroup_as_the_user(shared, image, user, job_cgroups):
    tree, gpus = job_cgroups
    leaves = tree.for_job(77).leaf("step_0", mem_mib=64, gpus=[1])
    rootfs = ImageCache(shared / "cache", limit_bytes=1 << 30).acquire(str(image), "job77").rootfs
    request = BundleRequest(spec=ContainerSpec(image=str(image)), user=TaskUser(user.pw_uid, user.pw_gid),
                            rootfs=rootfs, argv=["/bin/sh", "-c", "id -u; cat /proc/self/cgroup; ls /dev"],
                            env={}, cwd="/", device_files=[str(gpus[1])],
                            subordinate_uid=subordinate_id(user.pw_name, "/etc/subuid"),
                            subordinate_gid=subordinate_id(user.pw_name, "/etc/subgid"))
    argv = prepare_task(request, shared / "bundle", f"corral-containers-{uuid.uuid4().hex[:8]}")
    identity = TaskIdentity(user.pw_name, user.pw_uid, user.pw_gid, (user.pw_gid,), "/", "/bin/sh")
    out_path = shared / "out"

    async def run_task() -> int:
        with open(out_path, "wb") as out:
            starting = spawn_task(argv, cwd="/", env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                                  stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL,
                                  exit_dir=shared / "spool", identity=identity, cgroup_leaves=leaves)
        process = await starting.result()
        process.confirm(True)
        return await process.wait()

    assert asyncio.run(run_task()) == 0
    lines = out_path.read_text().split("\n")
    assert lines[0] == str(user.pw_uid)
    memory = next(line for line in lines if ":memory:" in line)
    assert memory.endswith("/job_77/step_0")
    assert "nvidia1" in lines and "nvidia0" not in lines


@needs_busybox
def test_a_node_without_the_runtime_says_so_and_what_to_do(shared, image, monkeypatch):
    monkeypatch.setenv("PATH", str(shared))  # a node whose PATH has no runc
    request = BundleRequest(spec=ContainerSpec(image=str(image)), user=TaskUser(os.getuid(), os.getgid()),
                            rootfs=shared, argv=["/bin/true"], env={}, cwd="/")
    with pytest.raises(ContainerError, match="no container runtime .runc is not installed"):
        prepare_task(request, shared / "bundle", "corral-containers-x")
    assert not (shared / "bundle").exists()


@needs_runc
def test_a_user_without_subordinate_ids_is_told_to_get_them_or_remap_root(shared):
    request = BundleRequest(spec=ContainerSpec(image="x.tar"), user=TaskUser(4321, 4321), rootfs=shared,
                            argv=["/bin/true"], env={}, cwd="/")
    with pytest.raises(ContainerError, match="no subordinate ids.*usermod --add-subuids.*--container-remap-root"):
        prepare_task(request, shared / "bundle", "corral-containers-x")
    assert not (shared / "bundle").exists()
    remapped = BundleRequest(spec=ContainerSpec(image="x.tar", remap_root=True), user=TaskUser(4321, 4321),
                             rootfs=shared, argv=["/bin/true"], env={}, cwd="/")
    argv = prepare_task(remapped, shared / "bundle2", "corral-containers-y")
    assert argv[:5] == ["unshare", "--user", "--mount", "--map-user=0", "--map-group=0"]
    assert not any(arg.startswith("--map-users") for arg in argv)


@needs_busybox
@needs_runc
def test_an_image_file_the_user_cannot_read_is_not_imported_for_them(shared, user):
    private = shared / "private"
    private.mkdir(mode=0o700)
    image = build_image(private / "image.tar", node_architecture())
    cache = ImageCache(shared / "cache", limit_bytes=1 << 30)
    task_user = TaskUser(user.pw_uid, user.pw_gid)
    with pytest.raises(ImageError, match="not readable by the job's user"):
        cache.acquire(str(image), "job1", may_read=lambda path: user_can_reach(path, task_user))
    assert cache.images() == []
    os.chmod(private, 0o755)
    assert cache.acquire(str(image), "job1", may_read=lambda path: user_can_reach(path, task_user)).size_bytes
