"""Which addresses `web_fetch` may connect to.

Only public (globally routed, unicast) addresses, unless `web.fetch.allowHosts` lists
the host. Refused: loopback, private networks, link-local (169.254/16, fe80::/10),
carrier-grade NAT (100.64/10, where Alibaba's metadata service sits), multicast,
unspecified, reserved and benchmark ranges, the IETF 192.0.0.0/24 block (Oracle's
metadata service), unique-local IPv6 (fd00:ec2::254, AWS's metadata over IPv6), and
an IPv4 address hidden inside IPv6 (IPv4-mapped ::ffff:a.b.c.d, IPv4-compatible,
6to4 2002::/16, Teredo, NAT64 64:ff9b::/96) is judged as that IPv4 address.

The check is made on the addresses the name resolved to, and the connection then goes
to one of exactly those addresses (klaw.web.fetch), so a name that resolves to a public
address for the check and to 127.0.0.1 for the connection (DNS rebinding) gets
nowhere. Every address a name resolves to must pass: a public one beside a private
one is refused.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from klaw.config.engine import parse_allow_host
from klaw.errors import KlawError

__all__ = ["AddressPolicy", "IPAddress", "Refused", "why_not_public"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Cloud instance metadata services: credentials live there. Allowed only when
#: `allowHosts` names the address itself (not a network or a host name around it).
METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean...
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.169.253",  # AWS DNS
        "fd00:ec2::254",  # AWS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
    )
)

_BLOCKED: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "100.64.0.0/10",  # carrier-grade NAT: the ISP's or the cloud's inside
        "192.0.0.0/24",
        "198.18.0.0/15",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "100::/64",
        "2001:db8::/32",
        "fec0::/10",  # deprecated site-local
        "ff00::/8",
    )
)

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


class Refused(KlawError):
    """A URL `web_fetch` will not fetch; the message says why, for the model."""


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]  # the client: the address traffic ends up at
    if ip in _NAT64 or ip in _NAT64_LOCAL:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if int(ip) >> 32 == 0 and int(ip) > 1:  # deprecated IPv4-compatible ::a.b.c.d
        return ipaddress.IPv4Address(int(ip))
    return None


def why_not_public(ip: IPAddress) -> str | None:
    """None for a public unicast address, else what it is ("a loopback address")."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            ip = ipaddress.IPv6Address(str(ip).partition("%")[0])
        inner = _embedded_v4(ip)
        if inner is not None:
            why = why_not_public(inner)
            return f"{why} ({inner} inside {ip})" if why else None
    if ip in METADATA:
        return "a cloud metadata address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_unspecified:
        return "the unspecified address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "a carrier-grade NAT address"
    if ip.is_private:
        return "a private network address"
    if not ip.is_global or any(ip in net for net in _BLOCKED if net.version == ip.version):
        return "not a public address"
    return None


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str | None  # lowercase; "*.lan" style entries keep the "*."
    network: IPNetwork | None
    port: int | None

    def allows(self, host: str, port: int, ip: IPAddress) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            if ip.version != self.network.version or ip not in self.network:
                return False
            return ip not in METADATA or self.network.num_addresses == 1
        if ip in METADATA or self.name is None:
            return False
        if self.name.startswith("*."):
            return host.endswith(self.name[1:])
        return host == self.name


def _ascii(name: str) -> str:
    """A name as the URL's host is compared: IDNA (bücher.lan is xn--bcher-kva.lan)."""
    try:
        return name.encode("idna").decode("ascii")
    except UnicodeError:
        return name


class AddressPolicy:
    """`web.fetch.allowHosts` and the public-address rule, applied to one hop."""

    def __init__(self, allow_hosts: Iterable[str] = ()) -> None:
        self._entries: list[_Entry] = []
        for raw in allow_hosts:
            target, port = parse_allow_host(raw)
            if isinstance(target, str):
                self._entries.append(_Entry(_ascii(target), None, port))
            else:
                self._entries.append(_Entry(None, target, port))

    def check(self, host: str, port: int, addresses: list[IPAddress]) -> list[IPAddress]:
        """`addresses` (those `host` resolved to) when every one may be reached on
        `port`; raises Refused naming the first that may not."""
        if not addresses:
            raise Refused(f"{host} did not resolve to any address")
        name = host.lower().rstrip(".")
        for ip in addresses:
            why = why_not_public(ip)
            if why is None or any(e.allows(name, port, ip) for e in self._entries):
                continue
            shown = host if str(ip) == host else f"{host} ({ip})"
            raise Refused(
                f"Refused: {shown} is {why}; web_fetch reaches only public addresses "
                "unless the owner lists the host in web.fetch.allowHosts"
            )
        return addresses
