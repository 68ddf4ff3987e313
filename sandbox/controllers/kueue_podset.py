"""What Kueue writes into a job's pod templates when it starts it, and takes out when it stops it.

Matched against kubernetes-sigs/kueue v0.11.6 (same at v0.12.10):
- pkg/podset/podset.go FromAssignment: per admitted pod set, the nodeLabels of each distinct
  ResourceFlavor of its assignment (first one kept on a key clash) and those flavors'
  spec.tolerations; FromPodSet: the Workload's own copy of the pod template (its labels,
  annotations, nodeSelector, tolerations, schedulingGates), which is what a stop restores.
- v0.12.10 only (jobframework/reconciler.go getPodSetsInfoFromStatus): every pod set's info
  also carries the label kueue.x-k8s.io/podset=<pod set name> (controller/constants
  PodSetLabel); v0.11.6 adds it only with TopologyAwareScheduling, which is off.
- podset.Merge / PodSetInfo.Merge: a key of the template's annotations, labels or nodeSelector
  (checked in that order) with another value is a conflict ("invalid admission check
  PodSetUpdate: conflict for nodeSelector: conflict for key=k, value1=a, value2=b"); otherwise
  the maps are merged keeping the template's values, and each toleration not already there is
  appended.
- podset.RestorePodSpec: each of those fields set back to the Workload's copy when it differs.
- jobframework/reconciler.go startJob (RunWithPodSetsInfo with spec.suspend false, one patch)
  and stopJob (Suspend + RestorePodSetsInfo(GetPodSetsInfoFromWorkload), only when the job is
  not already suspended); a permanent error (the two above) makes the Workload Finished with
  reason FailedToStart and the error as its message.
TopologyAwareScheduling (alpha, off in both releases) and admission checks' PodSetUpdates are
not simulated, so no annotations or scheduling gates are ever added.
"""

from __future__ import annotations

import copy

PODSET_LABEL = "kueue.x-k8s.io/podset"
FIELDS = (("metadata", "annotations"), ("metadata", "labels"), ("spec", "nodeSelector"),
          ("spec", "tolerations"), ("spec", "schedulingGates"))


class PodSetError(Exception):
    """podset.IsPermanent: no retry helps; the job cannot be started with this admission."""


def bad_len(want: int, got: int) -> PodSetError:
    # BadPodSetsInfoLenError passes (got, want) to "expecting %d podset, got %d": Kueue's text has them swapped.
    return PodSetError(f"invalid podset infos: expecting {got} podset, got {want}")


def from_assignment(psa: dict, flavors: dict[str, dict], podset_label: bool = False) -> dict:
    """FromAssignment: {"annotations", "labels", "nodeSelector", "tolerations"} of one
    podSetAssignment (`podset_label`: v0.12's kueue.x-k8s.io/podset label). Raises KeyError for
    a flavor that is gone (Kueue's client.Get fails and the start is retried)."""
    selector: dict = {}
    tolerations: list = []
    seen = set()
    for _res, name in sorted((psa.get("flavors") or {}).items()):  # Kueue walks a Go map; sorted here
        if name in seen:
            continue
        spec = flavors[name].get("spec") or {}
        for k, v in (spec.get("nodeLabels") or {}).items():
            selector.setdefault(k, v)
        tolerations += copy.deepcopy(spec.get("tolerations") or [])
        seen.add(name)
    labels = {PODSET_LABEL: psa["name"]} if podset_label else {}
    return {"annotations": {}, "labels": labels, "nodeSelector": selector, "tolerations": tolerations}


def from_pod_set(pod_set: dict) -> dict:
    """FromPodSet: the Workload's copy of the template's mergeable fields."""
    tpl = pod_set.get("template") or {}
    return {field: copy.deepcopy((tpl.get(part) or {}).get(field)) for part, field in FIELDS}


def merge(template: dict, info: dict) -> None:
    """podset.Merge into a pod template (a dict); raises PodSetError on a conflict, before any change."""
    maps = (("metadata", "annotations"), ("metadata", "labels"), ("spec", "nodeSelector"))
    for part, field in maps:  # utilmaps.HaveConflict(template's, info's)
        adding = info.get(field) or {}
        for k, v in ((template.get(part) or {}).get(field) or {}).items():
            if k in adding and adding[k] != v:
                raise PodSetError(f"invalid admission check PodSetUpdate: conflict for {field}: "
                                  f"conflict for key={k}, value1={v}, value2={adding[k]}")
    for part, field in maps:
        current = (template.get(part) or {}).get(field) or {}
        merged = {**current, **{k: v for k, v in (info.get(field) or {}).items() if k not in current}}  # MergeKeepFirst
        if merged:
            template.setdefault(part, {})[field] = merged
    spec = template.setdefault("spec", {})
    tolerations = list(spec.get("tolerations") or [])
    for t in info["tolerations"]:
        if t not in tolerations:
            tolerations.append(t)
    if tolerations:
        spec["tolerations"] = tolerations


def restore(template: dict, info: dict) -> bool:
    """podset.RestorePodSpec: the Workload's values back where they differ (empty = absent)."""
    changed = False
    for part, field in FIELDS:
        holder = template.get(part) or {}
        want = info.get(field)
        if (holder.get(field) or None) != (want or None):
            if want:
                template.setdefault(part, {})[field] = copy.deepcopy(want)
            else:
                holder.pop(field, None)
            changed = True
    return changed
