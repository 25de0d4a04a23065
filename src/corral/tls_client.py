"""TLS for the controller's clients (the CLI, the Slurm commands, the agents): the context that verifies
the controller, and what to tell the user when a connection fails for a TLS reason. Standard library
only, and imported only for https:// URLs: `ssl` costs a Slurm command several milliseconds of start-up.

Verification is always on for https: the certificate must chain to the CA file given (or to the
system's trusted CAs without one) and name the host of the URL (a DNS name or an IP address SAN)."""
from __future__ import annotations

import ssl

CA_FILE_HINT = "CORRAL_CA_FILE, cluster.json's \"ca_file\", or the agent's --ca-file"


class TlsConfigError(Exception):
    """The CA file cannot be used; the message is complete."""


def client_context(ca_file: str | None) -> ssl.SSLContext:
    """A context that verifies the server's chain against `ca_file` (else the system's CAs) and its name."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except ssl.SSLError as exc:  # an OSError too: caught first
        raise TlsConfigError(f"the CA file {ca_file} holds no usable PEM certificate ({exc.reason or exc})") from None
    except OSError as exc:
        raise TlsConfigError(f"cannot read the CA file {ca_file}: {exc.strerror or exc}") from None


def tls_failure(error: BaseException, url: str, ca_file: str | None) -> str | None:
    """The message for a TLS failure that `error` is or was caused by; None when it is no TLS failure."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ssl.SSLCertVerificationError):
            trusted = (f"the CA file {ca_file}" if ca_file else
                       f"the system's trusted CAs (no CA file given: set {CA_FILE_HINT})")
            return (f"the controller's certificate at {url} does not verify against {trusted}: "
                    f"{cause.verify_message or cause.reason}")
        if isinstance(cause, ssl.SSLError):
            return (f"the TLS handshake with the controller at {url} failed ({cause.reason or cause}): "
                    "if the controller serves plain HTTP, use an http:// URL")
        cause = cause.__cause__ or cause.__context__
    return None
