"""Every image source of the node cache, for real: OCI archives, squashfs files (Debian's mksquashfs), SIF
files (written here after the SIF spec: apptainer is not in Debian 12) and pulls from a real registry
(Debian's docker-registry) on loopback, each imported through the same cache and its rules."""
from __future__ import annotations

import gzip
import hashlib
import http.client
import io
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from corral.agent.container_images import ImageCache, ImageError, node_architecture
from corral.agent.container_runtime import ContainerSpec
from corral.agent.image_archives import Layer, gunzip_layer
from corral.agent.image_registry import docker_reference, is_registry_reference, repository
from corral.agent.image_squashfs import listed_devices
from tests.agent.container_image import (
    BUSYBOX,
    build_image,
    build_oci_archive,
    build_rootfs,
    build_sif,
    build_squashfs,
    entry,
)
from tests.agent.test_containers import hostile_layers, needs_runc, run_in_container

ARCH = node_architecture()
OTHER_ARCH = "arm64" if ARCH != "arm64" else "amd64"
needs_busybox = pytest.mark.skipif(BUSYBOX is None, reason="needs busybox-static")
needs_squashfs = pytest.mark.skipif(not (shutil.which("mksquashfs") and shutil.which("unsquashfs")),
                                    reason="needs squashfs-tools")
needs_registry = pytest.mark.skipif(not (shutil.which("docker-registry") and shutil.which("skopeo")),
                                    reason="needs Debian's docker-registry and skopeo")


@pytest.fixture
def tmp_path():
    root = Path(tempfile.mkdtemp(prefix="corral-ctrimg-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def user():
    name = f"ctrimg{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "-M", "-d", f"/nonexistent-{name}", "-s", "/bin/sh", name], check=True)
    subprocess.run(["usermod", "--add-subuids", "310000-310000", "--add-subgids", "310000-310000", name],
                   check=True)
    yield pwd.getpwnam(name)
    subprocess.run(["userdel", name], check=False)


def cache_of(tmp_path: Path, **options) -> ImageCache:
    return ImageCache(tmp_path / "cache", limit_bytes=1 << 30, **options)


def nothing_cached(cache: ImageCache) -> bool:
    return cache.images() == [] and not any(p.name.startswith(".partial") for p in cache.directory.glob("*"))


# OCI image layouts

@needs_busybox
def test_an_oci_archive_is_imported_with_its_gzip_layers_and_whiteouts(tmp_path):
    found = cache_of(tmp_path).acquire(str(build_oci_archive(tmp_path / "image.oci.tar", (ARCH,))), "job1")
    assert (found.rootfs / "etc/image-release").read_text() == "corral-test-image\n"
    assert (found.rootfs / "bin/sh").is_symlink() and not (found.rootfs / "gone/file").exists()
    assert found.architecture == ARCH


@needs_busybox
def test_an_oci_index_of_several_platforms_gives_this_nodes(tmp_path):
    image = build_oci_archive(tmp_path / "multi.tar", (OTHER_ARCH, ARCH))
    assert cache_of(tmp_path).acquire(str(image), "job1").architecture == ARCH


@needs_busybox
def test_an_oci_index_without_this_nodes_platform_is_refused_naming_what_it_has(tmp_path):
    cache = cache_of(tmp_path)
    with pytest.raises(ImageError, match=f"holds no image for {ARCH} \\(it has: {OTHER_ARCH}, s390x\\)"):
        cache.acquire(str(build_oci_archive(tmp_path / "other.tar", (OTHER_ARCH, "s390x")).resolve()), "job1")
    assert nothing_cached(cache)


@needs_busybox
def test_an_oci_layer_that_does_not_match_its_digest_is_refused(tmp_path):
    cache = cache_of(tmp_path)
    with pytest.raises(ImageError, match="does not match its digest: the image is corrupt"):
        cache.acquire(str(build_oci_archive(tmp_path / "bad.tar", (ARCH,), corrupt_layer=True)), "job1")
    assert nothing_cached(cache)


@needs_busybox
@pytest.mark.parametrize("attack", ["dot-dot whiteout", "whiteout through a symlink", "hard link out",
                                    "hard link through a symlink"])
def test_an_oci_image_that_reaches_outside_its_root_is_refused(tmp_path, attack):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("host data\n")
    image = build_oci_archive(tmp_path / "image.tar", (ARCH,), hostile_layers(victim)[attack])
    cache = cache_of(tmp_path)
    with pytest.raises(ImageError, match="leaves the image"):
        cache.acquire(str(image), "job1")
    assert victim.read_text() == "host data\n" and victim.stat().st_nlink == 1 and nothing_cached(cache)


def test_a_file_that_is_no_image_says_which_kinds_are(tmp_path):
    junk = tmp_path / "image.sqfs"
    junk.write_bytes(b"not an image at all\n" * 10)
    with pytest.raises(ImageError, match="not an image corral can read: give a docker-archive or OCI"):
        cache_of(tmp_path).acquire(str(junk), "job1")


# squashfs and SIF

@needs_busybox
@needs_squashfs
def test_a_squashfs_image_is_imported_without_devices_set_id_bits_or_xattrs(tmp_path):
    rootfs = build_rootfs(tmp_path / "root")
    (rootfs / "bin/busybox").chmod(0o4755)
    image = build_squashfs(tmp_path / "image.sqfs", rootfs, ["etc/disk c 666 0 0 1 3"])
    found = cache_of(tmp_path).acquire(str(image), "job1")
    assert (found.rootfs / "etc/image-release").read_text() == "corral-test-image\n"
    assert (found.rootfs / "bin/sh").is_symlink() and os.readlink(found.rootfs / "bin/sh") == "busybox"
    assert not (found.rootfs / "etc/disk").exists() and not (found.rootfs / "etc/disk").is_symlink()
    assert stat.S_IMODE((found.rootfs / "bin/busybox").stat().st_mode) == 0o755
    assert found.architecture == ARCH and (found.rootfs / "proc").is_dir()


@needs_squashfs
def test_a_squashfs_of_another_architecture_is_refused_by_its_programs(tmp_path):
    rootfs = build_rootfs(tmp_path / "root", busybox=False)
    machine = {"arm64": 0xB7, "amd64": 0x3E}[OTHER_ARCH]
    elf = b"\x7fELF\x02\x01\x01" + b"\0" * 9 + (2).to_bytes(2, "little") + machine.to_bytes(2, "little")
    (rootfs / "bin/tool").write_bytes(elf + b"\0" * 44)
    cache = cache_of(tmp_path)
    with pytest.raises(ImageError, match=f"is built for {OTHER_ARCH}, this node is {ARCH}"):
        cache.acquire(str(build_squashfs(tmp_path / "other.sqfs", rootfs)), "job1")
    assert nothing_cached(cache)


@needs_squashfs
def test_a_squashfs_without_programs_is_refused_as_of_unknown_architecture(tmp_path):
    image = build_squashfs(tmp_path / "data.sqfs", build_rootfs(tmp_path / "root", busybox=False))
    with pytest.raises(ImageError, match="cannot tell which architecture"):
        cache_of(tmp_path).acquire(str(image), "job1")


def test_a_squashfs_listing_with_a_dot_dot_name_or_a_broken_line_refuses_the_image():
    """mksquashfs cannot make such names (unsquashfs 4.5.1 refuses them as well); a crafted file could."""
    line = "-rw-r--r-- 0/0                       5 2026-11-28 08:13 squashfs-root"
    assert listed_devices(f"{line}/etc/ok\ncrw-r--r-- 0/0   1,  3 2026-11-28 08:13 squashfs-root/dev/null",
                    Path("x")) == ["dev/null"]
    with pytest.raises(ImageError, match="leaves the image"):
        listed_devices(f"{line}/etc/../../victim", Path("x"))
    with pytest.raises(ImageError, match="cannot read its listing line"):
        listed_devices(f"{line}/etc/a\nb", Path("x"))


@needs_busybox
@needs_squashfs
def test_a_sif_image_is_imported_from_its_primary_system_partition(tmp_path):
    squashfs = build_squashfs(tmp_path / "rootfs.sqfs", build_rootfs(tmp_path / "root"))
    found = cache_of(tmp_path).acquire(str(build_sif(tmp_path / "image.sif", squashfs)), "job1")
    assert (found.rootfs / "etc/image-release").read_text() == "corral-test-image\n"
    assert (found.rootfs / "bin/busybox").is_file() and found.architecture == ARCH


@needs_busybox
@needs_squashfs
@pytest.mark.parametrize(("options", "refusal"), [
    ({"arch_code": b"04" if ARCH != "arm64" else b"02"}, f"is built for {OTHER_ARCH}, this node is {ARCH}"),
    ({"primary": False}, "without a primary system partition"),
    ({"fs_type": 5}, "not a squashfs .*encrypted"),
])
def test_a_sif_for_another_architecture_or_without_a_usable_system_partition_is_refused(tmp_path, options,
                                                                                        refusal):
    squashfs = build_squashfs(tmp_path / "rootfs.sqfs", build_rootfs(tmp_path / "root"))
    cache = cache_of(tmp_path)
    with pytest.raises(ImageError, match=refusal):
        cache.acquire(str(build_sif(tmp_path / "image.sif", squashfs, **options)), "job1")
    assert nothing_cached(cache)


@needs_busybox
@needs_squashfs
def test_a_truncated_sif_is_refused_as_corrupt(tmp_path):
    squashfs = build_squashfs(tmp_path / "rootfs.sqfs", build_rootfs(tmp_path / "root"))
    image = build_sif(tmp_path / "image.sif", squashfs)
    with open(image, "r+b") as file:
        file.truncate(image.stat().st_size - 1000)
    with pytest.raises(ImageError, match="not inside the file: the image is corrupt or truncated"):
        cache_of(tmp_path).acquire(str(image), "job1")
    with open(image, "r+b") as file:
        file.truncate(100)  # the magic, not the whole header
    with pytest.raises(ImageError, match="a SIF header but only 100 bytes"):
        cache_of(tmp_path).acquire(str(image), "job1")


@needs_busybox
@needs_squashfs
def test_every_source_shares_the_cache_limit_and_leases(tmp_path):
    squashfs = build_squashfs(tmp_path / "rootfs.sqfs", build_rootfs(tmp_path / "root"))
    sources = [build_image(tmp_path / "image.tar", ARCH), build_oci_archive(tmp_path / "image.oci", (ARCH,)),
               squashfs, build_sif(tmp_path / "image.sif", squashfs)]
    cache = cache_of(tmp_path)
    found = [cache.acquire(str(source), f"job{n}") for n, source in enumerate(sources)]
    assert len({image.key for image in found}) == 4
    cache.limit_bytes = found[0].size_bytes  # room for one: the leased ones stay all the same
    assert cache.evict() == []
    cache.release(found[0].key, "job0")  # a release evicts what is over the limit and no longer leased
    cache.release(found[2].key, "job2")
    assert {image.key for image in cache.images()} == {found[1].key, found[3].key}


# registry pulls

def test_registry_references_are_read_as_pyxis_and_docker_write_them(tmp_path):
    assert docker_reference("nvcr.io#nvidia/pytorch:24.05-py3") == "docker://nvcr.io/nvidia/pytorch:24.05-py3"
    assert docker_reference("127.0.0.1:5000#busybox:1") == "docker://127.0.0.1:5000/busybox:1"
    assert docker_reference("ubuntu:22.04") == "docker://ubuntu:22.04"
    assert repository("docker://127.0.0.1:5000/team/busybox:1") == "docker://127.0.0.1:5000/team/busybox"
    assert repository("docker://ubuntu@sha256:" + "0" * 64) == "docker://ubuntu"
    assert is_registry_reference("ubuntu") and not is_registry_reference(str(tmp_path / "missing.sif"))
    assert not is_registry_reference("missing.sqfs")  # a file the user meant, not Docker Hub's missing.sqfs
    with pytest.raises(ImageError, match="REGISTRY#REPOSITORY:TAG"):
        docker_reference("#busybox")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def registry(tmp_path):
    """Debian's docker-registry on a free loopback port, the busybox image pushed as busybox:1."""
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n"
                      f"  filesystem:\n    rootdirectory: {tmp_path / 'registry'}\nhttp:\n  addr: 127.0.0.1:{port}\n")
    log = open(tmp_path / "registry.log", "w")
    server = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                connection.request("GET", "/v2/")
                if connection.getresponse().status == 200:
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.1)
        image = build_image(tmp_path / "image.tar", ARCH)
        subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"docker-archive:{image}",
                        f"docker://127.0.0.1:{port}/busybox:1"], check=True)
        yield f"127.0.0.1:{port}", tmp_path / "registry.log"
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


class CountingCache(ImageCache):
    imports = 0

    def _import(self, source, key):
        CountingCache.imports += 1
        super()._import(source, key)


@needs_busybox
@needs_registry
def test_two_jobs_pulling_one_image_at_once_pull_it_once_in_either_form(tmp_path, registry):
    host, log = registry
    CountingCache.imports = 0
    results, errors = [], []

    def ask(image: str, lease: str) -> None:
        try:
            results.append(CountingCache(tmp_path / "cache", 1 << 30, insecure_registries=frozenset({host}))
                           .acquire(image, lease))
        except ImageError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(image, f"job{n}")) for n, image in
               enumerate([f"docker://{host}/busybox:1", f"{host}#busybox:1"] * 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and CountingCache.imports == 1 and len({found.key for found in results}) == 1
    assert (results[0].rootfs / "etc/image-release").read_text() == "corral-test-image\n"
    assert not (results[0].rootfs / "gone/file").exists() and results[0].architecture == ARCH
    blob_gets = [line for line in log.read_text().splitlines() if '"GET /v2/busybox/blobs/sha256:' in line]
    assert len(blob_gets) == 3, blob_gets  # config and two layers, once
    assert not any((tmp_path / "cache" / results[0].key).glob("pulled"))  # the layers are not kept


@needs_busybox
@needs_registry
def test_an_unknown_image_a_plain_http_registry_or_another_architecture_is_refused_clearly(tmp_path, registry):
    host, _ = registry
    cache = cache_of(tmp_path, insecure_registries=frozenset({host}))
    with pytest.raises(ImageError, match=f"image {host}#nope:1 not found in registry {host}: check its name"):
        cache.acquire(f"{host}#nope:1", "job1")
    with pytest.raises(ImageError, match=f"registry {host} speaks plain HTTP: name it among the node's insecure"):
        cache_of(tmp_path).acquire(f"docker://{host}/busybox:1", "job1")
    other = build_image(tmp_path / "other.tar", OTHER_ARCH)
    subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"docker-archive:{other}",
                    f"docker://{host}/busybox:other"], check=True)
    with pytest.raises(ImageError, match=f"is built for {OTHER_ARCH}, this node is {ARCH}"):
        cache.acquire(f"{host}#busybox:other", "job1")
    assert nothing_cached(cache)


@needs_registry
def test_an_unreachable_registry_is_refused_with_what_to_do(tmp_path):
    port = free_port()  # nothing listens on it
    with pytest.raises(ImageError, match=f"registry 127.0.0.1:{port} is unreachable from this node; check "
                                         "the name, or save the image to a file"):
        cache_of(tmp_path, insecure_registries=frozenset({f"127.0.0.1:{port}"})).acquire(
            f"127.0.0.1:{port}#busybox:1", "job1")


@needs_registry
def test_a_malformed_reference_says_how_to_write_one(tmp_path):
    with pytest.raises(ImageError, match="is not an image reference: write docker://REGISTRY/REPOSITORY:TAG"):
        cache_of(tmp_path).acquire("docker://Not A Name", "job1")


def test_a_node_without_skopeo_says_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a node where skopeo is not installed
    with pytest.raises(ImageError, match="cannot pull images: install skopeo"):
        cache_of(tmp_path).acquire("registry.invalid#busybox:1", "job1")


@needs_busybox
def test_a_tarball_entry_that_is_a_device_is_not_made_from_an_oci_archive_either(tmp_path):
    disk = entry("etc/disk", b"3", mode=0o666)
    disk[0].devmajor, disk[0].devminor = 1, 3
    found = cache_of(tmp_path).acquire(str(build_oci_archive(tmp_path / "i.tar", (ARCH,), [[disk]])), "job1")
    assert not (found.rootfs / "etc/disk").exists()


@needs_busybox
@needs_squashfs
@needs_runc
@pytest.mark.parametrize("kind", ["sif", "oci-archive"])
def test_a_task_runs_as_the_user_in_an_image_from_a_sif_or_an_oci_archive(tmp_path, user, kind):
    if kind == "sif":
        image = build_sif(tmp_path / "image.sif",
                          build_squashfs(tmp_path / "rootfs.sqfs", build_rootfs(tmp_path / "root")))
    else:
        image = build_oci_archive(tmp_path / "image.oci.tar", (ARCH,))
    rootfs = cache_of(tmp_path).acquire(str(image), "job42").rootfs
    done = run_in_container(tmp_path, rootfs, user, ["/bin/sh", "-c", "id -u; cat /etc/image-release"],
                            ContainerSpec(image=str(image)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n") == [str(user.pw_uid), "corral-test-image", ""]


@needs_busybox
@needs_registry
@needs_runc
def test_a_task_runs_as_the_user_in_a_pulled_image(tmp_path, registry, user):
    host, _ = registry
    rootfs = cache_of(tmp_path, insecure_registries=frozenset({host})).acquire(f"{host}#busybox:1", "job42").rootfs
    done = run_in_container(tmp_path, rootfs, user, ["/bin/sh", "-c", "id -u; cat /etc/image-release"],
                            ContainerSpec(image=f"{host}#busybox:1"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n") == [str(user.pw_uid), "corral-test-image", ""]


class RewritingCache(ImageCache):
    """Writes to the image file while it is being imported, as a user racing the node would."""

    def _unpack(self, source, key, partial):
        architecture = super()._unpack(source, key, partial)
        with open(source.path, "ab") as file:
            file.write(b"\0" * 512)
        return architecture


@needs_busybox
def test_an_image_file_written_to_while_it_is_imported_is_refused_and_not_cached_under_its_old_key(tmp_path):
    image = build_image(tmp_path / "image.tar", ARCH)
    cache = RewritingCache(tmp_path / "cache", limit_bytes=1 << 30)
    with pytest.raises(ImageError, match="was written to while the node imported it: refused"):
        cache.acquire(str(image), "job1")
    assert nothing_cached(cache)


@needs_busybox
def test_an_unchanged_image_file_is_hashed_once_and_a_changed_one_again(tmp_path, monkeypatch):
    import corral.agent.container_images as container_images

    hashed = []
    real_sha256 = container_images._sha256
    monkeypatch.setattr(container_images, "_sha256", lambda path: hashed.append(path) or real_sha256(path))
    image = build_image(tmp_path / "image.tar", ARCH)
    cache = cache_of(tmp_path)
    first = cache.acquire(str(image), "job1")
    assert cache.acquire(str(image), "job2").key == first.key and len(hashed) == 1
    with open(image, "ab") as file:
        file.write(b"\0" * 1024)  # same layers, another file: another key
    assert cache.acquire(str(image), "job3").key != first.key and len(hashed) == 2


def test_a_gzip_layer_of_several_members_with_padding_inflates_whole_and_a_truncated_one_is_refused():
    whole = gzip.compress(b"a" * 100) + gzip.compress(b"b" * 50) + b"\0" * 10
    plain = io.BytesIO()
    digest = gunzip_layer(io.BytesIO(whole), plain, Layer("layer"), "image")
    assert plain.getvalue() == b"a" * 100 + b"b" * 50 and digest == hashlib.sha256(whole).hexdigest()
    with pytest.raises(ImageError, match="ends before its gzip stream does"):
        gunzip_layer(io.BytesIO(whole[:30]), io.BytesIO(), Layer("layer"), "image")
