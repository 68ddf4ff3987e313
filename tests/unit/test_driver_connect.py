"""The Ray client connect: a failed start of the client's server on the head is retried, and
said by its reason (the proxy's traceback's last line), not by the header line."""

import pytest

from kfp_ray import driver, wait

# what ray.util.client.worker raises when the head's proxier could not start a client server (ray 2.52.1)
ABORTED = ConnectionAbortedError(
    "Initialization failure from server:\nTraceback (most recent call last):\n"
    '  File "proxier.py", line 750, in Datapath\n'
    "RuntimeError: Proxy failed to Connect to backend! Check `ray_client_server.err`\n")


def test_a_failed_server_start_is_retried_and_named(monkeypatch):
    calls, slept, lines = [], [], []

    def init(address, log_to_driver):
        calls.append(address)
        if len(calls) == 1:
            raise ABORTED

    monkeypatch.setattr(wait, "log", lines.append)
    driver.connect(init, "ray://h:10001", sleep=slept.append)
    assert calls == ["ray://h:10001"] * 2
    assert len(slept) == 1
    assert "Proxy failed to Connect to backend" in lines[0] and "Initialization failure" not in lines[0]


def test_the_last_failure_is_raised_with_its_reason():
    def init(address, log_to_driver):
        raise ABORTED

    with pytest.raises(ConnectionAbortedError, match="RuntimeError: Proxy failed to Connect to backend"):
        driver.connect(init, "ray://h:10001", sleep=lambda s: None)


def test_other_failures_pass_unchanged():
    def init(address, log_to_driver):
        raise RuntimeError("Version mismatch")

    with pytest.raises(RuntimeError, match="Version mismatch"):
        driver.client_init(init, "ray://h:10001")


def test_an_unreachable_head_is_not_tried_again():
    """The Ray client has already retried its channel 3 times (a wrong namespace, a head gone)."""
    calls = []

    def init(address, log_to_driver):
        calls.append(address)
        raise ConnectionError("ray client connection timeout")

    with pytest.raises(ConnectionError, match="connection timeout"):
        driver.connect(init, "ray://h:10001", sleep=lambda s: None)
    assert len(calls) == 1


def test_a_session_cleaned_up_while_it_started_is_retried(monkeypatch):
    """The client's stream broke while its server started, and the proxy had already dropped the
    session when the client reconnected (ray 2.52.1 dataclient.py's ConnectionError)."""
    calls, lines = [], []

    def init(address, log_to_driver):
        calls.append(address)
        if len(calls) == 1:
            raise ConnectionError(
                "Request can't be sent because the Ray client has already been disconnected due to an error. "
                "Last exception: <_MultiThreadedRendezvous of RPC that terminated with:\n"
                "\tstatus = StatusCode.NOT_FOUND\n"
                '\tdetails = "Attempted to reconnect a session that has already been cleaned up"\n>')

    monkeypatch.setattr(wait, "log", lines.append)
    driver.connect(init, "ray://h:10001", sleep=lambda s: None)
    assert len(calls) == 2
    assert "lost this client's server while it started" in lines[0]
