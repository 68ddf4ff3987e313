"""Input checks against what Kubernetes itself accepts: resource quantities as
k8s.io/apimachinery v0.31's ParseQuantity reads them (decimal exponents, the E and Ei
suffixes), and `kfp-ray gc --timeout`, checked before anything is listed or deleted."""

from __future__ import annotations

from fractions import Fraction

import pytest

from kfp_ray.cluster import ClusterSpec
from kfp_ray.errors import InputError
from kfp_ray.pipelines.__main__ import main
from kfp_ray.validate import quantity

VALID = [
    ("1e3", 1000), ("1E3", 1000), ("1e+3", 1000), ("1e-3", Fraction(1, 1000)), ("2.5e2", 250), ("1E0", 1),
    ("1E", 10**18), ("0.5E", 5 * 10**17), ("1Ei", 2**60), ("1.5Ei", 3 * 2**59),
    ("4Gi", 4 * 2**30), ("4G", 4 * 10**9), ("500m", Fraction(1, 2)), ("100n", Fraction(1, 10**7)), ("5u", Fraction(1, 200000)),
    ("1.", 1), (".5", Fraction(1, 2)), ("+2", 2), ("-1", -1), ("1.5Gi", 3 * 2**29), ("0", 0),
]
INVALID = ["E", "Ei", "1e", "1e3.5", "1e3Gi", "1EE", "1KB", "4gi", "1Ki5", "", ".", "1 Gi", "1.2.3", "0x10", "1mi", "Gi4"]


@pytest.mark.parametrize("text,value", VALID, ids=[v[0] for v in VALID])
def test_kubernetes_quantities_are_read_as_kubernetes_reads_them(text, value):
    assert quantity(text) == value


@pytest.mark.parametrize("text", INVALID, ids=lambda t: repr(t))
def test_what_kubernetes_refuses_is_refused(text):
    with pytest.raises(ValueError):
        quantity(text)


@pytest.mark.parametrize("resources", [
    {"worker_memory": "8e9", "head_memory": "4E9"},
    {"worker_cpu": "2e0", "head_cpu": "1E-1"},
    {"worker_memory": "1Ei"},  # far beyond any node, but a quantity: the queue's quota check says so
    {"worker_memory": "8e9", "worker_memory_limit": "8G"},
], ids=lambda r: ",".join(f"{k}={v}" for k, v in r.items()))
def test_a_cluster_with_such_quantities_passes_the_input_checks(resources):
    ClusterSpec(name="demo", namespace="sandbox", run_id="run-1", **resources).check()


def test_a_bad_quantity_still_names_the_field():
    with pytest.raises(InputError, match="worker_cpu: '1e3.5' is not a CPU quantity"):
        ClusterSpec(name="demo", namespace="sandbox", run_id="run-1", worker_cpu="1e3.5").check()


@pytest.mark.parametrize("timeout", ["-5", "0", "nan", "inf"])
def test_gc_refuses_a_timeout_that_is_not_a_positive_number_before_listing(timeout, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))  # listing would fail with exit code 1
    assert main(["gc", "--timeout", timeout, "--delete"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --timeout: ") and "must be a number of seconds above zero" in err, err
    assert "Fix: give e.g. --timeout=300" in err


@pytest.mark.parametrize("text,value", VALID, ids=[v[0] for v in VALID])
def test_the_sandboxs_apiserver_reads_quantities_as_kubernetes_does(text, value):
    from kfp_ray_sandbox import quantity as sandbox_quantity

    assert sandbox_quantity.parse(text) == value


@pytest.mark.parametrize("text", INVALID, ids=lambda t: repr(t))
def test_the_sandboxs_apiserver_refuses_what_kubernetes_refuses(text):
    """Never kinder than the platform: a quantity the real apiserver refuses ("1e3Gi") is refused."""
    from kfp_ray_sandbox import quantity as sandbox_quantity

    with pytest.raises(ValueError):
        sandbox_quantity.parse(text)
