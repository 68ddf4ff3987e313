"""Pod and Service addresses on loopback.

Each sandbox takes a random 127.x.y.0/24 block, held machine-wide while it lives (two
sandboxes, or a sandbox and a test's Network, never share one: a Service of one would answer
on the other's addresses), and hands out one address per Ray pod, so
every Ray node has an address of its own (Ray maps 127.0.0.1 itself to the host's external
address, so that one is never used), and one per ClusterIP Service, which the sandbox's
kube-proxy (sandbox/proxy.py) serves. An address is reused only after it was released.
"""

from __future__ import annotations

import random
import threading

from .raynode import machine_hold


class AddressesExhausted(RuntimeError):
    """Every address of the sandbox's block is in use."""


class Network:
    FIRST, LAST = 2, 254

    def __init__(self):
        self._lock = threading.Lock()
        while True:
            self.prefix = f"127.{random.randint(16, 250)}.{random.randint(0, 255)}."
            self._hold = machine_hold(f"net-{self.prefix}")  # released with this object or its process
            if self._hold is not None:
                break
        self._next = self.FIRST
        self._used: set[str] = set()
        self._services: set[str] = set()  # the used addresses that are Services' clusterIPs

    def allocate(self) -> str:
        """A free address of the block (round robin, so a released one is not reused at once)."""
        with self._lock:
            for _ in range(self.LAST - self.FIRST + 1):
                ip = f"{self.prefix}{self._next}"
                self._next = self._next + 1 if self._next < self.LAST else self.FIRST
                if ip not in self._used:
                    self._used.add(ip)
                    return ip
            raise AddressesExhausted(f"all {self.LAST - self.FIRST + 1} addresses of {self.prefix}0/24 are in use")

    def release(self, ip: str) -> None:
        with self._lock:
            self._used.discard(ip)
            self._services.discard(ip)

    def release_services_except(self, live: set[str]) -> None:
        """Free the clusterIPs of Services that no longer exist (kube-apiserver's IP repair)."""
        with self._lock:
            for ip in self._services - live:
                self._services.discard(ip)
                self._used.discard(ip)

    def in_use(self, ip: str) -> bool:
        with self._lock:
            return ip in self._used

    def owns(self, ip: str) -> bool:
        return ip.startswith(self.prefix)

    def allocate_service_ip(self, rt, obj: dict) -> None:
        """Built-in admission for Services (the apiserver's ClusterIP allocator): a ClusterIP
        Service without an address gets one of the block; a headless one keeps "None"."""
        if rt.key != ("", "services"):
            return
        spec = obj.setdefault("spec", {})
        if spec.get("type", "ClusterIP") not in ("ClusterIP", "NodePort", "LoadBalancer"):
            return
        if spec.get("clusterIP") in (None, ""):
            ip = self.allocate()
            spec["clusterIP"], spec["clusterIPs"] = ip, [ip]
            with self._lock:
                self._services.add(ip)
        elif spec["clusterIP"] != "None" and self.owns(spec["clusterIP"]):
            with self._lock:
                self._used.add(spec["clusterIP"])
                self._services.add(spec["clusterIP"])
        spec.setdefault("type", "ClusterIP")
        # Service defaulting the proxy and KubeRay's status.endpoints rely on.
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
