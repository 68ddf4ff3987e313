"""run_ray_driver's output (its Tee: the task's log and its `log` artifact) is redacted with
follow's helper (redact.py): the Ray pods hold the data connection's keys, and what their
tasks print reaches the driver, from Ray's client thread, in pieces or whole. (The pipeline
wiring of the teardown's report, the other half, is in tests/pipelines/test_data_connection.py.)"""

from __future__ import annotations

import io
import threading

import pytest

from kfp_ray.driver import Tee

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
KEY_ID = "AKIAIOSFODNN7EXAMPLE"


@pytest.fixture(autouse=True)
def data_connection(monkeypatch):
    """The task pod's env, as with_data_connection mounts it."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)


@pytest.mark.parametrize("writes", [
    [f"(train_fn pid=42) key={SECRET}\n"],  # a Ray task's line, as the client forwards it
    [f"id {KEY_ID} ", f"secret {SECRET}", "\n"],  # print(a, b): one write per piece
    [f"secret {SECRET[:10]}", f"{SECRET[10:]}\n"],  # a key cut in two writes
    [f"\r 50%|#####     | {SECRET}", "\r100%|##########|\n"],  # a progress bar's carriage returns
], ids=["a Ray task's line", "print's pieces", "a key in two writes", "a progress bar"])
def test_what_the_driver_prints_reaches_the_log_and_the_artifact_redacted(writes):
    log = io.StringIO()
    tee = Tee(log)
    for w in writes:
        tee.write(w)
    tee.flush()
    for text in (log.getvalue(), tee.text()):
        assert SECRET not in text and KEY_ID not in text and SECRET[:10] not in text
        assert "[REDACTED]" in text
    assert log.getvalue() == tee.text()


def test_a_part_line_is_passed_on_at_a_flush_and_whole_lines_at_once():
    log = io.StringIO()
    tee = Tee(log)
    tee.write("epoch 1 done\nepoch 2 ")
    assert log.getvalue() == "epoch 1 done\n"  # the whole line at once, live
    tee.flush()  # print(..., flush=True), or the task's end
    assert log.getvalue() == "epoch 1 done\nepoch 2 "
    assert tee.text() == "epoch 1 done\nepoch 2 "


def test_writes_from_two_threads_lose_nothing_and_hide_the_key():
    log = io.StringIO()
    tee = Tee(log)

    def write(tag):
        for i in range(200):
            tee.write(f"{tag} {i} ")
            tee.write(f"{SECRET}\n")

    threads = [threading.Thread(target=write, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    text = log.getvalue()
    assert text.count("\n") == 400 and text.count("[REDACTED]") == 400 and SECRET not in text
    assert all(f"{tag} {i} " in text for tag in ("a", "b") for i in range(200))
