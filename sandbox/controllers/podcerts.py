"""What a Ray pod's volumes and CodeFlare's `create-cert` init container give its Ray
container (codeflare-operator v1.16.0, pkg/controllers/support.go: the init container's
openssl script), so that the sandbox's Ray runs with mutual TLS as RHOAI's does.

- A `secret` volume mounted in the Ray container becomes a directory with the secret's keys
  as files (the `ca-vol` volume: the cluster's CA, ca.crt and ca.key); an `emptyDir` volume an
  empty directory. A missing secret keeps the container from starting, as the kubelet's
  FailedMount does.
- `create-cert` writes server.key and server.crt, signed by that CA, and the CA's files into
  the `server-cert` volume. The certificate's subjectAltNames are the script's, IPs written as
  DNS names as it writes them (gRPC matches them as strings): 127.0.0.1, localhost, $FQ_RAY_IP,
  the pod's IP; on the head also the Ray client Route's host and the head Service's DNS name.
- Env values under a mount path (RAY_TLS_SERVER_CERT=/home/ray/workspace/tls/server.crt)
  name the directory on this machine instead.
The Ray container then runs with RAY_USE_TLS=1: every Ray gRPC connection, the GCS's and the
Ray client server's (port 10001) included, is mTLS, and a Ray client needs a certificate
signed by the cluster's CA, which the CodeFlare SDK's generate_cert (and kfp-ray's driver
component) makes from the CA secret.

Where the sandbox differs (README): its Ray workers reach the head's GCS by the head Service's
clusterIP, not by its DNS name as KubeRay's do (`--address=<svc>.<ns>.svc.cluster.local`), so
the head's certificate also names the clusterIPs of the Services in front of it.
"""

from __future__ import annotations

import base64
import datetime
import shutil
from pathlib import Path

from .codeflare import INGRESS_DOMAIN, INIT_CONTAINER  # the operator's init container; the Route's domain


class MissingSecret(Exception):
    """A secret volume's secret does not exist (yet): the container cannot start."""


class CertificateLacksPodIP(Exception):
    """RHOAI 3.x: the mTLS secret's certificate does not name this pod's IP yet (KubeRay's
    mTLS controller reissues it once the pod has an address). A real kubelet mounts the
    secret before the pod has an address and refreshes it about a minute later; the sandbox
    starts Ray once the certificate names the pod (docs/sandbox.md)."""


def _names_ip(cert_pem: bytes, ip: str) -> bool:
    import ipaddress

    from cryptography import x509

    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return ipaddress.ip_address(ip) in sans.get_values_for_type(x509.IPAddress)


def _ray_container(pod: dict) -> dict:
    return (pod["spec"].get("containers") or [{}])[0]


def env_value(container: dict, name: str) -> str:
    return next((str(e.get("value", "")) for e in container.get("env") or [] if e.get("name") == name), "")


def prepare(pod: dict, base: Path, read_secret, pod_ip: str, service_ips: list[str]) -> dict[str, str]:
    """Make the Ray container's secret and emptyDir volumes under `base` and run create-cert
    if the pod has it. Returns mount path -> directory here. `read_secret(name)` gives a
    secret's data (base64 values) or None."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    mounts: dict[str, str] = {}
    dirs: dict[str, Path] = {}
    for mount in _ray_container(pod).get("volumeMounts") or []:
        vol = volumes.get(mount.get("name"))
        if vol is None or not ({"secret", "emptyDir"} & vol.keys()):
            continue
        path = base / vol["name"]
        if vol["name"] not in dirs:
            if "secret" in vol:
                data = read_secret(vol["secret"]["secretName"])
                if data is None:
                    raise MissingSecret(f'MountVolume.SetUp failed for volume "{vol["name"]}" : '
                                        f'secret "{vol["secret"]["secretName"]}" not found')
                server_cert = env_value(_ray_container(pod), "RAY_TLS_SERVER_CERT")
                if ("tls.crt" in data and pod_ip and server_cert.startswith(mount["mountPath"].rstrip("/") + "/")
                        and not _names_ip(base64.b64decode(data["tls.crt"]), pod_ip)):
                    raise CertificateLacksPodIP(f'secret "{vol["secret"]["secretName"]}" does not name {pod_ip} yet')
                path.mkdir(parents=True, exist_ok=True, mode=0o700)
                for key, value in data.items():
                    (path / key).write_bytes(base64.b64decode(value))
            else:
                path.mkdir(parents=True, exist_ok=True, mode=0o700)
            dirs[vol["name"]] = path
        mounts[mount["mountPath"].rstrip("/")] = str(path)
    init = next((c for c in pod["spec"].get("initContainers") or [] if c.get("name") == INIT_CONTAINER), None)
    if init is not None:
        _create_cert(pod, init, volumes, dirs, pod_ip, service_ips)
    return mounts


def _create_cert(pod: dict, init: dict, volumes: dict, dirs: dict[str, Path], pod_ip: str,
                 service_ips: list[str]) -> None:
    by_path = {m["mountPath"].rstrip("/"): m["name"] for m in init.get("volumeMounts") or []}
    ca_dir, tls_dir = dirs.get(by_path.get("/home/ray/workspace/ca", "")), dirs.get(by_path.get("/home/ray/workspace/tls", ""))
    if ca_dir is None or tls_dir is None:
        return
    for f in ca_dir.iterdir():  # `cp /home/ray/workspace/ca/* .`
        shutil.copyfile(f, tls_dir / f.name)
    env = {e["name"]: e.get("value", "") for e in init.get("env") or [] if "value" in e}
    names = ["127.0.0.1", "localhost", env.get("FQ_RAY_IP", ""), pod_ip]  # ${FQ_RAY_IP}: the init container's
    labels = pod["metadata"].get("labels") or {}
    if labels.get("ray.io/node-type") == "head":
        ns, cluster = pod["metadata"]["namespace"], labels.get("ray.io/cluster", "")
        names += [f"rayclient-{cluster}-{ns}.{INGRESS_DOMAIN}", f"{cluster}-head-svc.{ns}.svc", *service_ips]
    key_pem, cert_pem = _sign((tls_dir / "ca.crt").read_bytes(), (tls_dir / "ca.key").read_bytes(),
                              [n for n in names if n])
    (tls_dir / "server.key").write_bytes(key_pem)
    (tls_dir / "server.crt").write_bytes(cert_pem)


def _sign(ca_pem: bytes, ca_key_pem: bytes, names: list[str]) -> tuple[bytes, bytes]:
    """`openssl req -newkey rsa:2048 -subj /CN=ray-head` and `openssl x509 -req -days 365` with
    the script's extensions (authorityKeyIdentifier, basicConstraints CA:FALSE, subjectAltName)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, None)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ray-head")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key()), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dict.fromkeys(names)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return (key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
            cert.public_bytes(serialization.Encoding.PEM))


def map_paths(env: dict[str, str], mounts: dict[str, str]) -> dict[str, str]:
    """Env values under a mount path, pointed at the mount's directory here."""
    out = dict(env)
    for name, value in env.items():
        for path, here in mounts.items():
            if value == path or value.startswith(path + "/"):
                out[name] = here + value[len(path):]
                break
    return out
