"""Pod and Service addresses on loopback.

Each sandbox takes a random 127.x.y.0/24 block and hands out one address per Ray pod,
so every Ray node has an address of its own (Ray maps 127.0.0.1 itself to the host's
external address, so that one is never used). There is no kube-proxy: a Service's
clusterIP is its pod's address.
"""

from __future__ import annotations

import random
import threading


class Network:
    def __init__(self):
        self._lock = threading.Lock()
        self.prefix = f"127.{random.randint(16, 250)}.{random.randint(0, 255)}."
        self._next = 2

    def allocate(self) -> str:
        with self._lock:
            if self._next > 254:  # a long-lived sandbox: wrap around (old pods are gone)
                self._next = 2
            ip = f"{self.prefix}{self._next}"
            self._next += 1
            return ip
