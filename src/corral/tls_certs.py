"""A cluster's private certificate authority: `corral up --tls` makes one (and the tests do), then a
certificate for the controller that names every way clients reach it (DNS names and IP addresses).

Keys are EC P-256. The CA is valid for a year and is kept in the state dir, so that clients trusting it
keep working across restarts; the controller's certificate is issued afresh at every start.

For a controller on its own host: `python -m corral.tls_certs DIR NAME...` writes DIR/ca.pem (what clients
and agents trust), DIR/ca.key, DIR/controller.pem and DIR/controller.key for the names given (the
names and addresses clients use to reach the controller)."""
from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from corral.private_file import write_atomic

VALIDITY = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)  # a CA this close to its end is replaced, not reused
CLOCK_SKEW = datetime.timedelta(minutes=5)  # hosts whose clocks lag a little still accept new certificates


class TlsSetupError(Exception):
    """The certificate files cannot be made or read; the message is complete."""


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(cls, common_name: str = "corral cluster CA", now: datetime.datetime | None = None,
               validity: datetime.timedelta = VALIDITY) -> CertificateAuthority:
        now = now or _now()
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        cert = (
            _builder(name, name, key.public_key(), now, now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @classmethod
    def load(cls, cert_file: Path, key_file: Path) -> CertificateAuthority:
        try:
            cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
            key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
        except (OSError, ValueError) as exc:
            raise TlsSetupError(f"cannot load the CA from {cert_file} and {key_file}: {exc}") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
            raise TlsSetupError(f"the key {key_file} is not the key of the CA certificate {cert_file}")
        return cls(cert, key)

    def save(self, cert_file: Path, key_file: Path) -> None:
        write_private(key_file, self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
        write_atomic(cert_file, self.cert.public_bytes(serialization.Encoding.PEM), 0o644)

    def issue(self, names: Iterable[str], now: datetime.datetime | None = None,
              validity: datetime.timedelta = VALIDITY) -> tuple[bytes, bytes]:
        """(certificate PEM, private key PEM) of a server certificate for `names` (host names or IPs)."""
        sans = subject_alt_names(names)
        if not sans:
            raise TlsSetupError("a server certificate needs at least one host name or address")
        now = now or _now()
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, str(sans[0].value))])
        not_after = min(now + validity, self.cert.not_valid_after_utc)
        cert = (
            _builder(subject, self.cert.subject, key.public_key(), now, not_after)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        return cert.public_bytes(serialization.Encoding.PEM), key_pem

    def expires_within(self, margin: datetime.timedelta, now: datetime.datetime | None = None) -> bool:
        return self.cert.not_valid_after_utc - (now or _now()) < margin


def subject_alt_names(names: Iterable[str]) -> list[x509.GeneralName]:
    """IP address SANs for addresses, DNS name SANs for the rest; duplicates and wildcard addresses dropped."""
    found: list[x509.GeneralName] = []
    for name in names:
        name = name.strip().strip("[]")
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            entry: x509.GeneralName | None = x509.DNSName(name.lower()) if name else None
        else:
            entry = None if address.is_unspecified else x509.IPAddress(address)
        if entry is not None and entry not in found:
            found.append(entry)
    return found


def cluster_tls(ca_file: Path, cert_file: Path, key_file: Path, names: Iterable[str]) -> None:
    """The CA in `ca_file` (its key beside it, as .key), made if missing or near its end, and a fresh
    server certificate for `names` in `cert_file` and `key_file`."""
    ca_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    ca_key = ca_file.with_suffix(".key")
    ca = None
    if ca_file.exists() and ca_key.exists():
        ca = CertificateAuthority.load(ca_file, ca_key)
    if ca is None or ca.expires_within(RENEW_BEFORE):
        ca = CertificateAuthority.create()
        ca.save(ca_file, ca_key)
    cert_pem, key_pem = ca.issue(names)
    write_private(key_file, key_pem)
    write_atomic(cert_file, cert_pem, 0o644)


def write_private(path: Path, data: bytes) -> None:
    write_atomic(path, data, 0o600)


def _builder(subject: x509.Name, issuer: x509.Name, public_key, not_before: datetime.datetime,
             not_after: datetime.datetime) -> x509.CertificateBuilder:
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before - CLOCK_SKEW).not_valid_after(not_after))


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m corral.tls_certs",
                                     description="make (or reuse) a cluster CA and issue the controller's certificate")
    parser.add_argument("dir", type=Path, help="where ca.pem, ca.key, controller.pem and controller.key go")
    parser.add_argument("names", nargs="+", metavar="NAME", help="host names and addresses the certificate names")
    args = parser.parse_args(argv)
    try:
        cluster_tls(args.dir / "ca.pem", args.dir / "controller.pem", args.dir / "controller.key", args.names)
    except (TlsSetupError, OSError) as exc:
        print(f"corral.tls_certs: error: {exc}", file=sys.stderr)
        return 1
    print(f"CA: {args.dir / 'ca.pem'}; controller certificate: {args.dir / 'controller.pem'} "
          f"(key {args.dir / 'controller.key'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
