"""While its cluster waits for Kueue, provision says where it stands in its LocalQueue and when
it may be admitted (runtime/kfp_ray/queue_position.py): the quota holds one cluster at a time,
three wait ahead of ours in turn, and our position falls 2 -> 1 -> 0, never rising."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import pytest
from kubernetes import client as k8s

from kfp_ray import tasks
from tests.helpers import eventually, in_thread, raycluster

RAY = ("ray.io", "v1", "sandbox", "rayclusters")


@pytest.mark.ray
def test_the_position_falls_as_the_ones_ahead_are_admitted_and_the_estimate_is_reported(box, sbx, as_admin, capsys):
    co = k8s.CustomObjectsApi(sbx.api_client())
    # 8 CPUs each (head and worker of 4) of the ClusterQueue's 9: one at a time; their images never
    # pull, so they hold the quota without starting Ray
    sbx.set_faults({"clusters": {f"qp-{x}": {"image_pull": True} for x in "abc"}})

    def created_at(name: str) -> str:
        return co.get_namespaced_custom_object(*RAY, name)["metadata"]["creationTimestamp"]

    def admitted(name: str) -> bool:
        return co.get_namespaced_custom_object(*RAY, name)["spec"].get("suspend") is False

    for name in ("qp-a", "qp-b", "qp-c"):
        co.create_namespaced_custom_object(*RAY, raycluster(name, workers=1, cpu="4", memory="1Gi"))
        # Kueue orders by creation time, to the second: the next one is created in a later second
        stamp = created_at(name)
        eventually(lambda s=stamp: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") > s, 5, 0.05,
                   what=f"a second later than {name}'s creation")
    eventually(lambda: admitted("qp-a"), 30, what="qp-a to be admitted")

    t, out = in_thread("provision", lambda: tasks.provision(
        run_id="r-position", cluster_name="qp-d", namespace="sandbox", local_queue="local-queue-test", num_workers=0,
        head_cpu="2", head_memory="1Gi", admission_timeout=300, startup_timeout=120))
    lines: list[tuple[float, str]] = []

    def said(pattern: str) -> re.Match | None:
        lines.extend((time.monotonic(), li) for li in capsys.readouterr().out.splitlines())
        return next((m for _, li in lines if (m := re.search(pattern, li))), None)

    eventually(lambda: said(r"position 2 of 3 waiting in LocalQueue local-queue-test"), 60,
               what="provision to say it is third in line")
    for gone, position in (("qp-a", 1), ("qp-b", 0)):
        co.delete_namespaced_custom_object(*RAY, gone)
        eventually(lambda p=position: said(rf"queued: now position {p} of {p + 1} waiting in LocalQueue local-queue-test"),
                   90, what=f"provision to say it is at position {position}")
    co.delete_namespaced_custom_object(*RAY, "qp-c")
    t.join(timeout=180)
    assert "result" in out, out
    said("")
    positions = [int(m.group(1)) for _, li in lines if (m := re.search(r"position (\d+) of \d+ waiting", li))]
    assert positions[0] == 2 and positions[-1] == 0 and set(positions) == {2, 1, 0}, positions
    assert all(a >= b for a, b in zip(positions, positions[1:], strict=False)), positions  # never rises
    assert "next in line" in "".join(li for _, li in lines)
    # how good the estimate was: each estimate against when the cluster was admitted
    admitted_at = next(at for at, li in lines if "admitted by Kueue after" in li)
    errors = [(pos, float(m.group(1)), admitted_at - at) for at, li in lines
              if (m := re.search(r"about (\d+)s to admission", li)) and (pos := int(re.search(r"position (\d+)", li).group(1))) >= 0]
    print("queue position estimates (position, estimated s, actual s): "
          + "; ".join(f"{p}: {e:.0f} vs {a:.0f}" for p, e, a in errors))
    assert errors  # once one ahead was admitted, an estimate was given
