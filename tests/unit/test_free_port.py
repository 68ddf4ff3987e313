"""free_port: a port handed to one sandbox is not handed to another process's sandbox while
its node may still be binding it (two Ray dashboard agents on one port: the second dies)."""

from __future__ import annotations

import subprocess
import sys
import time

from sandbox import raynode


def test_a_port_held_by_another_process_is_not_handed_out_and_is_free_once_it_exits():
    child = subprocess.Popen([sys.executable, "-c", "import sys; from sandbox.raynode import free_port; "
                              "print(free_port(), flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        assert not raynode._reserve(port, time.monotonic())  # the child holds it
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert raynode._reserve(port, time.monotonic())  # gone with its holder, however it ended
    raynode._held.pop(port)[1].close()


def test_ports_handed_out_in_a_row_are_distinct_and_released_after_the_hold(monkeypatch):
    ports = [raynode.free_port() for _ in range(50)]
    assert len(set(ports)) == 50 and set(ports) <= set(raynode._held)
    clock = time.monotonic() + raynode.PORT_HOLD_S + 1
    monkeypatch.setattr(raynode.time, "monotonic", lambda: clock)
    raynode.free_port()
    assert not set(ports) & set(raynode._held)


def test_ports_are_outside_the_range_client_sockets_get_theirs_from():
    low, high = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    ports = [raynode.free_port() for _ in range(20)]
    assert not [p for p in ports if low <= p <= high], (low, high, ports)
