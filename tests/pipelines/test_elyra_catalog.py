"""compiled/components/elyra/*.yaml as Elyra reads them: Elyra 4.1.1's own KFP component parser
lists each with its name, description, inputs (required or not, defaults) and outputs, and what
Elyra then submits (kfp's load_component_from_text of the same file) compiles to the component
that compiled/components/<name>.yaml holds: the same executor, inputs and outputs.

Elyra comes from the package index without its dependencies (they would bring JupyterLab): its
parser needs only a few packages (ELYRA), and its package __init__ (the Jupyter server
extension) is not run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kfp_ray.pipelines import registry

ROOT = Path(__file__).resolve().parents[2]
# Elyra and what its parser and its processor module (which the parser imports to type inputs)
# import beyond this venv's packages
ELYRA = ["elyra==4.1.1", "deprecation==2.1.0", "jupyter-core==5.9.1", "entrypoints==0.4.2", "minio==7.2.20",
         "argon2-cffi==25.1.0", "argon2-cffi-bindings==26.2.0", "pycryptodome==4.4.0", "watchdog==7.1.0"]

PARSE = r"""
import json, sys, types
from pathlib import Path
from types import SimpleNamespace
package = types.ModuleType("elyra")  # the parser without elyra/__init__.py (the Jupyter server app)
package.__path__ = [str(Path(sys.argv[1]) / "elyra")]
sys.path.insert(0, sys.argv[1])  # its few dependencies
sys.modules["elyra"] = package
from elyra.pipeline.catalog_connector import CatalogEntry, EntryData
from elyra.pipeline.kfp.kfp_component_parser import KfpComponentParser
from elyra.pipeline.runtime_type import RuntimeProcessorType
catalog = SimpleNamespace(schema_name="local-directory-catalog", runtime_type=RuntimeProcessorType.KUBEFLOW_PIPELINES,
                          metadata={"categories": ["kfp-ray"]})
out = {}
for path in sys.argv[2:]:
    entry = CatalogEntry(EntryData(Path(path).read_text(), ".yaml"), {"path": path}, catalog, ["path"])
    parsed = KfpComponentParser().parse(entry)
    out[Path(path).stem] = None if not parsed else {
        "name": parsed[0].name, "description": parsed[0].description,
        "properties": [{"id": p.ref, "required": p.required, "value": p.value,
                        "inputs": p.allowed_input_types} for p in parsed[0].properties]}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def elyra_dir(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("elyra")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), *ELYRA],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.skip(f"Elyra could not be installed from the package index: {done.stderr[-500:]}")
    return target


def elyra_files() -> list[Path]:
    return [registry.COMPILED / "components" / "elyra" / f"{name}.yaml" for name in registry.COMPONENTS]


def ir_component(name: str) -> dict:
    spec = yaml.safe_load(registry.compiled_component_path(name).read_text())
    return next(iter(spec["components"].values()))


def test_elyra_lists_every_component_with_its_inputs_and_outputs(elyra_dir):
    done = subprocess.run([sys.executable, "-c", PARSE, str(elyra_dir), *map(str, elyra_files())],
                          capture_output=True, text=True, timeout=300, check=True)
    parsed = json.loads(done.stdout)
    assert sorted(parsed) == sorted(registry.COMPONENTS)
    for name, component in parsed.items():
        assert component is not None, f"Elyra rejected compiled/components/elyra/{name}.yaml"
        assert component["name"] == name.replace("_", "-") and component["description"]
        ir = ir_component(name)
        params = ir["inputDefinitions"].get("parameters", {})
        artifacts = ir["inputDefinitions"].get("artifacts", {})
        outputs = {**ir["outputDefinitions"].get("parameters", {}), **ir["outputDefinitions"].get("artifacts", {})}
        by_id = {p["id"]: p for p in component["properties"]}
        assert set(by_id) == set(params) | set(artifacts) | {f"output_{o}" for o in outputs}
        for key, spec in {**params, **artifacts}.items():
            assert by_id[key]["required"] is not spec.get("isOptional", False), (name, key)
            default, value = spec.get("defaultValue"), by_id[key]["value"]
            if spec.get("parameterType") in ("NUMBER_INTEGER", "NUMBER_DOUBLE") and default is not None:
                assert float(value) == float(default), (name, key, value)
            elif spec.get("parameterType") == "STRING" and default is not None:
                assert (value or "") == default, (name, key, value)  # Elyra shows an empty default as none
            elif spec.get("parameterType") == "BOOLEAN" and default is not None:
                assert value == default, (name, key, value)
        for key in outputs:
            assert by_id[f"output_{key}"]["inputs"] == [None]  # an output: Elyra accepts no value for it


def without_descriptions(node):
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


@pytest.mark.parametrize("name", registry.COMPONENTS)
def test_what_elyra_submits_is_the_component_compiled_for_kfp(name, tmp_path):
    """Elyra's processor loads the catalog entry with kfp.components.load_component_from_text;
    compiled, it is the v2 component (the v1 format carries no input descriptions)."""
    from kfp import compiler, components

    loaded = components.load_component_from_text((registry.COMPILED / "components" / "elyra" / f"{name}.yaml").read_text())
    compiler.Compiler().compile(loaded, str(tmp_path / "c.yaml"))
    again = yaml.safe_load((tmp_path / "c.yaml").read_text())
    committed = yaml.safe_load(registry.compiled_component_path(name).read_text())
    [(label, executor)] = again["deploymentSpec"]["executors"].items()
    container = executor["container"]
    # the same executor, plus placeholders only Elyra reads (pipelines/elyra.py), which the
    # KFP launcher fills and kfp's executor ignores
    marks = container["args"][4:]
    assert all(m.startswith("{{$.outputs.") or m.startswith("{{$.inputs.artifacts") for m in marks), marks
    assert len(marks) == len(committed["components"][f"comp-{name.replace('_', '-')}"].get("outputDefinitions", {})
                             .get("parameters", {})) + len(committed["components"][f"comp-{name.replace('_', '-')}"]
                                                           .get("outputDefinitions", {}).get("artifacts", {}))
    container["args"] = container["args"][:4]
    assert again["deploymentSpec"] == committed["deploymentSpec"]
    assert without_descriptions(again["components"]) == without_descriptions(committed["components"])
    assert without_descriptions(again["root"]) == without_descriptions(committed["root"])
