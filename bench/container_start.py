"""The runtime choice of decision 0020, measured in one run under the same conditions: start latency of a
task in a container (rootless runc, as corral runs it; rootless Podman, with its vfs and fuse-overlayfs
stores) against a plain task, and the import time and disk use of the same busybox image from every source
(docker-archive, OCI archive, squashfs, SIF, a pull from a loopback registry; `podman load`).

Needs root (it makes a user with useradd and removes it), runc, uidmap and busybox-static; podman,
fuse-overlayfs, squashfs-tools, skopeo and docker-registry for their parts (a part whose tools are missing
says so and is left out). `--payload DIR` adds DIR's files to the image as /payload (a layer of its own in
the tarballs), for an image of a realistic size. Run: .venv/bin/python bench/container_start.py [--starts 50]
[--payload /usr/lib/chromium]"""
from __future__ import annotations

import argparse
import os
import pwd
import shutil
import stat
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

from corral.agent.container_images import ImageCache, node_architecture
from corral.agent.container_runtime import BundleRequest, ContainerSpec, TaskUser, prepare_task, subordinate_id

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.agent.container_image import (  # noqa: E402
    build_image,
    build_oci_archive,
    build_rootfs,
    build_sif,
    build_squashfs,
    entry,
)
from tests.agent.test_container_images import free_port  # noqa: E402

SUBORDINATE = "320000-385535"  # 65536 ids: podman's user namespace maps a range; runc uses the first


def payload_layer(directory: Path) -> list:
    """DIR's directories, files and symlinks as the members of one layer, under payload/."""
    members = [entry("payload", tarfile.DIRTYPE)]
    for root, dirs, files in os.walk(directory):
        relative = Path("payload") / Path(root).relative_to(directory)
        for name in sorted(dirs):
            path = Path(root) / name
            members.append(entry(str(relative / name), tarfile.SYMTYPE, link=os.readlink(path))
                           if path.is_symlink() else entry(str(relative / name), tarfile.DIRTYPE))
        for name in sorted(files):
            path = Path(root) / name
            if path.is_symlink():
                members.append(entry(str(relative / name), tarfile.SYMTYPE, link=os.readlink(path)))
            elif path.is_file():
                members.append(entry(str(relative / name), data=path.read_bytes(),
                                     mode=stat.S_IMODE(path.stat().st_mode)))
    return members


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def as_user(user: pwd.struct_passwd, argv: list[str], env: dict[str, str] | None = None) -> float:
    """Run argv as the user; its wall time in ms."""
    started = time.perf_counter()
    done = subprocess.run(argv, user=user.pw_uid, group=user.pw_gid, extra_groups=[], cwd="/", env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}… failed: {done.stderr.strip()[-400:]}")
    return (time.perf_counter() - started) * 1000


def du_bytes(path: Path) -> int:
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
               .stdout.split()[0])


def report_starts(label: str, values: list[float]) -> None:
    print(f"{label:<42} p50 {statistics.median(values):7.1f} ms  p99 {percentile(values, 0.99):7.1f} ms  "
          f"({len(values)} starts of true)")


def podman_command(user: pwd.struct_passwd, driver: str, run_dir: Path) -> tuple[list[str], dict[str, str]]:
    home = Path(user.pw_dir)
    store = ["--root", str(home / f"storage-{driver}"), "--runroot", str(run_dir / driver),
             "--storage-driver", "overlay" if driver == "fuse-overlayfs" else "vfs"]
    if driver == "fuse-overlayfs":
        store += ["--storage-opt", "overlay.mount_program=/usr/bin/fuse-overlayfs"]
    env = {"HOME": str(home), "XDG_RUNTIME_DIR": str(run_dir), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
           "USER": user.pw_name}
    # crun, podman's default runtime, refuses this hybrid cgroup host (see decision 0020): runc
    return ["podman", *store, "--runtime", "runc", "--cgroup-manager", "cgroupfs"], env


def podman_figures(user: pwd.struct_passwd, image: Path, starts: int, driver: str, run_dir: Path) -> None:
    podman, env = podman_command(user, driver, run_dir)
    load_ms = as_user(user, [*podman, "load", "-q", "-i", str(image)], env)
    disk = du_bytes(Path(user.pw_dir) / f"storage-{driver}")
    run = [*podman, "run", "--rm", "--network=host", "--userns=keep-id", "localhost/corral/test:latest",
           "/bin/true"]
    as_user(user, run, env)  # first run: podman sets up its user namespace and store once
    report_starts(f"podman run ({driver} store, runc)", [as_user(user, run, env) for _ in range(starts)])
    print(f"  podman load: {load_ms:.0f} ms, {disk / 1e6:.2f} MB in its store")


def import_figures(directory: Path, images: dict[str, Callable[[], str]]) -> None:
    for label, make in images.items():
        try:
            reference = make()
        except (OSError, subprocess.CalledProcessError, AssertionError) as exc:
            print(f"import {label:<30} not measured: {exc}")
            continue
        registry_host = reference.split("#", 1)[0] if "#" in reference else ""
        cache = ImageCache(directory / f"cache-{label}", limit_bytes=1 << 30,
                           insecure_registries=frozenset({registry_host}) if registry_host else frozenset())
        started = time.perf_counter()
        cached = cache.acquire(reference, "bench")
        first_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        cache.acquire(reference, "bench2")
        again_ms = (time.perf_counter() - started) * 1000
        source = Path(reference)
        size = f"{source.stat().st_size / 1e6:.2f} MB file" if source.is_file() else "pulled"
        print(f"import {label:<30} {first_ms:7.0f} ms  {cached.size_bytes / 1e6:.2f} MB in the cache "
              f"({du_bytes(cache.directory) / 1e6:.2f} MB on disk), {size}; cached again {again_ms:.1f} ms")


def start_registry(directory: Path, image: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    config = directory / "registry.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: "
                      f"{directory / 'registry'}\nhttp:\n  addr: 127.0.0.1:{port}\n")
    server = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    for _ in range(100):
        pushed = subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"docker-archive:{image}",
                                 f"docker://127.0.0.1:{port}/busybox:1"], capture_output=True, check=False)
        if pushed.returncode == 0:
            break
        time.sleep(0.2)
    return server, f"127.0.0.1:{port}#busybox:1"


def stop_podman_pause_process(run_dir: Path | None) -> None:
    """Rootless podman leaves a pause process holding its user namespace; the user cannot go while it runs."""
    pid_file = run_dir / "libpod" / "tmp" / "pause.pid" if run_dir else None
    if pid_file is not None and pid_file.is_file():
        try:
            os.kill(int(pid_file.read_text().strip()), 15)
            time.sleep(0.5)
        except (ValueError, ProcessLookupError):
            pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=50)
    parser.add_argument("--payload", type=Path, help="a directory whose files are added to the image")
    arguments = parser.parse_args()
    starts, payload = arguments.starts, arguments.payload
    extra = [payload_layer(payload)] if payload else []
    name = f"ctrimgbench{uuid.uuid4().hex[:5]}"
    directory = Path(tempfile.mkdtemp(prefix="bench-ctrimg-containers-"))
    os.chmod(directory, 0o755)
    subprocess.run(["useradd", "-m", "-d", str(directory / "home"), "-s", "/bin/sh", name], check=True)
    if subordinate_id(name, "/etc/subuid") is None or subordinate_id(name, "/etc/subgid") is None:
        # useradd gives a range itself where login.defs says so; a second one could overlap another's
        subprocess.run(["usermod", "--add-subuids", SUBORDINATE, "--add-subgids", SUBORDINATE, name], check=True)
    server, run_dir = None, None
    try:
        user = pwd.getpwnam(name)
        run_dir = Path(tempfile.mkdtemp(prefix="ctrimg-run-"))  # podman wants its runroot under 50 characters
        os.chown(run_dir, user.pw_uid, user.pw_gid)
        print(f"load average before: {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores, {node_architecture()}, "
              f"payload: {payload or 'none'}")
        image = build_image(directory / "image.tar", node_architecture(), extra)
        cached = ImageCache(directory / "cache", limit_bytes=1 << 30).acquire(str(image), "bench")
        request = BundleRequest(spec=ContainerSpec(image=str(image)), user=TaskUser(user.pw_uid, user.pw_gid),
                                rootfs=cached.rootfs, argv=["/bin/true"], env={}, cwd="/",
                                subordinate_uid=subordinate_id(name, "/etc/subuid"),
                                subordinate_gid=subordinate_id(name, "/etc/subgid"))
        plain, contained = [], []
        for index in range(starts):
            plain.append(as_user(user, ["/bin/true"]))
            started = time.perf_counter()  # the bundle is written per task, as podman creates a container
            argv = prepare_task(request, directory / f"b{index}", f"bench-ctrimg-{uuid.uuid4().hex[:6]}")
            contained.append((time.perf_counter() - started) * 1000 + as_user(user, argv))
        report_starts("plain task", plain)
        report_starts("corral: bundle + unshare + runc run", contained)
        for driver in ("vfs", "fuse-overlayfs"):
            if shutil.which("podman") and (driver == "vfs" or shutil.which("fuse-overlayfs")):
                podman_figures(user, image, starts, driver, run_dir)
            else:
                print(f"podman ({driver}): not installed, not measured")
        rootfs = build_rootfs(directory / "rootfs")
        if payload:
            shutil.copytree(payload, rootfs / "payload", symlinks=True)
        squashfs = lambda: str(build_squashfs(directory / "image.sqfs", rootfs))  # noqa: E731
        images: dict[str, Callable[[], str]] = {
            "docker-archive": lambda: str(image),
            "OCI archive (gzip layers)": lambda: str(build_oci_archive(directory / "image.oci",
                                                                       (node_architecture(),), extra)),
            "squashfs (mksquashfs default gzip)": squashfs,
            "SIF": lambda: str(build_sif(directory / "image.sif", Path(squashfs()))),
        }
        if shutil.which("docker-registry") and shutil.which("skopeo"):
            server, reference = start_registry(directory, image)
            images["registry pull (loopback, skopeo)"] = lambda: reference
        import_figures(directory, images)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        stop_podman_pause_process(run_dir)
        subprocess.run(["userdel", "-r", name], check=False, capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)
        if run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
