"""Bad input to run_ray_driver fails with the field and the fix, before it touches the
cluster (no Kubernetes API is reachable here: a call would fail differently)."""

from __future__ import annotations

import pytest

from kfp_ray import tasks
from kfp_ray.driver import DriverError, load_function
from kfp_ray.errors import InputError, InputErrors


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")


def drive(tmp_path, **kw):
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "d.py").write_text("def main(n=1):\n    return {'n': n}\n")
    args = dict(dashboard_url="http://127.0.0.1:9", cluster_name="c", namespace="ns", driver="code/d.py",
                embedded_root=str(tmp_path))
    return tasks.drive(**(args | kw))


@pytest.mark.parametrize("kwargs, problem", [("{not json", "not JSON"), ("[1, 2]", "a JSON list, not an object")])
def test_kwargs_must_be_a_json_object(tmp_path, kwargs, problem):
    with pytest.raises((InputError, InputErrors)) as err:
        drive(tmp_path, kwargs=kwargs)
    assert "kwargs:" in str(err.value) and problem in str(err.value) and "Fix:" in str(err.value)


def test_output_uri_must_be_an_s3_folder(tmp_path):
    with pytest.raises((InputError, InputErrors)) as err:
        drive(tmp_path, output_uri="/tmp/out")
    assert "output_uri" in str(err.value)


def test_a_driver_file_that_is_not_there_is_named(tmp_path):
    with pytest.raises(DriverError) as err:
        drive(tmp_path, driver="code/missing.py")
    assert "driver: 'code/missing.py' is not a file" in str(err.value) and "Fix:" in str(err.value)


def test_a_function_that_is_not_there_is_named(tmp_path):
    with pytest.raises(DriverError) as err:
        drive(tmp_path, function="train")
    assert "has no function 'train'" in str(err.value)
    with pytest.raises(DriverError, match="not a Python name"):
        drive(tmp_path, function="a-b")


def test_load_function_runs_the_file_as_a_module(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "d.py").write_text("X = 2\ndef main(n):\n    return n * X\n")
    assert load_function("code/d.py", "main", str(tmp_path))(n=3) == 6
