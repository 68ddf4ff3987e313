"""The per-cluster CA that the CodeFlare operator puts in `<cluster>-ca-secret-<suffix>`,
from which the CodeFlare SDK signs its client certificate for mTLS."""

from __future__ import annotations

import base64
import datetime

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
