"""The per-cluster CAs of RayClusters on OpenShift AI (the CodeFlare operator's on 2.x, cert-manager's
for KubeRay's mTLS controller on 3.x), their leaf certificates, and the sandbox's serving CA."""

from __future__ import annotations

import base64
import datetime
import functools
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


def ca_secret_data(common_name: str = "root-ca", days: int = 365) -> dict[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    pem_cert = cert.public_bytes(serialization.Encoding.PEM)
    return {"ca.crt": base64.b64encode(pem_cert).decode(), "ca.key": base64.b64encode(pem_key).decode()}


class ServingCA:
    """The sandbox's own CA and the API server's certificate, as a cluster's service CA
    issues them: clients verify TLS against `ca_pem`, which the kubeconfigs carry."""

    def __init__(self, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), days: int = 30):
        from cryptography.hazmat.primitives.asymmetric import ec

        now = datetime.datetime.now(datetime.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())  # EC: a fresh sandbox signs in ~1 ms
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kfp-ray-sandbox-ca")])
        ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
              .serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=days))
              .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
              .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
              .sign(ca_key, hashes.SHA256()))
        key = ec.generate_private_key(ec.SECP256R1())
        sans = [x509.IPAddress(ipaddress.ip_address(h)) if _is_ip(h) else x509.DNSName(h) for h in hosts]
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
                .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=days))
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        self.ca_pem = ca.public_bytes(serialization.Encoding.PEM)
        self.cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        self.key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption())

    def server_context(self):
        """An SSLContext serving the certificate (TLS 1.2+, as kube-apiserver)."""
        import os
        import ssl
        import tempfile

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        # load_cert_chain reads files only: a private temp dir, removed at once.
        with tempfile.TemporaryDirectory(prefix="kfp-ray-tls-") as tmp:
            cert, key = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
            for path, data in ((cert, self.cert_pem), (key, self.key_pem)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
            ctx.load_cert_chain(cert, key)
        return ctx


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def ca_keypair(common_name: str, days: int) -> tuple[bytes, bytes]:
    """A self-signed CA (cert PEM, key PEM), as cert-manager's selfSigned Issuer makes one for
    an `isCA: true` Certificate. RSA 2048, not the 4096 RHOAI's KubeRay asks for: the same to
    every client, a fraction of the CPU on a 2-core machine (docs/sandbox.md)."""
    data = ca_secret_data(common_name, days)
    return base64.b64decode(data["ca.crt"]), base64.b64decode(data["ca.key"])


@functools.lru_cache(maxsize=64)
def _signer(ca_pem: bytes, ca_key_pem: bytes):
    """A CA's certificate and key, parsed once: a cluster's certificates are reissued as its
    pods get addresses. The keys here are the sandbox's own: their RSA checks (as costly as
    making one) are skipped."""
    return x509.load_pem_x509_certificate(ca_pem), _own_key(ca_key_pem)


def _own_key(pem: bytes):
    return serialization.load_pem_private_key(pem, None, unsafe_skip_rsa_key_validation=True)


def issue(ca_pem: bytes, ca_key_pem: bytes, common_name: str | None, dns_names: list[str], ip_addresses: list[str],
          days: int, key_pem: bytes | None = None) -> tuple[bytes, bytes]:
    """A leaf certificate (cert PEM, key PEM) signed by the CA, as cert-manager's CA Issuer
    issues a Certificate: RSA 2048 (its default), the dnsNames and ipAddresses as SANs, usages
    digital signature, key encipherment, server auth and client auth. `key_pem`: the key of
    the certificate this one reissues, kept (privateKey.rotationPolicy Never, cert-manager's
    default before v1.18); None: a new key."""
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca, ca_key = _signer(ca_pem, ca_key_pem)
    key = _own_key(key_pem) if key_pem else rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.datetime.now(datetime.UTC)
    sans = [x509.DNSName(n) for n in dict.fromkeys(dns_names)] + \
        [x509.IPAddress(ipaddress.ip_address(ip)) for ip in dict.fromkeys(ip_addresses)]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)] if common_name else [])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=True,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
