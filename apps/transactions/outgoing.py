"""Outgoing HTTP of back-checks, guarded against server-side request forgery (docs/security.md).

A check URL is called only if:
- its scheme is http or https and it carries no user name or password;
- its host (or host:port) is on the app's allow-list (`App.check_hosts`, set by an approver);
- every address its host resolves to is public, or private/loopback on a cluster that allows it
  (`Cluster.backcheck_allow_private`); link-local (169.254.0.0/16, fe80::/10: cloud metadata), multicast,
  unspecified and reserved addresses are never called.
The request then goes to the address that was checked (the host name travels in the Host header and, for
https, as the TLS server name), so a DNS answer that changes between check and connect (rebinding) cannot
redirect it. Redirects are not followed; the answer is read up to a size limit within a time limit.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

MAX_ANSWER_BYTES = 16 * 1024
DEFAULT_PORTS = {"http": 80, "https": 443}
_PRIVATE_OK = [ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8", "fc00::/7", "::1/128")]


class Refused(Exception):
    """The URL may not be called; the message says why and what to do."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # lower case, as in the URL (no brackets)
    port: int
    path: str  # path and query
    address: str  # the checked address to connect to


def split(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path+query) of a check URL, or Refused."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"{url!r} is not a valid URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise Refused(f"Only http and https check URLs are called, not {scheme or 'no scheme'!r}.")
    if parts.username is not None or parts.password is not None:
        raise Refused("A check URL may not carry a user name or password.")
    host = (parts.hostname or "").lower()
    if not host:
        raise Refused(f"{url!r} names no host.")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return scheme, host, port or DEFAULT_PORTS[scheme], path


def parse_host_entry(entry: str) -> tuple[str, str]:
    """An allow-list entry: `host`, `host:port`, `[v6]` or `[v6]:port` → (host, port or "")."""
    entry = entry.strip().lower()
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        return name, rest[1:] if rest.startswith(":") else ""
    if entry.count(":") == 1:
        name, port = entry.split(":")
        return name, port
    return entry, ""


def host_allowed(host: str, port: int, allowed: list[str]) -> bool:
    """An allow-list entry `host` allows the host on any port, `host:port` only that port."""
    for entry in allowed or []:
        name, entry_port = parse_host_entry(entry)
        if name == host and (not entry_port or entry_port == str(port)):
            return True
    return False


def address_refusal(address: str, allow_private: bool) -> str | None:
    """Why this address may not be called (None: it may)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if ip.is_link_local or ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return f"{ip} is a link-local, multicast, unspecified or reserved address: never called"
    if ip.is_global:
        return None
    if allow_private and any(ip in net for net in _PRIVATE_OK):
        return None
    if any(ip in net for net in _PRIVATE_OK):
        return (f"{ip} is a private or loopback address: the cluster does not allow back-checks to private "
                "addresses (an SRE may switch on the cluster's 'back-checks may call private addresses')")
    return f"{ip} is not a public address"


def resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise Refused(f"{host} does not resolve: {exc}") from None
    return list(dict.fromkeys(info[4][0] for info in infos))


def check_target(url: str, allowed_hosts: list[str], allow_private: bool) -> Target:
    """Everything but the call: scheme, allow-list, every resolved address. Refused says why."""
    scheme, host, port, path = split(url)
    if not host_allowed(host, port, allowed_hosts):
        raise Refused(f"{host}:{port} is not on the app's allow-list of check hosts "
                      f"({', '.join(allowed_hosts) or 'empty'}); an approver sets it")
    addresses = resolve(host, port)
    for address in addresses:
        reason = address_refusal(address, allow_private)
        if reason:
            raise Refused(f"{host} resolves to {reason}")
    if not addresses:
        raise Refused(f"{host} resolves to no address")
    return Target(scheme, host, port, path, addresses[0])


def post_json(target: Target, payload: dict, timeout: float, max_bytes: int = MAX_ANSWER_BYTES) -> tuple[int, bytes]:
    """POST payload to the checked address of target; (status, body). No redirects, no proxies from the
    environment, the body read up to max_bytes, the whole call within timeout. Refused / httpx errors."""
    ip = ipaddress.ip_address(target.address)
    netloc = f"[{ip}]" if ip.version == 6 else str(ip)
    url = f"{target.scheme}://{netloc}:{target.port}{target.path}"
    default = DEFAULT_PORTS[target.scheme] == target.port
    host_header = target.host if default else f"{target.host}:{target.port}"
    if ":" in target.host:  # an IPv6 literal
        host_header = f"[{target.host}]" if default else f"[{target.host}]:{target.port}"
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    deadline = time.monotonic() + timeout
    with httpx.Client(follow_redirects=False, trust_env=False, timeout=httpx.Timeout(timeout)) as client:
        request = client.build_request(
            "POST", url, content=json.dumps(payload).encode(), extensions=extensions,
            headers={"Host": host_header, "Content-Type": "application/json", "Accept": "application/json"})
        response = client.send(request, stream=True)
        try:
            if response.is_redirect:
                raise Refused(f"answered {response.status_code} redirecting to "
                              f"{response.headers.get('location', '?')!r}: redirects are not followed")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise Refused(f"answer of {int(declared):,} bytes is larger than the limit of {max_bytes:,}")
            body = bytearray()
            for chunk in response.iter_raw():
                body += chunk
                if len(body) > max_bytes:
                    raise Refused(f"answer larger than the limit of {max_bytes:,} bytes")
                if time.monotonic() > deadline:
                    raise Refused(f"answer not complete within {timeout:g}s")
            return response.status_code, bytes(body)
        finally:
            response.close()
