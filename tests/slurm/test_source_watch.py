"""The command helper's waiting child. Whether its loaded corral changed on disk (corral.slurm.source_watch):
one inotify instance set up when the helper starts, asked with one poll per call; a real helper replaced when
a module is rewritten, even one put back with its old modification time; the per-call comparison where no
inotify is had. And its warm-up before a call: nothing sent, nothing changed."""
from __future__ import annotations

import os
import sys
import time

from corral.slurm import front
from corral.slurm.source_watch import SourceWatch, source_times

from .test_command_helper import helper_importing


def _probe_package(tmp_path):
    package = tmp_path / "pkg" / "corral_frontlat_probe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text("VALUE = 1\n")
    return package


def test_a_watch_sees_a_module_rewritten_and_stats_nothing_per_question(tmp_path, monkeypatch):
    package = _probe_package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    import corral_frontlat_probe.mod  # noqa: F401 - loaded, so watched

    try:
        watch = SourceWatch.start()
        assert watch.inotify_fd is not None  # this machine has inotify: no per-call comparison
        assert str(package / "mod.py") in watch.times
        calls = []
        monkeypatch.setattr(os, "stat", lambda *a, **k: calls.append(a))  # asking must not stat
        assert watch.changed() is False
        monkeypatch.undo()
        (package / "mod.py").write_text("VALUE = 2\n")
        assert watch.changed() is True and calls == []
        assert watch.changed() is True  # and stays so: nothing reads the events
        watch.close()
    finally:
        sys.modules.pop("corral_frontlat_probe.mod", None)
        sys.modules.pop("corral_frontlat_probe", None)


def test_without_inotify_every_question_compares_the_modification_times(tmp_path, monkeypatch):
    package = _probe_package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    import corral_frontlat_probe  # noqa: F401

    try:
        watch = SourceWatch(source_times(), None)
        assert watch.changed() is False
        os.utime(package / "__init__.py", ns=(time.time_ns(), time.time_ns() + 10**9))
        assert watch.changed() is True
    finally:
        sys.modules.pop("corral_frontlat_probe", None)


def test_a_module_replaced_by_one_with_its_old_modification_time_makes_the_helper_stale(tmp_path):
    """An upgrade that keeps files' times (cp -p, rsync -t, an archive unpacked) replaces the file: the
    helper answers STALE and ends, where comparing modification times saw nothing."""
    package = _probe_package(tmp_path)
    with helper_importing(tmp_path, "corral_frontlat_probe") as (helper, path, _):
        old = os.stat(package / "__init__.py")
        replacement = package / "__init__.py.new"
        replacement.write_text("# another version\n")
        os.utime(replacement, ns=(old.st_atime_ns, old.st_mtime_ns))
        os.replace(replacement, package / "__init__.py")
        assert os.stat(package / "__init__.py").st_mtime_ns == old.st_mtime_ns
        assert front.call_helper(path, "squeue", ["--version"], {}) is None  # the caller runs it itself
        assert helper.wait(10) == 0
        assert not os.path.exists(path)


def test_the_waiting_childs_warm_up_sends_nothing_and_leaves_the_environment(monkeypatch):
    """The waiting child runs the take-over's writes and sbatch's own work before a call (helper._warm_up):
    no request to the controller, no connection, the environment as it was."""
    import corral.slurm.sbatch.main  # noqa: F401 - preloaded in the helper
    from corral.slurm import helper

    from .test_preconnect import CountingServer

    server = CountingServer()
    monkeypatch.setenv("CORRAL_URL", f"http://127.0.0.1:{server.port}")
    before = dict(os.environ)
    helper._warm_up()
    time.sleep(0.2)
    assert server.connections == 0 and server.requests == []
    assert dict(os.environ) == before
