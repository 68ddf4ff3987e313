"""Regenerate sandbox/data/crds/*.json from the real CRD YAML files.

    python tools/refresh_crds.py ../shared/reference/crds

Keeps what the sandbox needs (group, names, scope, each version's schema and
subresources) and drops descriptions, so the schemas stay small and load fast.
"""

import json
import sys
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parent.parent / "sandbox" / "data" / "crds"


def strip(node):
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def main(src: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(src).glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]
        doc = {
            "group": spec["group"],
            "kind": spec["names"]["kind"],
            "plural": spec["names"]["plural"],
            "shortNames": spec["names"].get("shortNames", []),
            "scope": spec["scope"],
            "versions": [
                {"name": v["name"], "subresources": sorted(v.get("subresources", {})),
                 "schema": strip(v["schema"]["openAPIV3Schema"])}
                for v in spec["versions"]
            ],
        }
        out = OUT / f"{spec['names']['plural']}.{spec['group']}.json"
        out.write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n")
        print(f"{out.name}: {out.stat().st_size} bytes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "../shared/reference/crds")
