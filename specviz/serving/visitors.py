"""Who a visitor is, as the network sees them: the address their requests come from.

Gradio gives every page load a session of its own, and a client makes as many as it likes (every
raw `POST /gradio_api/call/race` is a new one), so a share per session is no share at all: six raw
calls at once were all admitted, and another visitor's short race took 12.7 s instead of 3.9 s
(issue 53). An address is costlier to multiply, so the models' line (`specviz.serving.turns`) and the
upload bounds (`specviz.serving.uploads`) count per address.

The rule: with no proxy in front of the app, the address is the connection's peer. With
`trusted_proxies` proxies in front, each appends the address it was reached from to
X-Forwarded-For, so the visitor is the entry that many hops from the right of X-Forwarded-For
followed by the peer. A client writes its own entries left of everything the proxies append, so
what it claims there is never read. A Hugging Face Space serves through one proxy (its peer is an
internal 10.x address); SPECVIZ_TRUSTED_PROXIES sets the count, 1 by default on a Space (SPACE_ID
set), else 0. The count must match the deployment: one too many lets a client pose as many
visitors, one too few makes the proxy one visitor. An IPv6 address counts by its /64, the block
one subscriber is given. uvicorn, gradio's server, has a rule of its own (it trusts the header
from a loopback peer, FORWARDED_ALLOW_IPS): `specviz.ui.blocks.launch` turns it off, so that a
local client cannot pose as others either and this module is the one rule. Nothing here imports
gradio.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

from specviz.errors import SpecvizError

log = logging.getLogger(__name__)
TRUSTED_PROXIES_ENV = "SPECVIZ_TRUSTED_PROXIES"
UVICORN_TRUST_ENV = "FORWARDED_ALLOW_IPS"  # uvicorn's peers whose X-Forwarded-For it obeys ("" : none)
IPV6_PREFIX = 64  # an IPv6 visitor is their /64: a subscriber's block, which they may fill with addresses


def trusted_proxies(env: Mapping[str, str] | None = None) -> int:
    """How many proxies stand in front of the app: SPECVIZ_TRUSTED_PROXIES, else 1 on a Hugging Face
    Space (SPACE_ID set), else 0; a SpecvizError for anything but a whole number from 0."""
    environment: Mapping[str, str] = os.environ if env is None else env
    raw = environment.get(TRUSTED_PROXIES_ENV, "").strip()
    if not raw:
        return 1 if environment.get("SPACE_ID") else 0
    if not raw.isdigit():
        raise SpecvizError(f"{TRUSTED_PROXIES_ENV} must be a whole number from 0, got {raw!r}")
    return int(raw)


def visitor_address(peer: str | None, forwarded: Iterable[str], trusted: int) -> str | None:
    """The visitor behind a connection from `peer` whose X-Forwarded-For values are `forwarded`,
    with `trusted` proxies in front: the hop that many from the right (the leftmost when there are
    fewer hops); None when there is no address at all."""
    hops = [hop.strip() for value in forwarded for hop in value.split(",") if hop.strip()]
    hops += [peer] if peer else []
    if not hops:
        return None
    return _visitor(_host(hops[max(0, len(hops) - 1 - trusted)]))


def request_address(request: Any, trusted: int | None = None) -> str | None:
    """The visitor's address of a gradio Request (its `client` and `headers`; also as gradio
    rebuilds them for a worker), `trusted` defaulting to `trusted_proxies()`; None without a client."""
    client = getattr(request, "client", None)
    peer = getattr(client, "host", None)
    if not isinstance(peer, str):
        return None
    headers = getattr(request, "headers", None) or {}
    if hasattr(headers, "getlist"):  # starlette's Headers: every X-Forwarded-For line
        forwarded = list(headers.getlist("x-forwarded-for"))
    else:  # a plain mapping (gradio's copy for a worker): one line
        value = headers.get("x-forwarded-for")
        forwarded = [value] if isinstance(value, str) else []
    return visitor_address(peer, forwarded, trusted_proxies() if trusted is None else trusted)


def scope_address(scope: Mapping[str, Any], trusted: int | None = None) -> str | None:
    """The visitor's address of an ASGI connection scope (what a middleware sees)."""
    client = scope.get("client")
    peer = client[0] if client else None
    forwarded = [value.decode("latin-1") for name, value in scope.get("headers", ()) if name == b"x-forwarded-for"]
    return visitor_address(peer, forwarded, trusted_proxies() if trusted is None else trusted)


def peer_left_alone(env: dict[str, str] | None = None) -> None:
    """Stop uvicorn replacing a loopback peer by what its X-Forwarded-For says (before the server
    starts: uvicorn reads this when gradio builds its config), so this module's rule is the only one."""
    environment = os.environ if env is None else env
    if environment.get(UVICORN_TRUST_ENV):
        log.warning(
            "%s=%r is ignored: %s says how many proxies stand in front",
            UVICORN_TRUST_ENV,
            environment[UVICORN_TRUST_ENV],
            TRUSTED_PROXIES_ENV,
        )
    environment[UVICORN_TRUST_ENV] = ""


def _host(hop: str) -> str:
    """The host of one X-Forwarded-For entry, without a port ("1.2.3.4:80", "[::1]:80")."""
    if hop.startswith("[") and "]" in hop:
        return hop[1 : hop.index("]")]
    if hop.count(":") == 1:
        return hop.split(":", 1)[0]
    return hop


def _visitor(host: str) -> str:
    """An IPv6 host as its /64 block, anything else (IPv4, a name, garbage a proxy passed on) as is."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/{IPV6_PREFIX}", strict=False))
    return str(ip)
