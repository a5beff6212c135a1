"""Where webhooks go: the [[webhooks]] endpoints, and the callback_url a submission names.

A configured endpoint is the operator's choice and may be any address. A callback URL is
typed by whoever submits, so it passes the outbound guard (bot.outbound.check_callback
when it is named; every connection again) unless its host is in [webhook]
callback_allowlist. Callbacks are signed with [webhook] callback_secret.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from bot.settings import (
    EVENTS,
    SECRET_PREFIX,
    WebhookConfig,
    WebhooksConfig,
    endpoint_id,
    kept_secret,
)
from storage.config import Config


@dataclass(frozen=True)
class Endpoint:
    id: str
    url: str
    secret: str  # whsec_…
    events: tuple[str, ...]
    kind: str  # config | callback
    allow_private: bool  # may its host resolve to a private address
    description: str = ""


def new_secret() -> str:
    """A Standard Webhooks secret: whsec_ and base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


class Endpoints:
    def __init__(self, config: Config):
        self.settings = config[WebhookConfig]
        self.configured = {e.id: Endpoint(e.id, e.url, e.secret, e.events, "config", True,
                                          e.description)
                           for e in config[WebhooksConfig].entries}
        self.callback_secret = self.settings.callback_secret or \
            kept_secret(config.data_dir / "callback.key", new_secret)
        self.allowlist = {h.lower() for h in self.settings.callback_allowlist}

    def callback(self, url: str) -> Endpoint:
        host = (urlsplit(url).hostname or "").lower()
        return Endpoint(endpoint_id(url, "cb"), url, self.callback_secret, EVENTS, "callback",
                        host in self.allowlist)

    def interested(self, event_type: str, callback: str | None) -> list[Endpoint]:
        """The endpoints an event goes to: configured ones that asked for its type, and
        the batch's own callback."""
        found = [e for e in self.configured.values() if event_type in e.events]
        return found + ([self.callback(callback)] if callback else [])

    def get(self, endpoint_id: str, url: str | None = None) -> Endpoint | None:
        """An endpoint by id: a configured one, or the callback whose URL a delivery
        carries. None: no longer configured."""
        if endpoint_id in self.configured:
            return self.configured[endpoint_id]
        if url and self.callback(url).id == endpoint_id:
            return self.callback(url)
        return None
