"""Each component's README carries a reference generated from its signature and docstring,
and `compile --check` fails when one is stale."""

from __future__ import annotations

from kfp_ray.pipelines import component_docs, registry


def test_every_component_readme_has_its_current_reference():
    assert component_docs.stale() == []
    for name in registry.COMPONENTS:
        text = component_docs.readme_path(name).read_text()
        spec = registry.load_component(name).component_spec
        block = text.split(component_docs.BEGIN, 1)[1].split(component_docs.END, 1)[0]
        for key in spec.inputs:  # every input, with its default and description
            assert f"| `{key}` |" in block, (name, key)
        assert f"task = {name}(" in block


def test_compile_check_fails_when_a_docstring_changed_and_the_readme_did_not(tmp_path, monkeypatch):
    name = "teardown_ray_cluster"
    path = component_docs.readme_path(name)
    current = path.read_text()
    edited = current.replace("Seconds to wait for each deletion.", "an outdated description")
    assert edited != current
    monkeypatch.setattr(component_docs, "readme_path", lambda n: tmp_path / "README.md" if n == name else path)
    (tmp_path / "README.md").write_text(edited)
    assert component_docs.stale(components=[name]) == [f"components/{name}/README.md"]
    component_docs.write_all(components=[name])
    assert (tmp_path / "README.md").read_text() == current  # rewritten from the docstring, prose kept
