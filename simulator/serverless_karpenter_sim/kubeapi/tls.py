"""The simulated API server's TLS: a certificate authority made at start, and a serving certificate it signs
for 127.0.0.1 and localhost, as kube-apiserver makes for itself when it is given none.

kubectl sends its bearer token over HTTPS only, so the server must speak TLS for kubectl to work at all;
every client trusts the authority explicitly (the kubeconfig's ``certificate-authority-data``, the python
client's ``ssl_ca_cert``, DescribeCluster's ``certificateAuthority``), and none disables verification.

One authority serves every server of a process (like a developer machine's local CA): an EC P-256 key is
made in a millisecond, and a client configured with a URL alone (:func:`.server.client_configuration`)
finds the one to trust.
"""

from __future__ import annotations

import atexit
import base64
import ipaddress
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Wall-clock validity: the simulation's virtual clock never reaches TLS, which checks against real time.
_VALIDITY = timedelta(days=365)
_BACKDATE = timedelta(hours=1)  # a client whose clock is a little behind still accepts it
SERVER_NAMES = ("localhost",)
SERVER_ADDRESSES = ("127.0.0.1",)


@dataclass(frozen=True)
class LocalAuthority:
    """PEM files of the authority and of the serving certificate, and a server-side context for them."""

    directory: Path
    ca_pem: bytes

    @property
    def ca_file(self) -> str:
        return str(self.directory / "ca.crt")

    @property
    def ca_data(self) -> str:
        """The authority as kubeconfig's ``certificate-authority-data`` and EKS's ``certificateAuthority``
        carry it: base64 of the PEM."""
        return base64.b64encode(self.ca_pem).decode()

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.directory / "serving.crt", self.directory / "serving.key")
        # HTTP/1.1 only: a client offering h2 (kubectl does) must fall back to what the server speaks.
        context.set_alpn_protocols(["http/1.1"])
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def create_authority(directory: Path) -> LocalAuthority:
    """Make a new authority and serving certificate, written as PEM files under ``directory``."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"serverless-karpenter-sim-ca@{int(now.timestamp())}")
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVER_NAMES]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in SERVER_ADDRESSES]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    (directory / "ca.crt").write_bytes(ca_pem)
    (directory / "serving.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    serving_key = directory / "serving.key"
    serving_key.touch(mode=0o600)
    serving_key.write_bytes(_pem_key(key))
    return LocalAuthority(directory, ca_pem)


@cache
def local_authority() -> LocalAuthority:
    """This process's authority, made on first use and removed when the process exits."""
    directory = Path(tempfile.mkdtemp(prefix="sk-sim-tls-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return create_authority(directory)
