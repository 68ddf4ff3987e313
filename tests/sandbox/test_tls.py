"""The runtime library reaches the API over verified TLS, with the kubeconfig's CA."""

from __future__ import annotations

import base64

import pytest
import yaml

from kfp_ray_sandbox.certs import ServingCA


def test_runtime_library_verifies_the_servers_certificate(box, monkeypatch, tmp_path):
    from kfp_ray import kube

    monkeypatch.setenv("KUBECONFIG", box.info["kubeconfig_pipeline_runner"])
    kube.api_client.cache_clear()
    try:
        cfg = kube.api_client().configuration
        assert cfg.host.startswith("https://") and cfg.verify_ssl and cfg.ssl_ca_cert
        assert kube.core().read_namespaced_secret(box.info["data_connection"], "sandbox").data

        # The same kubeconfig trusting another CA: refused at once, not retried as a blip.
        other = yaml.safe_load(open(box.info["kubeconfig_pipeline_runner"]))
        other["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(ServingCA().ca_pem).decode()
        (tmp_path / "kubeconfig").write_text(yaml.safe_dump(other))
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
        kube.api_client.cache_clear()
        with pytest.raises(Exception) as exc:
            kube.call(kube.core().read_namespaced_secret, box.info["data_connection"], "sandbox", what="read a secret")
        assert "CERTIFICATE_VERIFY_FAILED" in str(exc.value)
    finally:
        kube.api_client.cache_clear()


def test_api_errors_are_still_classified_after_the_tls_check():
    from kubernetes.client import ApiException

    from kfp_ray import wait

    assert wait.is_transient(ApiException(status=503, reason="Service Unavailable"))
    assert not wait.is_transient(ApiException(status=403, reason="Forbidden"))
