"""Issue 25 item 1: the compiled YAML fits Argo. Each task carries only the runtime its function
reaches (components/_slim.py), and `kfp-ray compile --check` measures what KFP 2.14.3 would
make of each pipeline (pipelines/workflow_size.py)."""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import pytest
import yaml

from kfp_ray.components import _slim
from kfp_ray.pipelines import compile as comp
from kfp_ray.pipelines import registry, workflow_size


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    """Every shipped pipeline and component, compiled now from the source (the default build)."""
    out = tmp_path_factory.mktemp("compiled")
    comp.compile_all(out)
    return out


def shipped(root: Path) -> list[Path]:
    return ([root / f"{n}.yaml" for n in registry.PIPELINES]
            + [root / "components" / f"{n}.yaml" for n in registry.COMPONENTS])


def program(path: Path) -> str:
    (executor,) = next(yaml.safe_load_all(path.read_text()))["deploymentSpec"]["executors"].values()
    return executor["container"]["command"][-1]


def test_every_shipped_pipeline_and_component_fits_argo(fresh):
    """Before: run_ray_job's largest argument was 119,169 bytes and a training pipeline's
    Workflow ~3.7 MB."""
    for path in shipped(fresh):
        ir, platform = workflow_size.load(path.read_text())
        assert workflow_size.workflow_bytes(ir, platform) <= workflow_size.WORKFLOW_LIMIT, path.name
        for f in workflow_size.executor_figures(ir).values():
            assert f.largest_arg <= workflow_size.ARG_LIMIT, (path.name, f.name, f.largest_arg)
            assert f.driver_container_arg <= workflow_size.MAX_ARG_STRLEN, (path.name, f.name)
    assert workflow_size.check(shipped(fresh))[1] == []


def test_the_workflow_model_counts_every_copy_argo_keeps(tmp_path):
    """A task's program is in the spec once and, after the run, in its driver's inputs and in
    the pod-spec-patch its driver outputs and the executor DAG and pod take as inputs."""
    from kfp import compiler, components, dsl

    one = components.load_component_from_text(
        "name: one\ninputs: [{name: x, type: String}]\n"
        "implementation: {container: {image: 'python:3.11', command: [echo, {inputValue: x}]}}\n")

    @dsl.pipeline(name="p")
    def two():
        one(x="a")
        one(x="b")

    compiler.Compiler().compile(two, str(tmp_path / "p.yaml"))

    def size(filler: int) -> int:
        ir, platform = workflow_size.load((tmp_path / "p.yaml").read_text())
        for ex in ir["deploymentSpec"]["executors"].values():
            ex["container"]["command"][-1] += "#" + "x" * filler
        return workflow_size.workflow_bytes(ir, platform)

    grown = size(10_000) - size(0)
    # the two tasks share one executor: 1 copy in the spec arguments, 2 tasks x 4 copies in status
    assert 9 * 10_000 <= grown < 9 * 10_000 + 2_000


def test_compile_check_fails_on_an_oversized_executor_and_names_it(fresh, tmp_path, monkeypatch, capsys):
    compiled = tmp_path / "compiled"
    shutil.copytree(fresh, compiled)
    gc = compiled / "kfp_ray_gc.yaml"
    docs = list(yaml.safe_load_all(gc.read_text()))
    (executor,) = docs[0]["deploymentSpec"]["executors"].values()
    executor["container"]["command"][-1] += "#" + "x" * 70_000  # a task program 70 KB longer
    gc.write_text(yaml.safe_dump_all(docs))
    from kfp_ray.pipelines import component_docs

    monkeypatch.setattr(registry, "COMPILED", compiled)
    monkeypatch.setattr(comp, "stale", lambda *a, **k: [])
    monkeypatch.setattr(component_docs, "stale", lambda *a, **k: [])
    args = argparse.Namespace(check=True, out=None, image=None, pip_index_url=None, pip_trusted_host=None,
                              rhoai=None, data_connection=None)
    assert comp.cmd_compile(args) == 1
    out, err = capsys.readouterr()
    assert "too big: kfp_ray_gc.yaml: executor exec-sweep-ray-clusters: an argument of" in err
    assert "kfp_ray_gc.yaml: Workflow ~" in out and "exec-sweep-ray-clusters: largest argument" in out
    gc.write_text((fresh / "kfp_ray_gc.yaml").read_text())
    assert comp.cmd_compile(args) == 0


def test_a_task_carries_only_the_modules_its_function_reaches(fresh):
    submit = _slim.unpack(_slim.payload_of(program(fresh / "components" / "submit_ray_job.yaml")))
    stage = _slim.unpack(_slim.payload_of(program(fresh / "components" / "stage_dataset.yaml")))
    assert "kfp_ray/datasets.py" in stage and "kfp_ray/tasks.py" not in stage
    assert "kfp_ray/tasks.py" in submit and "kfp_ray/rayjobs.py" not in submit and "kfp_ray/datasets.py" not in submit
    for files in (submit, stage):
        assert not [n for n in files if "__pycache__" in n or n.endswith(".pyc") or "/components/" in n]
        assert not [n for n, b in files.items() if b"\"\"\"" in b]  # no docstrings


def test_the_slim_runtime_imports_and_names_nothing_it_dropped(fresh, tmp_path):
    """Every module a task carries imports from what it carries, and names nothing undefined
    (ruff F821 over each task's files)."""
    for name in registry.COMPONENTS:
        root = tmp_path / name
        files = _slim.unpack(_slim.payload_of(program(fresh / "components" / f"{name}.yaml")))
        for rel, data in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        modules = [r[:-3].replace("/", ".").removesuffix(".__init__") for r in files if r.startswith("kfp_ray/")]
        code = (f"import importlib, sys; sys.path.insert(0, {str(root)!r}); "
                f"[importlib.import_module(m) for m in {modules!r}]; import kfp_ray; "
                f"assert kfp_ray.__file__.startswith({str(root)!r})")
        r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (name, r.stderr)
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821,F822,F823", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout


def fake_runtime(tmp_path: Path, modules: dict[str, str]) -> Path:
    root = tmp_path / "kfp_ray"
    root.mkdir()
    (root / "__init__.py").write_text('"""doc"""\n')
    for name, text in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(text))
    return root


def keep(tmp_path, modules, func_source) -> dict[str, str]:
    root = fake_runtime(tmp_path, modules)
    selected = _slim.select(func_source, root)
    return {m: _slim.strip((root / f"{m.rsplit('.', 1)[-1] if m != 'kfp_ray' else '__init__'}.py").read_text(), parts)
            for m, parts in selected.items()}


def test_selection_follows_imports_even_lazy_ones_and_drops_what_nothing_names(tmp_path):
    kept = keep(tmp_path, {
        "a": """
            from __future__ import annotations
            from . import b, c
            from .e import unused_name

            def used(x: int) -> int:
                '''doc'''
                from .d import lazy  # a lazy import is followed
                return b.helper(x) + lazy()

            def unused():
                return c.other()

            class K:
                def method(self):
                    return 1

                def __repr__(self):
                    return "K"
            """,
        "b": "def helper(x):\n    return x\n\ndef other():\n    return 0\n",
        "c": "def other():\n    return 0\n",
        "d": "def lazy():\n    return 1\n",
        "e": "unused_name = 1\n",
    }, "def task():\n    from kfp_ray.a import used, K\n    return used(1), K()\n")
    assert set(kept) == {"kfp_ray", "kfp_ray.a", "kfp_ray.b", "kfp_ray.d"}  # c: only unused() named it
    a = kept["kfp_ray.a"]
    assert "def used(x)" in a and "def unused" not in a and "doc" not in a and "lazy import" not in a
    assert "def method" not in a and "def __repr__" in a  # nobody calls K().method
    assert "from .e import" not in a and "from . import b\n" in a
    assert "def helper" in kept["kfp_ray.b"] and "def other" not in kept["kfp_ray.b"]


def test_a_name_local_to_a_function_keeps_no_part_of_that_name(tmp_path):
    """Python's scoping: a local `rows` is never the module's rows(); a comprehension's own
    variable does not make the name local to its function, and `global` makes it the module's."""
    kept = keep(tmp_path, {
        "a": """
            from . import b

            def used(events):
                rows = list(events)
                return rows, b.table()
            """,
        "b": "def rows():\n    return []\n\ndef table():\n    return 0\n",
    }, "def task():\n    from kfp_ray.a import used\n    return used([])\n")
    assert "def table" in kept["kfp_ray.b"] and "def rows" not in kept["kfp_ray.b"]

    def names(source: str) -> set[str]:
        return _slim._identifiers(ast.parse(textwrap.dedent(source)))

    assert "rows" not in names("def f(x):\n    rows = x\n    return rows\n")
    assert "rows" not in names("def f(rows):\n    def g():\n        return rows\n    return g\n")  # the enclosing one's
    assert "rows" in names("def f(x):\n    return [rows for rows in x], rows()\n")
    assert "total" in names("def f():\n    global total\n    total = 1\n")
    assert "n" not in names("def f(xs):\n    return [y for y in xs if (n := y)], n\n")
    assert "rows" in names("def f(x=rows):\n    rows = 1\n")  # a default is the enclosing scope's


def test_a_compacted_function_runs_the_same_with_fewer_costly_characters():
    """A newline costs 6 bytes in the executor's ARGO_TEMPLATE, a double quote 8, a single one 2."""
    text = textwrap.dedent(r"""
        def f(a: str = "x",
              b: str = "it's") -> dict:
            '''Doc.'''

            return {"a": a,
                    "b": b, "c": "back\\slash", "d": f"{a!r}"}
        """).lstrip()
    small = _slim.compact(text)
    assert small.count("\n") == 3, small
    assert "a: str = 'x'" in small and "\"it's\"" in small and r'"back\\slash"' in small and "'d': f\"" in small
    namespace: dict = {}
    exec(compile(small, "m.py", "exec"), namespace)  # noqa: S102 - our own text
    assert namespace["f"]() == {"a": "x", "b": "it's", "c": "back\\slash", "d": "'x'"}


def test_a_stripped_module_keeps_its_line_numbers(tmp_path):
    text = textwrap.dedent('''\
        """Module doc
        on two lines."""
        # a comment

        def f(x: int,
              y: int = 2) -> int:
            """Doc."""
            # why
            return (x +
                    y) / 0
        ''')
    stripped = _slim.strip(text)
    assert "doc" not in stripped.lower() and "comment" not in stripped and "int" not in stripped
    namespace: dict = {}
    exec(compile(stripped, "m.py", "exec"), namespace)  # noqa: S102 - our own stripped text
    with pytest.raises(ZeroDivisionError) as caught:
        namespace["f"](1)
    line = traceback.extract_tb(caught.value.__traceback__)[-1].lineno
    assert text.splitlines()[line - 1].strip().startswith("return (x")


def test_an_image_build_embeds_no_runtime_but_keeps_a_code_dir(tmp_path, monkeypatch):
    import importlib

    from kfp_ray.components import IMAGE_ENV

    module = "kfp_ray.components.submit_ray_job.component"
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    monkeypatch.setenv(IMAGE_ENV, "quay.io/example/kfp-ray-components:1.0")
    sys.modules.pop(module, None)
    try:
        mod = importlib.import_module(module)
        plain = mod.submit_ray_job.component_spec.implementation.container.command[-1]
        assert _slim.payload_of(plain) is None and "__KFP_EMBEDDED_ARCHIVE_B64" not in plain
        with_code = mod.submit_ray_job_with_code(code).component_spec.implementation.container.command[-1]
        assert _slim.unpack(_slim.payload_of(with_code)) == {"code/train.py": b"print('hi')\n"}
    finally:
        monkeypatch.delenv(IMAGE_ENV)
        sys.modules.pop(module, None)
        importlib.import_module(module)


def test_a_compiled_pipeline_drops_its_components_descriptions_not_its_own(fresh):
    """Five copies per task in the Workflow: a component's input descriptions cost ~50 KB a
    pipeline; the run form's (the pipeline's parameters) and a component alone keep theirs."""
    ir = next(yaml.safe_load_all((fresh / "ray_training.yaml").read_text()))
    assert ir["root"]["inputDefinitions"]["parameters"]["lifecycle"]["description"]
    for component in ir["components"].values():
        for definitions in (component.get("inputDefinitions", {}), component.get("outputDefinitions", {})):
            for kind in ("parameters", "artifacts"):
                assert not [n for n, p in definitions.get(kind, {}).items() if "description" in p]
    alone = next(yaml.safe_load_all((fresh / "components" / "follow_ray_job.yaml").read_text()))
    assert alone["root"]["inputDefinitions"]["parameters"]["job_id"]["description"]


@pytest.mark.parametrize("job,other", [("fashion_mnist_train", "xgboost_tune"), ("xgboost_tune", "fashion_mnist_train")])
def test_each_demo_pipeline_carries_its_own_job_and_not_its_siblings(job, other):
    """Every byte of a task is copied several times into the run's Workflow: a pipeline's
    submit and run_ray_job tasks carry its job, its requirements and storage.py, nothing else."""
    from kfp_ray.pipelines.common import JOBS, job_tasks

    for task in job_tasks(job):
        files = _slim.unpack(_slim.payload_of(task.component_spec.implementation.container.command[-1]))
        code = {name for name in files if name.startswith("code/")}
        assert code == {f"code/{job}.py", "code/storage.py", f"code/requirements/{job}.txt"}, code
        assert f"code/{other}.py" not in files
        # without comments and docstrings, each line where it was
        source = (JOBS / f"{job}.py").read_text()
        assert files[f"code/{job}.py"].decode() == _slim.strip_job(source)
        assert files[f"code/{job}.py"].decode().count("\n") == source.count("\n") and "# " not in _slim.strip_job(source)


def test_the_disk_cache_gives_what_a_build_gives_and_never_a_stale_entry(tmp_path, monkeypatch):
    """components/slim_cache.py: an entry is the build's output; a changed runtime module is
    another key (so a stale entry is never read); a damaged entry is rebuilt; `off` builds."""
    from kfp_ray.components import _build, provision_ray_cluster, slim_cache

    src = tmp_path / "runtime"
    shutil.copytree(_build.runtime_dir(), src, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv(slim_cache.CACHE_ENV, str(tmp_path / "cache"))
    func = _slim.function_source(provision_ray_cluster.python_func)
    built = []

    def build():
        built.append(1)
        return _slim._runtime_files(func, src)

    first = slim_cache.cached(func, src, build)
    assert first == _slim._runtime_files(func, src) and len(built) == 1
    assert slim_cache.cached(func, src, build) == first and len(built) == 1  # read, not built
    # what components build with: runtime_files (its in-process cache bypassed) writes an entry and gives the same
    monkeypatch.setenv(slim_cache.CACHE_ENV, str(tmp_path / "other-cache"))
    assert _slim.runtime_files.__wrapped__(provision_ray_cluster.python_func, src) == first
    assert len(list((tmp_path / "other-cache").glob("*.json"))) == 1
    monkeypatch.setenv(slim_cache.CACHE_ENV, str(tmp_path / "cache"))
    (entry,) = (tmp_path / "cache").glob("*.json")
    entry.write_text("{not json")
    assert slim_cache.cached(func, src, build) == first and len(built) == 2  # damaged: rebuilt
    module = next(p for p in sorted(src.glob("*.py")) if p.stem != "__init__")
    module.write_text(module.read_text() + "\nADDED_LATER = 1\n")
    assert slim_cache.key(func, src) != entry.stem
    slim_cache.cached(func, src, build)
    assert len(built) == 3 and len(list((tmp_path / "cache").glob("*.json"))) == 2
    monkeypatch.setenv(slim_cache.CACHE_ENV, "off")
    slim_cache.cached(func, src, build)
    assert len(built) == 4
