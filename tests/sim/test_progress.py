import io

from corral.sim.progress import NullProgress, Progress, TerminalProgress


class FakeClock:
    def __init__(self):
        self.now_s = 0.0

    def __call__(self):
        return self.now_s


def test_terminal_progress_rewrites_one_line_and_throttles():
    clock, out = FakeClock(), io.StringIO()
    progress: Progress = TerminalProgress("replay", stream=out, min_interval_s=1.0, clock=clock)
    clock.now_s = 1.0
    progress.update(10, 100)
    clock.now_s = 1.5
    progress.update(20, 100)  # too soon: skipped
    clock.now_s = 2.0
    progress.update(40, 100)
    clock.now_s = 4.0
    progress.update(100, 100)  # the final update always prints and ends the line
    text = out.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
    assert "replay: 10/100 ( 10.0%) 10/s ETA 0:09" in text
    assert "20/100" not in text
    assert "replay: 100/100 (100.0%) 25/s in 0:04" in text


def test_null_progress_is_silent():
    progress: Progress = NullProgress()
    progress.update(1, 2)
