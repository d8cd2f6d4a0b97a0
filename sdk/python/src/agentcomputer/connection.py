"""Which node agent to talk to, with which token and which TLS trust.

The rule is the ``kubectl computer`` CLI's (docs/cli.md), so a program and
the CLI on one machine reach the same agent:

Endpoint, first found wins:
  1. the ``endpoint`` argument;
  2. ``AGENTCOMPUTER_ENDPOINT``;
  3. the local agent, ``http://127.0.0.1:7433`` (what ``node-agent local``
     listens on by default).

  A bare ``HOST:PORT`` means ``http://HOST:PORT``, or ``https://HOST:PORT``
  when a CA certificate is given.

Token, first found wins:
  1. the ``token`` argument;
  2. ``AGENTCOMPUTER_TOKEN``;
  3. the file named by the ``token_file`` argument, else by
     ``AGENTCOMPUTER_TOKEN_FILE``;
  4. for an endpoint on this machine (a loopback address or ``localhost``):
     the file ``token`` in the local agent's data directory, which
     ``node-agent local`` writes (mode 0600): the ``data_dir`` argument, else
     ``AGENTCOMPUTER_DATA_DIR``, else ``$XDG_DATA_HOME/agentcomputer``
     (``~/.local/share/agentcomputer``). A missing file means no token.

TLS, for ``https://`` endpoints: trust the CA certificate(s) of the
``ca_cert`` argument (PEM, as a path or the bytes themselves), else
``AGENTCOMPUTER_CA_CERT``, else gRPC's default roots. ``tls_server_name``
(else ``AGENTCOMPUTER_TLS_SERVER_NAME``) is the name the agent's certificate
is checked against when it differs from the endpoint's host, as through a
port-forward.

For a computer in a cluster, ``kubectl computer port-forward NAME`` prints
the lines this module's :func:`parse_port_forward` reads (``endpoint URL``,
``token TOKEN``, ``computer NAMESPACE/NAME``, and for an agent serving TLS
``ca-cert PATH`` and ``tls-server-name NAME``).
"""

from __future__ import annotations

import ipaddress
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Union
from urllib.parse import urlsplit

from .errors import ConfigurationError

__all__ = [
    "DEFAULT_ENDPOINT",
    "TOKEN_FILE",
    "PortForward",
    "Target",
    "default_data_dir",
    "parse_port_forward",
    "resolve_target",
]

#: The local agent's default API address (``node-agent local --listen``).
DEFAULT_ENDPOINT = "http://127.0.0.1:7433"
#: Name of the local agent's token file in its data directory.
TOKEN_FILE = "token"

PathOrPem = Union[str, "os.PathLike[str]", bytes]


@dataclass(frozen=True)
class Target:
    """A resolved node agent address and credentials.

    Attributes:
        endpoint: the URL, with its scheme (``http://127.0.0.1:7433``).
        address: ``HOST:PORT`` for gRPC.
        tls: True for ``https://``.
        token: the bearer token to send, or ``None``.
        token_source: where the token came from (for messages).
        ca_cert: PEM bytes of the CA(s) to trust, or ``None`` for the default roots.
        tls_server_name: the name to check the agent's certificate against,
            or ``None`` for the endpoint's host.
    """

    endpoint: str
    address: str
    tls: bool
    token: Optional[str] = None
    token_source: Optional[str] = None
    ca_cert: Optional[bytes] = None
    tls_server_name: Optional[str] = None

    def __repr__(self) -> str:  # never show the token
        return (
            f"Target(endpoint={self.endpoint!r}, tls={self.tls}, "
            f"token={'<set>' if self.token else None}, token_source={self.token_source!r})"
        )


def default_data_dir(env: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """The local agent's data directory, as ``node-agent local`` picks it:
    ``AGENTCOMPUTER_DATA_DIR``, else ``$XDG_DATA_HOME/agentcomputer``
    (an absolute ``XDG_DATA_HOME`` only), else ``~/.local/share/agentcomputer``;
    ``None`` without a home directory."""
    env = os.environ if env is None else env
    d = env.get("AGENTCOMPUTER_DATA_DIR")
    if d:
        return Path(d)
    xdg = env.get("XDG_DATA_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "agentcomputer"
    home = env.get("HOME") or os.path.expanduser("~")
    if not home or home == "~":
        return None
    return Path(home) / ".local" / "share" / "agentcomputer"


def is_local_host(host: str) -> bool:
    """Whether ``host`` names this machine: a loopback address or ``localhost``."""
    bare = host.strip("[]")
    if bare.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def _read_token(path: Path, what: str) -> str:
    try:
        text = path.read_text().strip()
    except PermissionError:
        raise ConfigurationError(f"no token readable at {path}: permission denied") from None
    except OSError as e:
        raise ConfigurationError(f"cannot read {what} {path}: {e.strerror or e}") from None
    if not text:
        raise ConfigurationError(f"cannot read {what} {path}: the file is empty")
    return text


def _read_ca(ca: PathOrPem) -> bytes:
    if isinstance(ca, bytes):
        pem = ca
        where = "the CA certificate given"
    else:
        where = f"CA certificate {os.fspath(ca)}"
        try:
            pem = Path(ca).read_bytes()
        except OSError as e:
            raise ConfigurationError(f"cannot read {where}: {e.strerror or e}") from None
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ConfigurationError(f"no certificate (-----BEGIN CERTIFICATE-----) in {where}")
    return pem


def resolve_target(
    endpoint: Optional[str] = None,
    token: Optional[str] = None,
    *,
    token_file: Optional[Union[str, "os.PathLike[str]"]] = None,
    ca_cert: Optional[PathOrPem] = None,
    tls_server_name: Optional[str] = None,
    data_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
    env: Optional[Mapping[str, str]] = None,
) -> Target:
    """Applies the rule of this module's documentation.

    Raises:
        ConfigurationError: a malformed endpoint, an unreadable or empty
            token file, a CA file without a certificate.
    """
    env = os.environ if env is None else env
    if ca_cert is None and env.get("AGENTCOMPUTER_CA_CERT"):
        ca_cert = env["AGENTCOMPUTER_CA_CERT"]
    url = endpoint or env.get("AGENTCOMPUTER_ENDPOINT") or DEFAULT_ENDPOINT
    url = url.strip()
    if "://" not in url:
        url = ("https://" if ca_cert is not None else "http://") + url
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise ConfigurationError(f"invalid endpoint {url!r}: {e}") from None
    if parts.scheme not in ("http", "https"):
        raise ConfigurationError(f"invalid endpoint {url!r}: it must start with http:// or https://")
    if not parts.hostname:
        raise ConfigurationError(f"invalid endpoint {url!r}: no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigurationError(f"invalid endpoint {url!r}: a node agent's URL has no path")
    tls = parts.scheme == "https"
    host = parts.hostname
    host_in_url = f"[{host}]" if ":" in host else host
    if port is None:
        port = 443 if tls else 80
    address = f"{host_in_url}:{port}"

    found: Optional[str] = None
    source: Optional[str] = None
    if token is not None and token.strip():
        found, source = token.strip(), "the token argument"
    elif env.get("AGENTCOMPUTER_TOKEN", "").strip():
        found, source = env["AGENTCOMPUTER_TOKEN"].strip(), "AGENTCOMPUTER_TOKEN"
    else:
        file = token_file or env.get("AGENTCOMPUTER_TOKEN_FILE")
        if file:
            found, source = _read_token(Path(file), "token file"), os.fspath(file)
        elif is_local_host(host):
            d = Path(data_dir) if data_dir is not None else default_data_dir(env)
            if d is not None:
                path = d / TOKEN_FILE
                if path.exists():
                    found, source = _read_token(path, "the agent token"), str(path)
    if found is not None and any(c in found for c in "\r\n\0"):
        raise ConfigurationError(f"the token from {source} is not a valid token (it holds characters a header cannot carry)")
    if found is not None and not tls and not is_local_host(host):
        warnings.warn(
            f"sending the agent token unencrypted to {url}; use an https:// endpoint",
            stacklevel=3,
        )

    pem = _read_ca(ca_cert) if (ca_cert is not None and tls) else None
    server_name = tls_server_name or env.get("AGENTCOMPUTER_TLS_SERVER_NAME") or None
    return Target(
        endpoint=f"{parts.scheme}://{address}",
        address=address,
        tls=tls,
        token=found,
        token_source=source,
        ca_cert=pem,
        tls_server_name=server_name if tls else None,
    )


@dataclass(frozen=True)
class PortForward:
    """What ``kubectl computer port-forward NAME`` printed.

    Attributes:
        endpoint: the local URL forwarding to the computer's node agent.
        token: the computer's token.
        computer: the computer as requests name it (``NAMESPACE/NAME``).
        ca_cert: path of the PEM file of the CA that signs the agent's
            certificate, when the agent serves TLS.
        tls_server_name: the name in the agent's certificate, when it serves TLS.
    """

    endpoint: str
    token: str
    computer: str
    ca_cert: Optional[str] = None
    tls_server_name: Optional[str] = None

    def __repr__(self) -> str:
        return f"PortForward(endpoint={self.endpoint!r}, computer={self.computer!r}, token=<set>)"


def parse_port_forward(output: str) -> PortForward:
    """Reads the ``KEY VALUE`` lines ``kubectl computer port-forward`` prints.

    Raises:
        ConfigurationError: a line ``endpoint``, ``token`` or ``computer`` is missing.
    """
    fields: dict[str, str] = {}
    for line in output.splitlines():
        key, _, value = line.strip().partition(" ")
        if key and value.strip():
            fields[key] = value.strip()
    missing = [k for k in ("endpoint", "token", "computer") if k not in fields]
    if missing:
        raise ConfigurationError(
            "not the output of `kubectl computer port-forward`: no "
            + ", ".join(f"'{k} ...'" for k in missing)
            + " line"
        )
    return PortForward(
        endpoint=fields["endpoint"],
        token=fields["token"],
        computer=fields["computer"],
        ca_cert=fields.get("ca-cert"),
        tls_server_name=fields.get("tls-server-name"),
    )
