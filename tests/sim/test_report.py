import base64
import re

import pytest

from corral.sim.limits import TimeLimitModel
from corral.sim.metrics import compute_metrics
from corral.sim.report import PolicyRun, render_html, write_report

from .builders import job, ran

JOBS = [job(1, submit_s=0, duration_s=10, gpus=2, queue="a"), job(2, submit_s=0, duration_s=10, gpus=3, queue="b"),
        job(3, submit_s=5, duration_s=20, gpus=1, queue="a")]


def _run(policy, delay_s):
    results = [ran(j, j.submit_s + delay_s * i) for i, j in enumerate(JOBS)]
    return PolicyRun(policy, results, compute_metrics(results, 4, entitlements={"a": 2, "b": 2}))


@pytest.fixture(scope="module")
def page():
    return render_html([_run("fifo", 10), _run("backfill <easy>", 2)], title="Tiny & test",
                       setup="4 GPUs, 2 tenants\nsecond line", time_limit_model=TimeLimitModel().describe(),
                       notes=["a note"])


def test_images_are_embedded_pngs(page):
    images = re.findall(r'<img alt="[^"]+" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', page)
    assert len(images) == 4  # JCT CDF, wait CDF, utilization + queue, tenant shares
    for data in images:
        assert base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")


def test_tables_and_text(page):
    assert page.startswith("<!DOCTYPE html>")
    assert "<title>Tiny &amp; test</title>" in page
    assert page.count('<table class="metrics">') == 4  # summary, by size, by queue, tenants
    assert "<td>backfill &lt;easy&gt;</td>" in page  # names are escaped
    assert "<td>2-4</td>" in page and "<td>a</td>" in page
    assert "Time limits are not in the trace" in page
    assert "<li>a note</li>" in page
    assert "http" not in page.split("<body>")[1]  # self-contained: nothing fetched


def test_write_report(tmp_path):
    path = tmp_path / "report.html"
    write_report(path, [_run("only", 0)], title="t", setup="s")
    text = path.read_text(encoding="utf-8")
    assert text.count("data:image/png;base64,") == 4
    assert "<h3>Time limits</h3>" not in text


def test_duplicate_policies_are_rejected():
    with pytest.raises(ValueError, match="unique"):
        render_html([_run("x", 0), _run("x", 1)], title="t", setup="s")
