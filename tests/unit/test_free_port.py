"""free_port: a port handed to one sandbox is not handed to another process's sandbox while
its node may still be binding it (two Ray dashboard agents on one port: the second dies)."""

from __future__ import annotations

import subprocess
import sys
import time

from kfp_ray_sandbox import raynode


def test_a_port_held_by_another_process_is_not_handed_out_and_is_free_once_it_exits():
    child = subprocess.Popen([sys.executable, "-c", "import sys; from kfp_ray_sandbox.raynode import free_port; "
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
    fresh = raynode.free_port()  # may be one of the released ports: they are free again
    assert not (set(ports) - {fresh}) & set(raynode._held)


def test_ports_are_outside_the_range_client_sockets_get_theirs_from():
    low, high = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    ports = [raynode.free_port() for _ in range(20)]
    assert not [p for p in ports if low <= p <= high], (low, high, ports)


def test_each_node_gets_its_own_block_of_worker_ports_until_it_stops(tmp_path):
    """Two nodes with overlapping worker ports collide on a gRPC bind (a head's job agent died
    of it): every node's --min/--max-worker-port block is its own, across processes too."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; from kfp_ray_sandbox.raynode import hold_worker_ports; "
                              "held = hold_worker_ports(); print(held[0], flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    nodes = []
    try:
        theirs = int(child.stdout.readline())
        nodes = [raynode.RayNode(f"n{i}", "127.0.0.1", head=False, num_cpus=1, num_gpus=0, memory=10**8,
                                 root=tmp_path, gcs_address="127.0.0.1:1") for i in range(20)]
        blocks = [(n.ports["min-worker-port"], n.ports["max-worker-port"]) for n in nodes]
        assert len({low for low, _ in blocks}) == 20 and theirs not in {low for low, _ in blocks}
        assert all(raynode.WORKER_PORTS.start <= low < high < raynode.WORKER_PORTS.stop for low, high in blocks)
        assert f"--min-worker-port={blocks[0][0]}" in nodes[0].command()
        assert hold_free(blocks[0][0]) is None and hold_free(theirs) is None
        nodes[0].stop()
        assert hold_free(blocks[0][0]) == blocks[0][0]  # a stopped node's block is free again
    finally:
        child.stdin.close()
        child.wait(timeout=30)
        for n in nodes:  # stop() again is harmless
            n.stop()


def hold_free(low: int) -> int | None:
    """low if its block can be held now (then let go again), else None."""
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(f"\0kfp-ray-sandbox-workers-{low}")
        return low
    except OSError:
        return None
    finally:
        s.close()


def test_two_networks_never_share_an_address_block(monkeypatch):
    """A sandbox's 127.x.y.0/24 is held machine-wide: a second Network that draws the same
    block draws again."""
    from kfp_ray_sandbox import network

    draws = iter([(77, 7), (77, 7), (78, 8)])
    pending = []

    def randint(low, high):
        if not pending:
            pending.extend(next(draws))
        return pending.pop(0)

    monkeypatch.setattr(network.random, "randint", randint)
    first, second = network.Network(), network.Network()
    assert first.prefix == "127.77.7." and second.prefix == "127.78.8."


def test_no_sandbox_listener_takes_a_ray_client_server_port():
    """Ray's client proxy draws its servers' ports from 23000-23999 with a bind test; a node
    port handed out there but not yet bound would be taken from under the node."""
    ports = [raynode.free_port() for _ in range(300)]
    assert not set(ports) & set(raynode.CLIENT_SERVER_PORTS)
