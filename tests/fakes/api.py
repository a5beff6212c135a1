"""The REST API's side of a test: the service with its tokens, and an HTTP client on it."""

from __future__ import annotations

import json

import aiohttp

from tests.conftest import ROOT, executor_config
from tests.fakes.chat import ServiceWorld

ADMIN, ALICE, BOB, VIEWER, REVIEWER = (
    "admin-token-0000001", "alice-token-000001", "bob-token-00000001", "viewer-token-00001",
    "reviewer-token-0001")
BOTTLE = (ROOT / "examples" / "assets" / "bottle.png").read_bytes()


def api_config(tmp_path, demo_models, tokens: tuple[str, ...] = (),
               webhooks: list[dict] | None = None, i18n: dict | None = None,
               intake: dict | None = None, **chat):
    return executor_config(
        tmp_path / "data", demo_models, service={"port": 0}, i18n=i18n or {},
        api={"tokens": [f"{ADMIN}=ops", f"{ALICE}=alice", f"{BOB}=bob", f"{VIEWER}=vic",
                        f"{REVIEWER}=rex", *tokens]},
        chat={"admins": ["api:ops"], "viewers": ["api:vic"], "reviewers": ["api:rex"], **chat},
        # the test's own assets folder, not the working directory's
        intake={"assets_dir": str(tmp_path / "assets"), **(intake or {})},
        **({"webhooks": webhooks} if webhooks else {}))


class ApiWorld(ServiceWorld):
    async def __aenter__(self) -> ApiWorld:
        await super().__aenter__()
        # unsafe: keep cookies from an IP address (the service is on 127.0.0.1)
        self.http = aiohttp.ClientSession(self.url, cookie_jar=aiohttp.CookieJar(unsafe=True))
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.close()
        await super().__aexit__(*exc)

    async def call(self, method: str, path: str, token: str | None = ALICE, **kw):
        headers = kw.pop("headers", {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        async with self.http.request(method, f"/api/v1{path}", headers=headers, **kw) as r:
            body = await r.read()
            kind = r.content_type
            return r.status, (json.loads(body) if kind == "application/json" else body)

    async def submit(self, rows: int = 2, token: str = ALICE, key: str | None = None,
                     sku: bool = False, **fields):
        """`rows` of social_thumb's sheet (`sku`: with a sku column, which sales channels
        name their files by)."""
        form = aiohttp.FormData()
        form.add_field("template", fields.pop("template", "social_thumb"))
        for name, value in fields.items():
            for one in value if isinstance(value, list) else [value]:  # (a repeated field)
                form.add_field(name, str(one))
        sheet = "image,title\n" + "\n".join(f"bottle.png,Title {i}" for i in range(rows))
        if sku:
            sheet = "sku," + sheet.replace("\nbottle", "\nS{}" + ",bottle")
            sheet = sheet.format(*range(1, rows + 1))
        form.add_field("sheet", sheet.encode(), filename="sheet.csv")
        form.add_field("bottle", BOTTLE, filename="bottle.png")
        return await self.call("POST", "/batches", token, data=form,
                               headers={"Idempotency-Key": key} if key else {})
