"""Kubernetes service links: the `GENBOT_*` variables a cluster injects on its own.

For every Service in a pod's namespace Kubernetes sets `<NAME>_SERVICE_HOST`,
`<NAME>_SERVICE_PORT[_<PORTNAME>]`, `<NAME>_PORT=tcp://…` and
`<NAME>_PORT_<n>_<PROTO>[_ADDR|_PORT|_PROTO]`, NAME being the Service's name upper-cased
with dashes as underscores. A Service called `genbot` (or `genbot-anything`) therefore
puts variables in genbot's own namespace of settings. They are not settings and are
ignored. Two of them, `GENBOT_SERVICE_HOST` and `GENBOT_SERVICE_PORT`, also spell the
settings [service] host and port: where the cluster's signature is there
(`GENBOT_PORT=tcp://…`, or the value itself is such an address), the cluster set them,
and they are ignored with a warning — the Service's cluster IP is not the address to
bind. The same settings can always be given as `GENBOT_SERVICE__HOST` (the
double-underscore spelling every setting has), which no Service can produce.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

log = logging.getLogger("genbot.config")

# Each shape of name Kubernetes uses, with the shape of value it gives it: a name of
# that shape holding anything else is a typo of a setting, reported as such.
_SHAPES = [(re.compile(r"^GENBOT(?:_[A-Z0-9_]+?)?_PORT$"), re.compile(r"^(?:tcp|udp|sctp)://\S+$")),
           (re.compile(r"^GENBOT(?:_[A-Z0-9_]+?)?_PORT_\d+_(?:TCP|UDP|SCTP)$"),
            re.compile(r"^(?:tcp|udp|sctp)://\S+$")),
           (re.compile(r"^GENBOT(?:_[A-Z0-9_]+?)?_PORT_\d+_(?:TCP|UDP|SCTP)_ADDR$"),
            re.compile(r"^[0-9A-Fa-f:.]+$")),
           (re.compile(r"^GENBOT(?:_[A-Z0-9_]+?)?_PORT_\d+_(?:TCP|UDP|SCTP)_PORT$"),
            re.compile(r"^\d+$")),
           (re.compile(r"^GENBOT(?:_[A-Z0-9_]+?)?_PORT_\d+_(?:TCP|UDP|SCTP)_PROTO$"),
            re.compile(r"^(?:tcp|udp|sctp)$")),
           (re.compile(r"^GENBOT(?:_[A-Z0-9_]+?)?_SERVICE_HOST$"), re.compile(r"^[0-9A-Fa-f:.]+$")),
           (re.compile(r"^GENBOT(?:_[A-Z0-9_]+?)?_SERVICE_PORT(?:_[A-Z0-9_]+)?$"),
            re.compile(r"^\d+$"))]
_ADDRESS = re.compile(r"^(?:tcp|udp|sctp)://", re.IGNORECASE)
_said: set[str] = set()  # each variable is spoken of once per process


def looks_like_link(var: str, value: str) -> bool:
    """`var` = `value` has the shape of a variable Kubernetes sets for a Service."""
    return any(name.match(var) and shape.match(value) for name, shape in _SHAPES)


def set_by_cluster(var: str, env: Mapping[str, str]) -> bool:
    """A service-link-shaped `var` that is also a genbot setting: set by the cluster if
    a Service named genbot left its signature, or if the value is a link address."""
    return bool(_ADDRESS.match(env.get("GENBOT_PORT", "")) or _ADDRESS.match(env.get(var, "")))


def ignored(var: str, env: Mapping[str, str], *, setting: bool) -> bool:
    """Whether `var` is to be ignored as a service link, saying so once: at debug for one
    that is no setting, as a warning for one that would have changed a setting."""
    if not looks_like_link(var, env[var]) or (setting and not set_by_cluster(var, env)):
        return False
    if var not in _said:
        _said.add(var)
        if setting:
            section, key = var.removeprefix("GENBOT_").lower().split("_", 1)
            log.warning("environment %s=%s ignored: Kubernetes sets it for a Service named "
                        "genbot (enableServiceLinks); give [%s] %s in the config file or as "
                        "%s", var, env[var], section, key,
                        f"GENBOT_{section.upper()}__{key.upper()}")
        else:
            log.debug("environment %s ignored: a Kubernetes service link", var)
    return True
