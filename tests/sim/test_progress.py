import io

from corral.sim.progress import LogProgress, NullProgress, Progress, TerminalProgress, stream_progress


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


def test_progress_on_a_terminal_rewrites_a_line(tmp_path):
    import os

    leader, follower = os.openpty()
    with open(follower, "w", closefd=True) as terminal:
        bar = stream_progress("replay", terminal)
        assert isinstance(bar, TerminalProgress)
        bar.update(100, 100)
    output = os.read(leader, 4096)
    os.close(leader)
    assert output.startswith(b"\rreplay: 100/100 (100.0%)")


def test_progress_off_a_terminal_is_plain_lines():
    assert isinstance(stream_progress("replay", io.StringIO()), LogProgress)


def test_progress_in_a_log_is_a_line_every_ten_percent():
    clock, out = FakeClock(), io.StringIO()
    bar = LogProgress("replay", out, clock=clock)
    for done in range(0, 1001):
        clock.now_s = done / 100
        bar.update(done, 1000)
    bar.update(1000, 1000)  # the replay goes on reporting the end: one final line only
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert [line.split()[1] for line in lines] == [f"{n}/1000" for n in range(100, 1001, 100)]
    assert lines[0] == "replay: 100/1000 ( 10.0%) 100/s ETA 0:09"
    assert lines[-1] == "replay: 1000/1000 (100.0%) 100/s in 0:10"


def test_progress_in_a_log_speaks_up_after_a_silence():
    clock, out = FakeClock(), io.StringIO()
    bar = LogProgress("replay", out, max_silence_s=30.0, clock=clock)
    clock.now_s = 29.0
    bar.update(1, 1000)
    assert out.getvalue() == ""
    clock.now_s = 31.0
    bar.update(2, 1000)
    clock.now_s = 40.0
    bar.update(3, 1000)
    assert out.getvalue().splitlines() == ["replay: 2/1000 (  0.2%) 0/s ETA 4:17:49"]


def test_terminal_progress_ends_its_line_once():
    clock, out = FakeClock(), io.StringIO()
    bar = TerminalProgress("replay", stream=out, clock=clock)
    clock.now_s = 1.0
    for _ in range(3):
        bar.update(5, 5)
    assert out.getvalue().count("replay") == 1
