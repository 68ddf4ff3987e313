"""jobs.LogShipper's own bookkeeping (what goes to which key), with an S3 client that records
the puts: the real S3 path is tested end to end (follow_ray_job/tests/test_durable_log.py,
run_ray_job/tests/test_queue_and_log.py)."""

from __future__ import annotations

from kfp_ray import jobs, run_events, s3


class Recorder:
    def __init__(self):
        self.puts: dict[str, bytes] = {}

    def put_object(self, Bucket, Key, Body):  # noqa: N803 - boto3's names
        self.puts[Key] = Body if isinstance(Body, bytes) else Body.read()


def test_parts_then_the_whole_log_and_the_events_beside_it(tmp_path, monkeypatch, capsys):
    rec = Recorder()
    monkeypatch.setattr(s3, "client", lambda **kw: rec)
    monkeypatch.setattr(run_events, "collect", lambda ns, names: [{"time": "t1", "name": names[0]}])
    log = tmp_path / "job.log"
    log.write_text("one\n")
    shipper = jobs.LogShipper(str(log), "s3://b/r/logs/job.log", events=("ns", ["c"]))
    shipper.ship()
    log.write_text("one\ntwo\n")
    shipper.ship(whole=True)
    parts = sorted(k for k in rec.puts if k.startswith("r/logs/job.log.d/"))
    assert [rec.puts[k] for k in parts] == [b"one\n", b"two\n"] and rec.puts["r/logs/job.log"] == b"one\ntwo\n"
    assert rec.puts["r/logs/events.jsonl"] == b'{"name": "c", "time": "t1"}\n'
    assert "could not copy" not in capsys.readouterr().out


def test_a_run_whose_job_never_started_still_gets_its_events(tmp_path, monkeypatch, capsys):
    """No log file yet (the cluster never became ready): no error, no log keys, the events copied."""
    rec = Recorder()
    monkeypatch.setattr(s3, "client", lambda **kw: rec)
    monkeypatch.setattr(run_events, "collect", lambda ns, names: [{"time": "t1"}])
    jobs.LogShipper(str(tmp_path / "job.log"), "s3://b/r/logs/job.log", events=("ns", ["c"])).ship(whole=True)
    assert list(rec.puts) == ["r/logs/events.jsonl"]
    assert "could not copy" not in capsys.readouterr().out
