"""Compile every pipeline into compiled/<name>.yaml, reproducibly, and check freshness.

By default each task pip-installs the KFP SDK and its pinned packages into the base image
(components/_build.py), from PyPI or, with --pip-index-url, from a mirror. With --image REF
(an image built from the Containerfile) every task runs in REF with no pip installs: for
clusters without the internet, and tasks that start in seconds."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from . import registry


def compile_one(pipeline, path: Path) -> bytes:
    """A pipeline or component as Compiler().compile writes it; a pipeline less the
    descriptions of its components' inputs and outputs: KFP 2.14.3 copies a task's component
    spec into the Workflow five times (pipelines/workflow_size.py), and no UI shows them
    there. The pipeline's own parameters keep theirs (the run form shows them), and so does a
    component compiled alone."""
    from kfp import compiler
    from kfp.compiler import pipeline_spec_builder as builder
    from kfp.dsl.graph_component import GraphComponent
    from kfp.pipeline_spec import pipeline_spec_pb2

    if not isinstance(pipeline, GraphComponent):
        compiler.Compiler().compile(pipeline, str(path))
        return path.read_bytes()
    spec = pipeline_spec_pb2.PipelineSpec()
    spec.CopyFrom(pipeline.pipeline_spec)
    for component in spec.components.values():
        for definitions in (component.input_definitions, component.output_definitions):
            for field in (*definitions.parameters.values(), *definitions.artifacts.values()):
                field.ClearField("description")
    builder.write_pipeline_spec_to_file(pipeline_spec=spec, pipeline_description=pipeline.description,
                                        platform_spec=pipeline.platform_spec, package_path=str(path))
    return path.read_bytes()


def elyra_one(component, path: Path) -> bytes:
    from . import elyra

    path.write_text(elyra.dump(component))
    return path.read_bytes()


def targets(names=None, loader=registry.load, components=registry.COMPONENTS) -> list[tuple[str, object, object]]:
    """(relative path, what compiles there, how): every pipeline, then every component alone,
    as KFP v2 IR and for Elyra's component catalog (pipelines/elyra.py)."""
    out = [(f"{name}.yaml", lambda name=name: loader(name), compile_one) for name in names or registry.PIPELINES]
    for name in components:
        out.append((f"components/{name}.yaml", lambda name=name: registry.load_component(name), compile_one))
        out.append((f"components/elyra/{name}.yaml", lambda name=name: registry.load_component(name), elyra_one))
    return out


def compile_all(out_dir: Path = registry.COMPILED, names=None, loader=registry.load,
                components=registry.COMPONENTS) -> list[Path]:
    written = []
    for rel, load, write in targets(names, loader, components):
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write(load(), path)
        written.append(path)
    return written


def stale(compiled_dir: Path = registry.COMPILED, names=None, loader=registry.load,
          components=registry.COMPONENTS) -> list[str]:
    """What compiles to other bytes now than its file in compiled/ (pipelines by name,
    components as components/<name>)."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for rel, load, write in targets(names, loader, components):
            fresh = write(load(), Path(tmp) / "fresh.yaml")
            current = compiled_dir / rel
            if not current.exists() or current.read_bytes() != fresh:
                out.append(rel.removesuffix(".yaml"))
    return out


def sizes_fit(compiled_dir: Path | None = None) -> bool:
    """Print how big each compiled pipeline and component gets on a cluster (pipelines/
    workflow_size.py); False, naming the executor or pipeline, when one crosses a limit."""
    from . import workflow_size

    compiled_dir = compiled_dir or registry.COMPILED
    paths = [compiled_dir / f"{n}.yaml" for n in registry.PIPELINES]
    paths += [compiled_dir / "components" / f"{n}.yaml" for n in registry.COMPONENTS]
    figures, problems = workflow_size.check(paths)
    print("\n".join(figures))
    for line in problems:
        print(f"too big: {line}", file=sys.stderr)
    if problems:
        print("A task carries the runtime modules its function imports (components/_slim.py): import less in that "
              "component, or build with --image (nothing embedded)", file=sys.stderr)
    return not problems


def add_parser(sub) -> None:
    c = sub.add_parser("compile", help="compile every pipeline into compiled/ (or --out)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--check", action="store_true", help="fail if compiled/ is stale or too big for Argo; print the sizes")
    c.add_argument("--out", type=Path, help="write here instead of compiled/ (needed with the options below)")
    c.add_argument("--image", metavar="REF", help="every task runs in REF, with no pip installs (see Containerfile)")
    c.add_argument("--pip-index-url", metavar="URL", help="tasks pip-install from URL (a mirror) instead of PyPI")
    c.add_argument("--pip-trusted-host", metavar="HOST", help="the mirror's host, reached without TLS verification")
    c.add_argument("--rhoai", metavar="VERSION", help="rewrite for an older RHOAI server, e.g. 2.22 (docs/rhoai-versions.md)")
    c.add_argument("--data-connection", metavar="NAME", help="fix the data connection's secret name at compile time "
                   "(needed for RHOAI 2.19)")
    c.set_defaults(fn=cmd_compile)


def build_env(args) -> dict[str, str]:
    """The component build environment the options ask for (components/__init__.py); bad
    combinations are refused, naming the option and the fix."""
    from kfp_ray.components import IMAGE_ENV, PIP_INDEX_URL_ENV, PIP_TRUSTED_HOST_ENV
    from kfp_ray.validate import Checker, image_reference_problem

    if args.image and (args.pip_index_url or args.pip_trusted_host):
        raise SystemExit("compile: --image tasks install nothing; drop --pip-index-url/--pip-trusted-host "
                         "(or drop --image to keep the pip path)")
    problem = image_reference_problem(args.image) if args.image else ""
    if problem:
        raise SystemExit(f"compile: --image {args.image!r} is not an image reference ({problem}); "
                         "write e.g. quay.io/my-org/kfp-ray-components:1.0 or ...@sha256:<digest>")
    c = Checker()  # the same check provision_ray_cluster makes of its pip_index_url/pip_trusted_host
    c.pip_mirror("--pip-index-url", args.pip_index_url or "", "--pip-trusted-host", args.pip_trusted_host or "")
    _done(c)
    env = {}
    if args.image:
        env[IMAGE_ENV] = args.image
    if args.pip_index_url:
        env[PIP_INDEX_URL_ENV] = args.pip_index_url
    if args.pip_trusted_host:
        env[PIP_TRUSTED_HOST_ENV] = args.pip_trusted_host
    return env


def server_accepts(compiled_dir: Path | None = None, server: str = "rhoai-3.3") -> bool:
    """Does RHOAI 3.x's KFP 2.14.3 take every compiled pipeline and component: no pipeline-spec
    or kfp-kubernetes field newer than its protos (docs/rhoai-versions.md)? The field lists
    live with the sandbox, which plays that server (sandbox/pipelines_api/platform_spec.py); a
    checkout without it skips the check, saying so."""
    try:
        from kfp_ray_sandbox.pipelines_api.platform_spec import executors, newer_fields, unknown_fields
        from kfp_ray_sandbox.pipelines_api.store import parse_package
    except ImportError:
        print(f"skipped: the check against {server}'s KFP (the sandbox, which holds its field lists, is not installed)")
        return True
    compiled_dir = compiled_dir or registry.COMPILED
    paths = [compiled_dir / f"{n}.yaml" for n in registry.PIPELINES]
    paths += [compiled_dir / "components" / f"{n}.yaml" for n in registry.COMPONENTS]
    refused = []
    for path in paths:
        spec = parse_package(path.read_text(), path.name)
        bad = newer_fields(spec, server)
        if bad:
            refused.append(f"{path.name}: {bad[1]}")
        refused += [f"{path.name}: executor {label}: {field}" for label, config in sorted(executors(spec).items())
                    for field in unknown_fields(config, server)]
    for line in refused:
        print(f"{server}'s KFP would refuse: {line}", file=sys.stderr)
    if not refused:
        print(f"{server}'s KFP (2.14.3 fork) knows every field of the {len(paths)} compiled pipelines and components")
    return not refused


def cmd_compile(args) -> int:
    env = build_env(args)
    rewritten = bool(args.rhoai or args.data_connection)
    todo = _compat(args) if rewritten else []
    if (env or rewritten) and args.check:
        raise SystemExit("compile: --check checks compiled/, which is compiled with none of the options")
    if (env or rewritten) and args.out is None:
        raise SystemExit("compile: with --image, --pip-index-url, --rhoai or --data-connection, give --out DIR "
                         "(compiled/ keeps the default build)")
    if args.check:
        from . import component_docs

        names = stale() + component_docs.stale()
        if names:
            print(f"compiled/ (or a component README) is stale for: {', '.join(names)}. Run: kfp-ray compile",
                  file=sys.stderr)
            return 1
        if not sizes_fit() or not server_accepts():
            return 1
        print(f"compiled/ is up to date ({len(registry.PIPELINES)} pipelines, {len(registry.COMPONENTS)} components)")
        return 0
    if env:
        # components are built when their modules are imported: a fresh process builds them
        # with these options, whatever this one has imported already
        code = subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", "compile", "--out", str(args.out)],
                              env={**os.environ, **env}, cwd=registry.ROOT, check=False).returncode
        if code:
            return code
    else:
        for path in compile_all(args.out or registry.COMPILED):
            print(f"wrote {path}")
        if args.out is None:  # the READMEs document the default build
            from . import component_docs

            for path in component_docs.write_all():
                print(f"wrote the reference in {path}")
    if rewritten:
        from . import compat

        for path in compat.rewrite_dir(args.out, todo, args.data_connection or ""):
            print(f"rewrote {path} for RHOAI {args.rhoai or '3.0+'} ({', '.join(todo) or 'nothing to change'})")
    return 0


def _compat(args) -> list[str]:
    """What --rhoai/--data-connection ask of the compiled YAML (pipelines/compat.py), checked."""
    from kfp_ray.validate import Checker

    from . import compat

    if args.data_connection is not None:
        c = Checker()
        c.dns_subdomain("--data-connection", args.data_connection)  # a Secret's name
        _done(c)
    try:
        return compat.needs(compat.parse_version(args.rhoai or "3.0"), args.data_connection or "")
    except ValueError as exc:
        raise SystemExit(f"compile: {exc}") from None


def _done(checker) -> None:
    """The options' problems, as the CLI reports them (exit 2, naming the option and the fix)."""
    from kfp_ray.errors import KfpRayError

    try:
        checker.done()
    except KfpRayError as exc:
        raise SystemExit(f"compile: {exc}") from None
