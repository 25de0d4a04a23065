"""Start latency of a task in a container (rootless runc, as corral runs it) against a plain task, and the
import time and disk use of an image. Needs root (it makes a user with useradd and removes it), runc and
busybox-static. Run: .venv/bin/python bench/container_start.py [--starts 50]"""
from __future__ import annotations

import argparse
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from corral.agent.container_images import ImageCache, node_architecture
from corral.agent.container_runtime import BundleRequest, ContainerSpec, TaskUser, prepare_task, subordinate_id

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.agent.container_image import build_image  # noqa: E402


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def timed(argv: list[str], user: pwd.struct_passwd) -> float:
    started = time.perf_counter()
    subprocess.run(argv, user=user.pw_uid, group=user.pw_gid, extra_groups=[], cwd="/", check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=50)
    starts = parser.parse_args().starts
    name = f"bench{uuid.uuid4().hex[:5]}-containers"
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True)
    subprocess.run(["usermod", "--add-subuids", "320000-320000", "--add-subgids", "320000-320000", name],
                   check=True)
    directory = Path(tempfile.mkdtemp(prefix="bench-containers-"))
    try:
        os.chmod(directory, 0o755)
        user = pwd.getpwnam(name)
        image = build_image(directory / "image.tar", node_architecture())
        cache = ImageCache(directory / "cache", limit_bytes=1 << 30)
        started = time.perf_counter()
        cached = cache.acquire(str(image), "bench")
        import_ms = (time.perf_counter() - started) * 1000
        request = BundleRequest(spec=ContainerSpec(image=str(image)), user=TaskUser(user.pw_uid, user.pw_gid),
                                rootfs=cached.rootfs, argv=["/bin/true"], env={}, cwd="/",
                                subordinate_uid=subordinate_id(name, "/etc/subuid"),
                                subordinate_gid=subordinate_id(name, "/etc/subgid"))
        plain, contained = [], []
        for index in range(starts):
            plain.append(timed(["/bin/true"], user))
            contained.append(timed(prepare_task(request, directory / f"b{index}", f"bench-containers-{index}"),
                                   user))
        for label, values in (("plain task", plain), ("container task", contained)):
            print(f"{label}: p50 {statistics.median(values):.1f} ms, p99 {percentile(values, 0.99):.1f} ms "
                  f"({starts} starts of true)")
        print(f"image: {image.stat().st_size / 1e6:.2f} MB tarball, imported in {import_ms:.0f} ms, "
              f"{cached.size_bytes / 1e6:.2f} MB in the cache; a second acquire: ", end="")
        started = time.perf_counter()
        cache.acquire(str(image), "bench2")
        print(f"{(time.perf_counter() - started) * 1000:.1f} ms (hash of the tarball, no import)")
    finally:
        subprocess.run(["userdel", name], check=False)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
