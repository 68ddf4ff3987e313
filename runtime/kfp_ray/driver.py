"""A Python function run as a Ray client driver against a provisioned RayCluster: the CodeFlare
demo 2 way (`ray.init("ray://<cluster>-head-svc.<ns>.svc:10001")`), from a pipeline task.

On OpenShift AI the Ray client port is behind mutual TLS: every Ray process of the cluster has
RAY_USE_TLS=1 and a server certificate signed by the cluster's CA, in a secret labelled
ray.openshift.ai/cluster-name and named `<cluster>-ca-secret-<suffix>`. On 2.x the CodeFlare
operator's webhook writes RAY_USE_TLS into the RayCluster and its CA secret holds ca.crt/ca.key;
on 3.x KubeRay's mTLS controller does it for clusters annotated odh.ray.io/secure-trusted-network
(its webhook annotates every one) and cert-manager writes the CA as tls.crt/tls.key/ca.crt
(red-hat-data-services/kuberay rhoai-3.3 raycluster_mtls_controller.go). A client must
present a certificate signed by that CA, and must dial the head Service by its DNS name (the
name the head's certificate carries; its clusterIP is not in it). client_certificate() makes
that certificate as the CodeFlare SDK's generate_cert.generate_tls_cert does (RSA 3072, the
same extensions and names), into a private directory that is removed when the driver ends, and
exports RAY_USE_TLS / RAY_TLS_* for the Ray client as the SDK's export_env does.

A Ray client only works against the same Ray version (and Python minor version) as the
cluster's: check_ray_version() compares them before connecting and says what to change.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import io
import ipaddress
import os
import shutil
import sys
import tempfile
import threading
import time

from . import kube, rayclusters
from .errors import KfpRayError
from .wait import Backoff, log, poll, retry

CLIENT_PORT = 10001  # KubeRay's default `client` port of the head Service
CONNECT_ATTEMPTS = 3  # a client server that failed to start is started afresh on the next try
CA_WAIT_S = 120.0  # the operator writes the CA secret with the cluster; a fresh one may lag
CLUSTER_LABEL = "ray.openshift.ai/cluster-name"
SECURE_NETWORK = "odh.ray.io/secure-trusted-network"  # RHOAI 3.x: KubeRay's mTLS is on when "true"
TLS_ENV = ("RAY_USE_TLS", "RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_TLS_CA_CERT")


class DriverError(KfpRayError):
    """The driver could not connect to the cluster, or its function could not be loaded."""


def client_address(cluster_name: str, namespace: str) -> str:
    """`ray://<cluster>-head-svc.<ns>.svc:<client port>`, the port read from the head Service
    (the name is the one the head's mTLS certificate carries)."""
    svc = kube.call(kube.core().read_namespaced_service, f"{cluster_name}-head-svc", namespace,
                    what="read the head Service")
    port = next((p.port for p in svc.spec.ports or [] if p.name == "client"), None)
    if port is None:
        raise DriverError(f"the head Service {cluster_name}-head-svc has no `client` port: the RayCluster's head "
                          "does not serve Ray clients. Fix: keep KubeRay's default head ports (client 10001)")
    return f"ray://{cluster_name}-head-svc.{namespace}.svc:{port}"


def tls_required(cluster_name: str, namespace: str) -> bool:
    """Whether the cluster's Ray runs with RAY_USE_TLS: annotated for KubeRay's mTLS (3.x), or
    RAY_USE_TLS in the head's spec (2.x: the CodeFlare webhook puts it there)."""
    rc = rayclusters.get(cluster_name, namespace)
    if rc is None:
        raise DriverError(f"RayCluster {cluster_name} is not in namespace {namespace}: it was deleted, or never "
                          "provisioned. Fix: wire provision_ray_cluster's cluster_name and namespace outputs")
    if (rc["metadata"].get("annotations") or {}).get(SECURE_NETWORK) == "true":
        return True
    spec = ((rc.get("spec") or {}).get("headGroupSpec") or {}).get("template", {}).get("spec") or {}
    ray = (spec.get("containers") or [{}])[0]
    env = {e.get("name"): str(e.get("value", "")) for e in ray.get("env") or []}
    return env.get("RAY_USE_TLS", "0").lower() in ("1", "true")


def ca_secret(cluster_name: str, namespace: str, timeout: float = CA_WAIT_S) -> dict:
    """The cluster's CA secret data (base64 values), as generate_cert.get_secret_name finds it:
    labelled with the cluster's name, named `<cluster>-ca-secret-...` (CodeFlare operator
    v1.16; KubeRay's mTLS controller on 3.x: `-<uid[:8]>`) or `ca-secret-<cluster>` (before)."""
    names = (f"{cluster_name}-ca-secret-", f"ca-secret-{cluster_name}")

    def found() -> dict | None:
        secrets = kube.call(kube.core().list_namespaced_secret, namespace,
                            label_selector=f"{CLUSTER_LABEL}={cluster_name}", what="list the cluster's CA secret")
        return next((dict(s.data or {}) for s in secrets.items
                     if s.metadata.name.startswith(names[0]) or s.metadata.name == names[1]), None)

    def missing() -> Exception:
        return DriverError(f"no CA secret for RayCluster {cluster_name} in {namespace} after {timeout:.0f}s (a secret "
                           f"labelled {CLUSTER_LABEL}={cluster_name}, named {names[0]}<suffix>): the cluster's Ray runs "
                           "with mTLS but no CA was written. Fix: on OpenShift AI 3.x check that cert-manager is "
                           "installed and KubeRay's logs (raycluster-mtls controller); on 2.x the codeflare component "
                           "of the DataScienceCluster and the CodeFlare operator's logs")

    return poll(found, timeout, f"the CA secret of RayCluster {cluster_name} (cert-manager or the CodeFlare operator writes it)",
                backoff=Backoff(0.5, 1.5, 5.0), on_timeout=missing)


def client_certificate(data: dict, cluster_name: str, namespace: str, directory: str, days: int = 30) -> dict[str, str]:
    """Write ca.crt, tls.crt and tls.key (0600) for a Ray client into `directory`, signed by the
    cluster's CA as codeflare_sdk.common.utils.generate_cert.generate_tls_cert (0.34) signs
    them; return the env that export_env sets."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_b64 = data.get("ca.crt") or data.get("tls.crt")
    key_b64 = data.get("tls.key") or data.get("ca.key")
    if not ca_b64 or not key_b64:
        raise DriverError(f"the CA secret of RayCluster {cluster_name} has no CA certificate and key (keys: "
                          f"{sorted(data)}). Fix: let the platform recreate it (delete the secret: cert-manager on 3.x, the "
                          "CodeFlare operator on 2.x)")
    ca_pem = base64.b64decode(ca_b64)
    ca_cert = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(base64.b64decode(key_b64), None)
    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    svc = f"{cluster_name}-head-svc"
    one_day = datetime.timedelta(days=1)
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .issuer_name(ca_cert.subject).subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "local")]))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - one_day).not_valid_after(now + one_day * days)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=True,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=True)
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
                x509.IPAddress(ipaddress.IPv6Address("::1")), x509.DNSName(svc), x509.DNSName(f"{svc}.{namespace}.svc"),
                x509.DNSName(f"{svc}.{namespace}.svc.cluster.local")]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    files = {"ca.crt": ca_pem, "tls.crt": cert.public_bytes(serialization.Encoding.PEM),
             "tls.key": key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption())}
    for name, content in files.items():
        fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
    return {"RAY_USE_TLS": "1", "RAY_TLS_SERVER_CERT": os.path.join(directory, "tls.crt"),
            "RAY_TLS_SERVER_KEY": os.path.join(directory, "tls.key"), "RAY_TLS_CA_CERT": os.path.join(directory, "ca.crt")}


def check_ray_version(dashboard_url: str, local: str | None = None) -> str:
    """The cluster's Ray version, once it equals this task's (`local`: ray.__version__)."""
    from .jobs import RayJobsClient

    if local is None:
        import ray

        local = ray.__version__
    remote = str(RayJobsClient(dashboard_url).version().get("ray_version", ""))
    if remote and remote != local:
        raise DriverError(f"the RayCluster runs Ray {remote} and this task has Ray {local}: a Ray client must have the "
                          f"cluster's Ray version exactly. Fix: give the pipeline's `image` a Ray {local} image (as "
                          f"quay.io/modh/ray:{local}-py311-cu121), or run this component with ray=={remote}")
    return remote or local


def load_function(driver: str, function: str, embedded_root: str | None = None):
    """`function` of the Python file `driver`: a path in the component's embedded code
    ("code/train.py"), or an s3:// URI read with the data connection."""
    if not function.isidentifier():
        raise DriverError(f"function: {function!r} is not a Python name. Fix: name the function to call, e.g. 'main'")
    if driver.startswith("s3://"):
        from . import s3

        bucket, key = s3.split(driver)
        try:
            source = s3.client().get_object(Bucket=bucket, Key=key)["Body"].read().decode()
        except Exception as exc:  # noqa: BLE001 - said with the field and the fix
            raise DriverError(f"driver: could not read {driver} ({type(exc).__name__}: {str(exc)[:200]}). Fix: check the "
                              "URI and that the data connection's keys may read it") from None
        path = driver
    else:
        path = os.path.join(embedded_root or os.getcwd(), driver)
        if not os.path.isfile(path):
            raise DriverError(f"driver: {driver!r} is not a file of this component's code (looked at {path}). Fix: give a "
                              "path under the embedded code, as 'code/<file>.py', or an s3:// URI of a .py file")
        with open(path) as fh:
            source = fh.read()
    module = type(sys)("kfp_ray_driver")
    module.__file__ = path
    exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - the user's driver code, as `python driver.py`
    fn = module.__dict__.get(function)
    if not callable(fn):
        raise DriverError(f"function: {driver} has no function {function!r}. Fix: name one it defines")
    return fn


@contextlib.contextmanager
def environ(values: dict[str, str | None]):
    """os.environ with `values` set (None: unset) inside the block, as it was afterwards."""
    def apply(env: dict[str, str | None]) -> None:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    saved = {k: os.environ.get(k) for k in values}
    try:
        apply(values)
        yield
    finally:
        apply(saved)


# The proxy's answer to a client reconnecting within init after its server failed to start
# (ray 2.52.1 proxier.py Datapath: NOT_FOUND), raised by the client as a plain ConnectionError.
SESSION_CLEANED_UP = "Attempted to reconnect a session that has already been cleaned up"


def client_init(init, address: str) -> None:
    """init(address) as a Ray client. The head's client proxy forks one server process per
    client, and that process can die at start: on a busy head it may need longer than the
    proxy's 30 s, and the proxy forks it while its gRPC threads are busy (gRPC logs "skipping
    fork() handlers"; the child can then abort in gRPC before it runs: 3 of 40 connections
    to a head on a 2-core machine at full load, its daemons started as Ray starts them). The
    proxy answers ConnectionAbortedError("Initialization failure from server:\n<traceback>"),
    or, where the client's stream broke first, NOT_FOUND to its reconnect: raised again as
    ConnectionAbortedError with the reason, for connected() to retry with a fresh connection
    (server_start_failed)."""
    try:
        init(address=address, log_to_driver=True)
    except ConnectionAbortedError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        raise ConnectionAbortedError(f"the head's client proxy failed to start this client's server: "
                                     f"{lines[-1] if len(lines) > 1 else 'no reason given'}") from None
    except ConnectionError as exc:
        if SESSION_CLEANED_UP not in str(exc):
            raise
        raise ConnectionAbortedError("the head's client proxy lost this client's server while it started "
                                     f"({SESSION_CLEANED_UP.lower()})") from None


def server_start_failed(exc: BaseException) -> bool:
    """The one failure connected() retries: the Ray client already retries its channel (3
    tries), so an unreachable head (a wrong namespace) is not tried again."""
    return isinstance(exc, ConnectionAbortedError)


def connect(init, address: str, sleep=time.sleep) -> None:
    """client_init, with a failed server start tried again (CONNECT_ATTEMPTS in all)."""
    retry(lambda: client_init(init, address), f"connecting to {address} as a Ray client", attempts=CONNECT_ATTEMPTS,
          backoff=Backoff(3.0, 2.0, 15.0), sleep=sleep, transient=server_start_failed)


@contextlib.contextmanager
def connected(cluster_name: str, namespace: str, dashboard_url: str):
    """ray.init() as a Ray client of the cluster, with the mTLS client certificate when its Ray
    runs with TLS; ray.shutdown() and the certificate removed afterwards."""
    import ray

    check_ray_version(dashboard_url)
    address = client_address(cluster_name, namespace)
    directory = tempfile.mkdtemp(prefix="kfp-ray-tls-")
    try:
        env: dict[str, str | None] = dict.fromkeys(TLS_ENV)  # no TLS settings of the caller's
        if tls_required(cluster_name, namespace):
            # read by the Ray client when it connects (as the SDK's export_env sets them)
            env |= client_certificate(ca_secret(cluster_name, namespace), cluster_name, namespace, directory)
            log(f"mTLS: client certificate signed by RayCluster {cluster_name}'s CA")
        with environ(env):
            log(f"connecting to {address} as a Ray client")
            started = time.monotonic()
            try:
                connect(ray.init, address)
            except Exception as exc:  # noqa: BLE001 - said in the user's terms
                raise DriverError(f"could not connect to {address} as a Ray client ({type(exc).__name__}: "
                                  f"{str(exc)[:300]}). Fix: check that this task runs "
                                  "in the cluster's namespace and that the head pod is ready") from None
            log(f"connected in {time.monotonic() - started:.1f}s")
            try:
                yield address
            finally:
                with contextlib.suppress(Exception):
                    ray.shutdown()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class Tee(io.TextIOBase):
    """Writes go to the stream (the pod's log) and are kept for the log artifact, both
    redacted with follow's helper (redact.py): the Ray pods hold the data connection's keys,
    and what their tasks print reaches the driver. Whole lines are passed on, so a key
    written in pieces is still found; flush() passes on a pending part line (a prompt, a
    progress bar). Ray's client writes its workers' output from its own thread: a lock
    keeps lines whole."""

    def __init__(self, stream):
        self.stream, self.parts, self.pending = stream, [], ""
        self.lock = threading.Lock()

    def write(self, s):
        with self.lock:
            text = self.pending + s
            cut = max(text.rfind("\n"), text.rfind("\r")) + 1
            self.pending = text[cut:]
            if cut:
                self._emit(text[:cut])
        return len(s)

    def _emit(self, text: str) -> None:
        from .redact import redact

        text = redact(text)
        self.parts.append(text)
        self.stream.write(text)
        self.stream.flush()

    def flush(self):
        with self.lock:
            if self.pending:
                text, self.pending = self.pending, ""
                self._emit(text)
        self.stream.flush()

    def text(self) -> str:
        self.flush()
        return "".join(self.parts)
