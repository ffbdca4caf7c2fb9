"""The certificates behind the local object store's grant server (`local_grants`), which must speak HTTPS: the open
protocol takes only `https://` grant URLs.

One certificate authority per state directory (`tls/ca.key.pem`, 0600, made on first use), which vouches only
for loopback names and addresses (a name constraint, so even its leaked key cannot vouch for anything else), and
is installed in no trust store of the machine. Agents that take grants from this install trust it through
`tls/ca-bundle.pem` (this machine's public roots plus this CA: what `SSL_CERT_FILE` names) or `tls/ca.pem` (the CA alone).
The server's own certificate is made afresh by each process that serves grants.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from agent_env.errors import BadInput
from agent_env.stores.local import create_private_once, read_private

CA_FILE = "ca.key.pem"  # the CA's key and certificate, private to this user
CERT_FILE = "ca.pem"  # the CA's certificate alone (public)
BUNDLE_FILE = "ca-bundle.pem"  # the public roots plus the CA, for SSL_CERT_FILE (public)
LOOPBACK_NAMES = ("localhost",)
LOOPBACK_NETWORKS = ("127.0.0.0/8", "::1/128")
_CA_DAYS = 5 * 365
_SERVER_DAYS = 30


def trust_bundle(tls_dir: Path) -> Path:
    """The file an agent names in `SSL_CERT_FILE` to trust this install's grant URLs (made if missing)."""
    local_ca(tls_dir)
    return tls_dir / BUNDLE_FILE


def local_ca(tls_dir: Path):  # -> (private key, certificate)
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    path = tls_dir / CA_FILE
    try:
        pem = read_private(path, what="the local CA", remake=f"remove {path} to make a new one", error=BadInput)
    except FileNotFoundError:
        create_private_once(path, _new_ca())
        pem = read_private(path, what="the local CA", remake=f"remove {path} to make a new one", error=BadInput)
    key = serialization.load_pem_private_key(pem, password=None)
    cert = x509.load_pem_x509_certificate(pem[pem.index(b"-----BEGIN CERTIFICATE-----") :])
    public = cert.public_bytes(serialization.Encoding.PEM)
    if not (tls_dir / CERT_FILE).exists() or (tls_dir / CERT_FILE).read_bytes() != public:
        _write_public(tls_dir / CERT_FILE, public)
        _write_public(tls_dir / BUNDLE_FILE, _system_roots() + public)
    return key, cert


def server_files(tls_dir: Path, run_dir: Path) -> tuple[Path, Path]:
    """A fresh certificate for 127.0.0.1, ::1 and localhost signed by the CA, and its key: (cert file, key file)
    in `run_dir` (0600), for one grant server's life."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_key, ca_cert = local_ca(tls_dir)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agent-env grant server")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_SERVER_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(n) for n in LOOPBACK_NAMES]
                + [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "::1")]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{id(cert):x}"
    cert_file, key_file = run_dir / f"server-{tag}.pem", run_dir / f"server-{tag}.key.pem"
    for path, data in (
        (cert_file, cert.public_bytes(serialization.Encoding.PEM)),
        (
            key_file,
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
        ),
    ):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    return cert_file, key_file


def _new_ca() -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agent-env local transfer CA")])
    now = datetime.datetime.now(datetime.UTC)
    constraints = x509.NameConstraints(
        permitted_subtrees=[x509.DNSName(n) for n in LOOPBACK_NAMES]
        + [x509.IPAddress(ipaddress.ip_network(n)) for n in LOOPBACK_NETWORKS],
        excluded_subtrees=None,
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(constraints, critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return private + cert.public_bytes(serialization.Encoding.PEM)


def _system_roots() -> bytes:
    """The public roots this machine's OpenSSL trusts by default, as PEM (so SSL_CERT_FILE adds ours to them)."""
    import ssl

    der = ssl.create_default_context().get_ca_certs(binary_form=True)
    return "".join(ssl.DER_cert_to_PEM_cert(cert) for cert in der).encode()


def _write_public(path: Path, data: bytes) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o755)  # the trust files are public: a sandbox's user may read them
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
