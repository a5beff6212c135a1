"""The outbound guard: connections genbot makes to addresses someone else named.

An image cell's link and a submission's callback URL are typed by people, so they could
point genbot at its own host or the cloud's metadata service (169.254.169.254). Every such
connection resolves its host on the connection itself (`CheckedResolver`, no DNS cache) and
refuses private, loopback and link-local answers unless the host is allow-listed: checking
and connecting on one lookup is what defeats DNS rebinding. `session` is the one way to
open such a connection pool.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import AsyncIterator, Collection
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from bot.errors import Invalid

# IPv6 ranges whose low 32 bits are an IPv4 address the packet really goes to: IPv4-mapped
# (::ffff:127.0.0.1), IPv4-compatible (::127.0.0.1) and NAT64 (64:ff9b::7f00:1).
_EMBEDS_IPV4 = tuple(ipaddress.IPv6Network(n) for n in ("::ffff:0:0/96", "::/96", "64:ff9b::/96"))


def is_public(address: str) -> bool:
    """Whether a connection to `address` (an IP, as a resolver gives it) leaves for the public
    internet. An IPv6 form that carries an IPv4 address is judged by that IPv4 address, so
    ::ffff:127.0.0.1 is loopback; anything that is not an IP at all is not public."""
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and any(ip in net for net in _EMBEDS_IPV4):
        ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.is_global and not ip.is_multicast


class PrivateAddress(OSError):
    """A host answered with an address downloads may not reach. An OSError, so aiohttp wraps it
    like any failed lookup; the download unwraps it to say which host was refused."""

    def __init__(self, host: str):
        super().__init__(f"{host} resolves to a private or local address")
        self.host = host


class CheckedResolver(AbstractResolver):
    """The connector's resolver: asks `inner` once per connection, refuses the whole answer if
    any address in it is not public, and hands the connector exactly the addresses it checked.
    Checking and connecting on one lookup is what stops DNS rebinding (a name that answers a
    public address to the check and 127.0.0.1 to the connect)."""

    def __init__(self, inner: AbstractResolver, *, allow_private: bool, owns_inner: bool):
        self.inner, self.allow_private, self.owns_inner = inner, allow_private, owns_inner

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        checked = [result.copy() for result in await self.inner.resolve(host, port, family)]
        if not checked:
            raise OSError(f"{host} has no address")
        if not self.allow_private and not all(is_public(r["host"]) for r in checked):
            raise PrivateAddress(host)
        return checked

    async def close(self) -> None:
        if self.owns_inner:
            await self.inner.close()


def refusal(error: BaseException | None) -> PrivateAddress | None:
    """The PrivateAddress behind an aiohttp error (it arrives wrapped, e.g. in a
    ClientConnectorDNSError), or None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, PrivateAddress):
            return error
        seen.add(id(error))
        error = getattr(error, "os_error", None) or error.__cause__ or error.__context__
    return None


@contextlib.asynccontextmanager
async def session(*, allow_private: bool, dns: AbstractResolver | None = None,
                  timeout: aiohttp.ClientTimeout | None = None
                  ) -> AsyncIterator[aiohttp.ClientSession]:
    """A client session whose every connection is resolved and checked afresh. `dns`
    answers the lookups (default: aiohttp's resolver); tests pass their own. An IP literal
    is connected to without a lookup: check it with `is_public` before asking."""
    resolver = CheckedResolver(dns or DefaultResolver(), allow_private=allow_private,
                               owns_inner=dns is None)
    connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
            yield client
    finally:
        await resolver.close()


async def public_host(host: str, *, dns: AbstractResolver | None = None) -> bool:
    """Whether `host` (a name or an IP literal) is public now: a check at the door, so a
    private target is refused when it is named rather than when first used. Connections
    check again (`session`), since a name may answer differently later."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return is_public(host)
    resolver = dns or DefaultResolver()
    try:  # (a name with no address: OSError, for the caller to say so)
        answers = await resolver.resolve(host, 0, socket.AF_UNSPEC)
    finally:
        if dns is None:
            await resolver.close()
    return bool(answers) and all(is_public(a["host"]) for a in answers)


MAX_CALLBACK = 2000  # characters of a callback URL


async def check_callback(url: str, *, allowlist: Collection[str],
                         dns: AbstractResolver | None = None) -> str:
    """A callback URL someone typed, if genbot may post to it: http(s), no credentials in
    it, and a public host unless the host is allow-listed. Else Invalid saying why."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 (a port out of range raises here)
    except ValueError:
        raise Invalid("callback_url_bad", url=url[:200], most=MAX_CALLBACK) from None
    if parts.scheme not in ("http", "https") or not host or len(url) > MAX_CALLBACK \
            or parts.username or parts.password:
        raise Invalid("callback_url_bad", url=url[:200], most=MAX_CALLBACK)
    if host.lower() in {h.lower() for h in allowlist}:
        return url
    try:
        public = await public_host(host, dns=dns)
    except OSError:
        raise Invalid("callback_url_unresolved", host=host[:200]) from None
    if not public:
        raise Invalid("callback_url_private", host=host[:200])
    return url
