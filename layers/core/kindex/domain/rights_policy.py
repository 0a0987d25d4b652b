"""Where a rights-check request may go: the tenant's URL is parsed strictly, then judged by the deployment's policy.

`parse_rights_url` holds the rules that do not depend on the deployment (syntax: scheme, no credentials, a real
port, one canonical spelling of the host); `RightsUrlPolicy` adds the deployment's rules (schemes, which addresses)
and judges every resolved address again at call time, so a DNS name cannot be re-pointed at the metadata service
after it was saved (DNS rebinding).

The URL parsers of the standard library are lenient on purpose (urlsplit drops tabs and newlines, inet_aton reads
`0x7f000001`, `2130706433` and `0177.0.0.1` as 127.0.0.1): they are only used on text that passed the strict
checks here.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

FIELD = "rights_check_method_configuration.url"
MAX_URL_LENGTH = 2048
ALLOWED_NETWORKS_SETTING = "KINDEX_RIGHTS_ALLOWED_NETWORKS"

# Names that always mean a cloud metadata service (GCP, AWS): refused whatever they resolve to.
METADATA_HOSTS = frozenset(
    {"metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal"}
)
# Metadata and platform services outside link-local: AWS Nitro services (IMDS fd00:ec2::254, DNS, NTP), Oracle
# Cloud's 192.0.0.192, Alibaba's 100.100.100.200. Never allowed, whatever the deployment's allowlist says.
METADATA_NETWORKS: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("fd00:ec2::/32"),
    ipaddress.ip_network("192.0.0.192/32"),
    ipaddress.ip_network("100.100.100.200/32"),
)
THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # connecting to 0.x reaches the host itself on Linux
SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known prefix: the last 32 bits are the IPv4 address
LOOPBACK_NAMES = ("localhost",)

# Used with fullmatch only (`$` would accept a trailing newline).
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_URL_CHARACTERS = re.compile(r"[\x21-\x7e]+")  # printable ASCII: no space, control or non-ASCII character
_PORT = re.compile(r"[0-9]{1,5}")


class UrlRefused(ValueError):
    """The rights-check URL or address breaks `rule` (a short stable name: scheme, credentials, characters, port,
    host, metadata, never, not-admitted, length). The message explains it and names the field."""

    def __init__(self, rule: str, message: str):
        super().__init__(f"{FIELD}: {message}")
        self.rule = rule


class RightsCallFailed(Exception):
    """A rights-check call gave no usable answer. `reason` is for the operator's logs (refused, resolve, connect,
    timeout, too_large, status, invalid_answer, busy, protocol); tenants only ever learn that the check failed."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class RightsUrl:
    """A rights-check URL that passed the syntax rules. `host` is lower-case, without brackets or a trailing dot;
    `address` is set when the host is an IP literal."""

    scheme: str
    host: str
    port: int
    target: str
    address: IPAddress | None

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if isinstance(self.address, ipaddress.IPv6Address) else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def parse_rights_url(url: object) -> RightsUrl:
    """The URL's parts, or UrlRefused. Deployment-independent: any deployment refuses what fails here."""
    if not isinstance(url, str) or not url:
        raise UrlRefused("scheme", "must be an http(s) URL for the external method")
    if len(url) > MAX_URL_LENGTH:
        raise UrlRefused("length", f"must be at most {MAX_URL_LENGTH} characters")
    if not _URL_CHARACTERS.fullmatch(url) or "\\" in url:
        raise UrlRefused(
            "characters",
            "must not contain spaces, control characters, backslashes or non-ASCII "
            "characters (write international names in their xn-- form)",
        )
    try:
        parts = urlsplit(url)
    except ValueError:  # unbalanced or invalid brackets
        raise UrlRefused("host", "must be a DNS name (letters, digits, '-') or an IP address") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not url.lower().startswith(scheme + "://"):
        raise UrlRefused("scheme", "must be an http(s) URL for the external method")
    netloc = parts.netloc
    if "@" in netloc:
        raise UrlRefused("credentials", "must not contain credentials (user:password@)")
    host, port_text = _split_host_port(netloc)
    if port_text is None:
        port = 443 if scheme == "https" else 80
    elif _PORT.fullmatch(port_text) and 1 <= int(port_text) <= 65535:
        port = int(port_text)
    else:
        raise UrlRefused("port", "port must be a number from 1 to 65535")
    host, address = _canonical_host(host)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return RightsUrl(scheme=scheme, host=host, port=port, target=target, address=address)


def _split_host_port(netloc: str) -> tuple[str, str | None]:
    if netloc.startswith("["):
        end = netloc.find("]")
        if end < 0:
            raise UrlRefused("host", "has an unclosed '[' in its host")
        host, rest = netloc[1:end], netloc[end + 1 :]
        if rest and not rest.startswith(":"):
            raise UrlRefused("host", "has characters after the bracketed IPv6 address")
        return f"[{host}]", (rest[1:] if rest else None)
    if ":" in netloc:
        host, _, port = netloc.rpartition(":")
        return host, port
    return netloc, None


def _canonical_host(host: str) -> tuple[str, IPAddress | None]:
    """(host, address) in one canonical spelling; other spellings of an address are refused, not normalised, so
    the stored URL says what it reaches."""
    if host.startswith("["):
        try:
            address = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise UrlRefused("host", "must put only an IPv6 address in brackets") from None
        if address.scope_id is not None:
            raise UrlRefused("host", "must not use an IPv6 zone index")
        return str(address), address
    name = host.lower()
    name = name[:-1] if name.endswith(".") else name
    if not name:
        raise UrlRefused("host", "must name a host")
    try:
        socket.inet_aton(name)
    except OSError:
        pass
    else:  # something the C resolver would read as an IPv4 address: only dotted-decimal is accepted
        try:
            v4 = ipaddress.IPv4Address(name)
        except ValueError:
            raise UrlRefused("host", "must write an IPv4 address as four decimal numbers (a.b.c.d)") from None
        return str(v4), v4
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise UrlRefused("host", "must be a DNS name (letters, digits, '-') or an IP address")
    if labels[-1].isdigit():
        raise UrlRefused("host", "must write an IPv4 address as four decimal numbers (a.b.c.d)")
    return name, None


def parse_networks(value: str | None) -> tuple[IPNetwork, ...] | None:
    """`KINDEX_RIGHTS_ALLOWED_NETWORKS`: comma-separated CIDRs, or `none`. None when not set (use the default)."""
    if value is None or not value.strip():
        return None
    if value.strip().lower() == "none":
        return ()
    try:
        return tuple(ipaddress.ip_network(part.strip(), strict=False) for part in value.split(",") if part.strip())
    except ValueError as error:
        raise ValueError(f"{ALLOWED_NETWORKS_SETTING}: {error}") from None


LOCAL_DEFAULT_NETWORKS: tuple[IPNetwork, ...] = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


@dataclass(frozen=True)
class RightsUrlPolicy:
    """Which rights-check URLs and addresses this deployment calls. Global (public) addresses are allowed; loopback
    and private ones only inside `allowed_networks`; link-local, metadata, multicast, reserved and "this network"
    addresses never, in any of their IPv6 spellings."""

    schemes: tuple[str, ...] = ("https",)
    allowed_networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def for_backend(cls, backend: str, allowed_networks: Sequence[IPNetwork] | None) -> "RightsUrlPolicy":
        """AWS: https only, nothing private unless listed. Local: http too, and loopback unless configured."""
        if backend == "local":
            networks = LOCAL_DEFAULT_NETWORKS if allowed_networks is None else tuple(allowed_networks)
            return cls(schemes=("http", "https"), allowed_networks=networks)
        return cls(schemes=("https",), allowed_networks=tuple(allowed_networks or ()))

    def check_url(self, url: object) -> RightsUrl:
        """The parsed URL when this deployment may call it, else UrlRefused. An IP literal is judged here; a DNS
        name is judged again on every address it resolves to, at every connection (`check_address`)."""
        parsed = parse_rights_url(url)
        if parsed.scheme not in self.schemes:
            raise UrlRefused("scheme", f"must use {' or '.join(self.schemes)} in this deployment")
        if parsed.host in METADATA_HOSTS:
            raise UrlRefused("metadata", "must not point at a cloud metadata service")
        if parsed.address is not None:
            self.check_address(parsed.address)
        elif parsed.host in LOOPBACK_NAMES or parsed.host.endswith(".localhost"):
            self.check_address(ipaddress.IPv4Address("127.0.0.1"))
        return parsed

    def check_address(self, address: IPAddress | str) -> None:
        """None when a connection to `address` is allowed, else UrlRefused (rule `never` or `not-admitted`)."""
        ip = _translated(ipaddress.ip_address(address.split("%", 1)[0] if isinstance(address, str) else address))
        for candidate in (ip, *_embedded_ipv4(ip)):
            if _never(candidate):
                raise UrlRefused(
                    "never", "must not point at a link-local, metadata, multicast, reserved or unspecified address"
                )
        for candidate in (ip, *_embedded_ipv4(ip)):
            if not (candidate.is_global or _inside(candidate, self.allowed_networks)):
                raise UrlRefused(
                    "not-admitted",
                    "must not point at a loopback or private address unless the "
                    f"deployment admits it ({ALLOWED_NETWORKS_SETTING})",
                )


def _never(ip: IPAddress) -> bool:
    if ip.is_loopback:  # ::1 sits inside the reserved ::/8; loopback is the allowlist's decision
        return False
    if ip.is_link_local or ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return True
    if isinstance(ip, ipaddress.IPv4Address):
        return ip in THIS_NETWORK or _inside(ip, METADATA_NETWORKS)
    return ip.is_site_local or _inside(ip, METADATA_NETWORKS)


def _translated(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv4-mapped (::ffff:a.b.c.d) or NAT64 (64:ff9b::a.b.c.d) address reaches; judged as
    itself, so ::ffff:127.0.0.1 is loopback and a DNS64 answer for a public host stays public."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def _embedded_ipv4(ip: IPAddress) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address also carries (6to4, Teredo): each must pass too."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    found = []
    if ip in SIX_TO_FOUR and ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.append(ip.teredo[1])
    return found


def _inside(ip: IPAddress, networks: Iterable[IPNetwork]) -> bool:
    return any(ip.version == network.version and ip in network for network in networks)
