"""A private CA and the controller's server certificate, for TLS between the hosts and the
controller where the site has no PKI of its own (`clockfabric tls new`).

EC P-256 keys, the key usages strict verifiers insist on (a CA with keyCertSign and
basicConstraints critical; a server certificate for serverAuth, not a CA), and every name the
hosts reach the controller by in the subjectAltName: a client matches the SAN, never the CN.
An address given is an IP SAN, anything else a DNS name.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from dataclasses import dataclass

from clockfabric.errors import ClockfabricError

CA_DAYS = 3650
SERVER_DAYS = 397  # what public CAs may issue now; renew with the same CA
LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
DNS_NAME = re.compile(rf"^(?=.{{1,253}}$)(\*\.)?{LABEL}(\.{LABEL})*$")  # a wildcard only as the first label


@dataclass(frozen=True)
class Issued:
    """PEM text: the CA's certificate and key, the server's certificate and key."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes


def check_name(name: str) -> str:
    """An IP address or a DNS name; one ClockfabricError line otherwise."""
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        pass
    if not DNS_NAME.match(name):
        raise ClockfabricError(f"{name!r} is neither an IP address nor a DNS name: give each name the hosts "
                               "reach the controller by, e.g. --name ctl.example --name 10.1.0.5")
    return name


def issue(names: list[str], now: datetime.datetime | None = None) -> Issued:
    """A new CA and a server certificate for `names` (the first is its CN), signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if not names:
        raise ClockfabricError("give at least one --name: the address or DNS name the hosts reach the controller by")
    names = [check_name(n) for n in names]
    now = now or datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "clockfabric fleet CA")])
    ca_id = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(ca_id, critical=False)
          .sign(ca_key, hashes.SHA256()))
    sans: list[x509.GeneralName] = []
    for n in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    server = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5))
              .not_valid_after(now + datetime.timedelta(days=SERVER_DAYS))
              .add_extension(x509.SubjectAlternativeName(sans), critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                           data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                           crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_id), critical=False)
              .sign(ca_key, hashes.SHA256()))

    def pem_key(k: ec.EllipticCurvePrivateKey) -> bytes:
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())

    return Issued(ca.public_bytes(serialization.Encoding.PEM), pem_key(ca_key),
                  server.public_bytes(serialization.Encoding.PEM), pem_key(key))
