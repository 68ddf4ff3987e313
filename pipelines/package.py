"""Which compiled pipeline `upload`, `submit` and `schedule` send to the server.

  --file PATH   a compiled pipeline YAML: a build of `kfp-ray compile --out DIR` (--image,
                --rhoai, --pip-index-url), or a pipeline of your own made of kfp-ray components;
                NAME may then be left out (the file's pipeline name is used)
  --from DIR    a build folder of `kfp-ray compile --out DIR`: DIR/NAME.yaml
  neither       compiled/NAME.yaml of this checkout; where there is no compiled/ (kfp-ray
                installed from a wheel), NAME compiled now, the default build, into a temp dir

The file is read before anything is sent: it must be a KFP pipeline spec, and --param values
are checked against its own parameters (a --rhoai or --data-connection build has other ones)."""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import registry
from .cli_args import UsageError, need_pipeline

# pipeline_spec's ParameterType as the compiled YAML spells it -> cli_args' kinds
_KINDS = {"NUMBER_DOUBLE": "float", "NUMBER_INTEGER": "int", "STRING": "str", "BOOLEAN": "bool", "LIST": "list",
          "STRUCT": "dict"}


def add_arguments(p) -> None:
    """NAME (optional with --file) and where its compiled YAML comes from."""
    p.add_argument("name", nargs="?", help=f"the pipeline: {', '.join(registry.PIPELINES)} (with --file: any name, "
                                           "default the file's pipeline name)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--file", type=Path, metavar="PATH",
                        help="send this compiled pipeline YAML (default: compiled/NAME.yaml, or NAME compiled now)")
    source.add_argument("--from", dest="from_dir", type=Path, metavar="DIR",
                        help="send DIR/NAME.yaml, from a build folder of `kfp-ray compile --out DIR`")


@dataclass
class Package:
    name: str  # what the command calls the pipeline (display and run names)
    path: Path
    spec: dict  # the pipeline spec (the YAML's first document)

    def inputs(self) -> dict[str, dict]:
        """Its parameters: name -> {kind, default?}, as cli_args.parse_params takes them."""
        params = ((self.spec.get("root") or {}).get("inputDefinitions") or {}).get("parameters") or {}
        out = {}
        for key, p in params.items():
            entry = {"kind": _KINDS.get(p.get("parameterType", ""), "str")}
            if "defaultValue" in p or p.get("isOptional"):
                entry["default"] = p.get("defaultValue")
            out[key] = entry
        return out


@contextlib.contextmanager
def resolve(args):
    """The Package `args` asks for (UsageError naming the option and the fix when there is
    none); a pipeline compiled for the occasion is removed afterwards."""
    if args.file is not None:
        spec = read(args.file, "--file")
        yield Package(args.name or spec["pipelineInfo"]["name"], args.file, spec)
        return
    if not args.name:
        raise UsageError(f"give a pipeline NAME ({', '.join(registry.PIPELINES)}) or --file PATH")
    if args.from_dir is not None:
        yield Package(args.name, *in_build(args.from_dir, args.name))
        return
    need_pipeline(args.name)
    path = registry.compiled_path(args.name)
    if path.exists():
        yield Package(args.name, path, read(path, "compiled/"))
        return
    with tempfile.TemporaryDirectory(prefix="kfp-ray-") as tmp:
        from .compile import compile_one

        print(f"compiling {args.name} (no {path.parent} here: the default build)", flush=True)
        path = Path(tmp) / f"{args.name}.yaml"
        compile_one(registry.load(args.name), path)
        yield Package(args.name, path, read(path, "compiled"))


def in_build(folder: Path, name: str) -> tuple[Path, dict]:
    if not folder.is_dir():
        raise UsageError(f"--from {folder}: no such folder; make one with `kfp-ray compile --out {folder} ...`")
    path = folder / f"{name}.yaml"
    if not path.is_file():
        there = sorted(p.stem for p in folder.glob("*.yaml"))
        raise UsageError(f"--from {folder}: it has no {name}.yaml (it has: {', '.join(there) or 'no pipelines'}); "
                         f"give a pipeline it holds, or build it with `kfp-ray compile --out {folder}`")
    return path, read(path, "--from")


def read(path: Path, option: str) -> dict:
    """The pipeline spec in a compiled YAML; UsageError when the file is not one."""
    import yaml

    try:
        with open(path) as fh:
            spec = next(yaml.load_all(fh, Loader=yaml.CSafeLoader), None)  # libyaml: 8x the pure-Python loader
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{option} {path}: not YAML ({str(exc).splitlines()[0]}); give a compiled pipeline "
                         "(`kfp-ray compile --out DIR`, or kfp's compiler)") from None
    if not isinstance(spec, dict) or not (spec.get("pipelineInfo") or {}).get("name") or "root" not in spec:
        raise UsageError(f"{option} {path}: not a compiled KFP pipeline (no pipelineInfo and root); give a YAML "
                         "from `kfp-ray compile --out DIR` or kfp's compiler")
    return spec
