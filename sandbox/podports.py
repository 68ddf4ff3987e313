"""Gives each sandbox Ray head its own block of Ray client server ports, as its own pod would.

A Ray head's client proxy (ray 2.52.1, ray/util/client/server/proxier.py) starts one
"specific server" process per Ray client, on the first port of 23000-23999 that a bind test
finds free, listening on 127.0.0.1, and dials it there. In a pod, 127.0.0.1 and those ports are
the head's alone. Here every head shares the machine's 127.0.0.1, and gRPC listens with
SO_REUSEPORT: two heads whose clients connect within the seconds a specific server takes to
start both pick 23000, both servers bind it, and the kernel hands each proxy's connections to
either server, so a client could be served by another cluster's server or fail to start
("Initialization failure from server"). With this module, a head whose environment has
PORTS_ENV ("<low>-<high>", a block the sandbox holds machine-wide for the head's lifetime)
draws its specific servers' ports from that block only; everything else about the proxy is
Ray's own.

Copied into the sandbox's Ray image (rayimage.py) and imported from a .pth there, so it runs in
every Ray process; it only acts in the proxy, when Ray imports proxier.py.
Self-contained (the image has neither kfp_ray nor kfp_ray_sandbox on its path).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

TARGET = "ray.util.client.server.proxier"
PORTS_ENV = "KFP_RAY_SANDBOX_CLIENT_SERVER_PORTS"


def install() -> None:
    """Narrow the proxy's port range when (if ever) this process imports it."""
    block = os.environ.get(PORTS_ENV)
    if block and not any(isinstance(f, _PostImport) for f in sys.meta_path):
        low, high = (int(x) for x in block.split("-"))
        sys.meta_path.insert(0, _PostImport(low, high))


class _PostImport(importlib.abc.MetaPathFinder):
    def __init__(self, low: int, high: int):
        self.low, self.high = low, high

    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)  # once: find the real module, then set its range once it has run
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return None
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            # read by ProxyManager.__init__, after the import
            module.MIN_SPECIFIC_SERVER_PORT, module.MAX_SPECIFIC_SERVER_PORT = self.low, self.high + 1

        spec.loader.exec_module = exec_module
        return spec
