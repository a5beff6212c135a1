"""A Hugging Face Hub on loopback for testing `genbot models pull`: the HTTP routes, headers and
error codes that huggingface_hub 2.4.0 reads, a "CDN" for LFS files, a plain static file route for
direct-URL pulls, and fault switches (cut a body, corrupt bytes, throttle).

Written from the installed huggingface_hub 2.4.0 source (shapes reproduced, code not copied):
- constants.py: ENDPOINT = os.getenv("HF_ENDPOINT") and HUGGINGFACE_CO_URL_TEMPLATE
  (ENDPOINT + "/{repo_id}/resolve/{revision}/{filename}") are computed once, at import;
  utils/_http.py's _HUB_ORIGINS (whose redirects are followed with the token) likewise.
- hf_api.py: model_info GETs /api/models/{repo_id} or /api/models/{repo_id}/revision/{rev} with
  the revision quote(safe="") (so "refs/pr/1" arrives as refs%2Fpr%2F1), `blobs=true` when
  files_metadata=True; siblings are {rfilename, size?, blobId?, lfs?: {sha256, size, pointerSize}}.
  repo_info(model) is model_info. list_repo_tree GETs /api/models/{repo_id}/tree/{rev}[/{path}]
  (rev and path both quote(safe="")) with params recursive / expand ("true"/"false"), follows a
  `Link: <absolute url>; rel="next"` header (utils/_pagination.py), and reads entries
  {type: file|directory, path, oid, size, lfs?: {oid, size, pointerSize}, lastCommit?,
  securityFileStatus?}. list_repo_files is list_repo_tree(recursive=True). get_paths_info POSTs
  a form (paths=..., expand=...) to /api/models/{repo_id}/paths-info/{rev}; auth_check GETs
  /api/models/{repo_id}/auth-check.
- file_download.py: hf_hub_url formats the template with quote(revision, safe="") and
  quote(filename), then swaps constants.ENDPOINT for `endpoint=` when given. get_hf_file_metadata
  HEADs that URL (Accept-Encoding: identity) following redirects only while they stay on the same
  origin or a Hub origin (_httpx2_follow_hub_redirects_with_backoff); it reads X-Repo-Commit
  (required), X-Linked-Etag else ETag (required; W/ and quotes stripped), Location else the final
  URL, X-Linked-Size else Content-Length (not on a redirect). A redirect to another origin is not
  followed: the download then GETs the Location directly and drops the Authorization header.
  http_get streams the body; on httpx ConnectError / Timeout / RemoteProtocolError (a body cut
  short) it sleeps 1 s and retries up to 5 times with `Range: bytes=<got>-`, <got> counting only
  the 10 MiB chunks (DOWNLOAD_CHUNK_SIZE) already yielded, so a smaller file restarts from 0; a
  200 to a Range request restarts the file; the final size must equal the expected size; the
  sha256 is never checked (a corrupt body of the right length is accepted). No Xet headers
  (X-Xet-Hash, Link rel=xet-auth) are served, so hf_xet is never used.
- utils/_http.py hf_raise_for_status: X-Error-Code RevisionNotFound -> RevisionNotFoundError,
  EntryNotFound -> RemoteEntryNotFoundError (an EntryNotFoundError), GatedRepo -> GatedRepoError
  (any status), RepoNotFound -> RepositoryNotFoundError (so is any 401 on /api/{type}s/... unless
  X-Error-Message is "Invalid credentials in Authorization header"); X-Error-Message and a JSON
  body's "error" are added to the message. hf_hub_download re-raises a HEAD's
  RepositoryNotFoundError / GatedRepoError / any 401, raises RevisionNotFound / EntryNotFound at
  once, and turns other errors into LocalEntryNotFoundError when nothing is cached.

The real Hub (huggingface.js issue #945; error texts seen in user reports): model info and the
tree of a gated repo are public; /resolve of its files answers 401 without a token ("... Please
log in.") and 403 with a token that has no access, both X-Error-Code: GatedRepo. A missing or
private repo answers 401 RepoNotFound to an anonymous caller and 404 to an authenticated one.
LFS files redirect (302) to a CDN on another host, with X-Linked-Etag / X-Linked-Size /
X-Repo-Commit on the redirect itself. Here the CDN is a second port of the same server, so it is
another origin exactly as the real one is: the client does not follow the HEAD's redirect, reads
the metadata from the 302, and fetches the CDN without the token.

Pointing huggingface_hub at the fake (what genbot must do): HF_ENDPOINT only counts when set
before huggingface_hub is first imported (a subprocess with it in its environment works; an
in-process monkeypatch.setenv does not). In-process, pass `endpoint=` everywhere: HfApi(endpoint=),
hf_hub_download(endpoint=), snapshot_download(endpoint=), hf_hub_url(endpoint=) all honour it.
Patching huggingface_hub.constants.ENDPOINT alone is not enough: HfApi() reads it at construction,
but hf_hub_url (hence hf_hub_download) formats HUGGINGFACE_CO_URL_TEMPLATE, also fixed at import.
So genbot should read os.environ.get("HF_ENDPOINT") at call time and pass it as `endpoint=`.
Same for the cache: pass cache_dir= / local_dir= rather than relying on HF_HUB_CACHE.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from aiohttp import web

# The suffixes the Hub's default .gitattributes stores in LFS (a subset, plus what the brief names).
LFS_SUFFIXES = (".safetensors", ".bin", ".ckpt", ".pth", ".pt", ".onnx", ".msgpack", ".gguf",
                ".h5")
_FLIP = bytes(b ^ 0xFF for b in range(256))  # corrupt: every byte changes, the length does not
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_DATE = "2024-01-01T00:00:00.000Z"
# What a hostile or broken mirror may list: each must be refused before it becomes a path.
HOSTILE_NAMES = ("../x.json", "/abs.json", "unet/../../x.safetensors", "unet/x\0.json",
                 "../../outside/model.safetensors")


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob: what the Hub calls blobId / oid and sends as a regular file's
    ETag."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class HubFile:
    """One file of one commit; an LFS file's git blob is its pointer, its ETag its sha256."""

    data: bytes
    lfs: bool
    sha256: str = field(init=False)
    pointer: bytes = field(init=False)

    def __post_init__(self) -> None:
        self.sha256 = hashlib.sha256(self.data).hexdigest()
        self.pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\n"
                        f"size {len(self.data)}\n").encode()

    @property
    def blob_id(self) -> str:
        return git_blob_sha1(self.pointer if self.lfs else self.data)

    @property
    def etag(self) -> str:
        return f'"{self.sha256 if self.lfs else self.blob_id}"'


@dataclass
class HubRepo:
    refs: dict[str, str] = field(default_factory=dict)  # branch -> commit sha
    commits: dict[str, dict[str, HubFile]] = field(default_factory=dict)  # sha -> path -> file

    def resolve(self, revision: str) -> str | None:
        """A branch name, or a full commit sha, as the Hub accepts both as a revision."""
        if revision in self.refs:
            return self.refs[revision]
        return revision if revision in self.commits else None


class FakeHub:
    """The Hub's HTTP API on 127.0.0.1, for `async with FakeHub() as hub` or, from synchronous
    code (huggingface_hub is synchronous), `with FakeHub.running() as hub`.

    Knobs, read per request so a test may change them at any time:
    - tokens: Bearer tokens that may read gated repos (another token gets 403, none gets 401).
    - gated: repo ids whose files need such a token (add_repo(gated=True) adds to it).
    - cut_after_bytes: the next file body (GET of resolve / CDN / static) longer than this is cut
      (connection closed mid-body) after this many bytes; after `cut_times` such bodies (default
      1) it is reset to None. huggingface_hub's http_get retries a cut body by itself (5 times).
    - corrupt: file paths (repo paths, or static names) served with every byte flipped, same
      length, while metadata keeps the true sha256 / ETag / size.
    - slow_bytes_per_s: throttle every file body.
    - page_size: tree entries per page (the Hub: 1000, 50 with expand), for pagination tests.
    - hostile: a hostile or broken mirror. Its file list may hold any name (add_hostile_repo:
      HOSTILE_NAMES), and it answers whatever path a listed name leads a client to: a request
      no route matches is served the listed file of the same base name (a client normalises
      `resolve/<sha>/../x.json` to `resolve/x.json`; this mirror serves x.json there too).
    Recorder: requests, (method, decoded path, Range header, Authorization header) per request.
    """

    def __init__(self) -> None:
        self.repos: dict[str, HubRepo] = {}
        self.statics: dict[str, bytes] = {}
        self.tokens: set[str] = set()
        self.gated: set[str] = set()
        self.cut_after_bytes: int | None = None
        self.cut_times = 1
        self.corrupt: set[str] = set()
        self.slow_bytes_per_s: float | None = None
        self.page_size: int | None = None
        self.hostile = False
        self.requests: list[tuple[str, str, str | None, str | None]] = []
        self.url = ""  # http://127.0.0.1:PORT, set by start()
        self.cdn_url = ""  # the CDN: another port, so another origin, as on the real Hub
        self._runner: web.AppRunner | None = None
        self._counter = itertools.count(1)

    # -- content -------------------------------------------------------------------------------

    def add_repo(self, repo_id: str, files: dict[str, bytes], *, revision: str = "main",
                 gated: bool = False, lfs: set[str] | None = None) -> str:
        """Commit `files` as the whole tree of branch `revision` (a new commit each call; older
        commits stay reachable by sha) and return the commit sha."""
        repo = self.repos.setdefault(repo_id, HubRepo())
        tree = {path: HubFile(data, path.endswith(LFS_SUFFIXES) or path in (lfs or set()))
                for path, data in files.items()}
        seed = f"{repo_id}\0{revision}\0{next(self._counter)}\0"
        seed += "".join(f"{p}\0{f.blob_id}\0" for p, f in sorted(tree.items()))
        sha = hashlib.sha1(seed.encode()).hexdigest()
        repo.commits[sha] = tree
        repo.refs[revision] = sha
        if gated:
            self.gated.add(repo_id)
        return sha

    def add_hostile_repo(self, repo_id: str, name: str, data: bytes = b'{"evil": true}') -> str:
        """A small diffusers folder whose file list also names `name` (one of HOSTILE_NAMES,
        or any other), served as a hostile mirror would (`hostile`); the commit sha."""
        self.hostile = True
        return self.add_repo(repo_id, {
            "model_index.json": b'{"_class_name": "StableDiffusionPipeline"}',
            "unet/config.json": b'{"sample_size": 8}', name: data})

    def add_static(self, name: str, data: bytes) -> str:
        """Serve `data` at /static/{name} (any web server, for direct-URL pulls); its URL."""
        self.statics[name] = data
        return f"{self.url}/static/{quote(name)}"

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        for attr in ("url", "cdn_url"):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            await web.SockSite(self._runner, sock).start()
            setattr(self, attr, f"http://127.0.0.1:{sock.getsockname()[1]}")

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeHub:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @classmethod
    @contextlib.contextmanager
    def running(cls) -> Iterator[FakeHub]:
        """The server on its own event loop in a daemon thread, for synchronous callers."""
        hub = cls()
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="fakehub", daemon=True)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(hub.start(), loop).result(10)
            yield hub
        finally:
            asyncio.run_coroutine_threadsafe(hub.close(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()

    # -- routing -------------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        """One handler parsing the raw path, since revisions and tree paths arrive with %2F that
        aiohttp's decoded path would merge into the repo id."""
        self.requests.append((request.method, request.path, request.headers.get("Range"),
                              request.headers.get("Authorization")))
        parts = [unquote(p) for p in request.rel_url.raw_path.strip("/").split("/")]
        method = request.method
        if parts[0] == "cdn" and len(parts) >= 3 and method in ("GET", "HEAD"):
            return await self._cdn(request, parts[1], "/".join(parts[2:]))
        if parts[0] == "static" and len(parts) >= 2 and method in ("GET", "HEAD"):
            name = "/".join(parts[1:])
            if name not in self.statics:
                return web.Response(status=404, text="Not Found")
            data = self.statics[name]
            headers = {"ETag": f'"{hashlib.md5(data).hexdigest()}"'}
            return await self._body(request, data, name, headers)
        if parts[:2] == ["api", "models"] and len(parts) >= 3:
            repo_id, rest = self._split_repo(parts[2:])
            return await self._api(request, repo_id, rest)
        for i in (1, 2):
            if len(parts) > i + 2 and parts[i] == "resolve" and method in ("GET", "HEAD"):
                return await self._resolve(request, "/".join(parts[:i]), parts[i + 1],
                                           "/".join(parts[i + 2:]))
        return await self._anything(request, parts[-1]) if self.hostile else \
            web.Response(status=404, text="Not Found")

    async def _anything(self, request: web.Request, base: str) -> web.StreamResponse:
        """A hostile mirror's answer to a path no route matches: the listed file of that
        base name, as if the path were right."""
        for repo in self.repos.values():
            for sha, files in repo.commits.items():
                for path, f in files.items():
                    if path.rsplit("/", 1)[-1] == base:
                        return await self._body(request, f.data, path,
                                                {"X-Repo-Commit": sha, "ETag": f.etag})
        return web.Response(status=404, text="Not Found")

    def _split_repo(self, parts: list[str]) -> tuple[str, list[str]]:
        """`namespace/name` unless only `name` is a repo or the second segment is a sub-route."""
        subroutes = {"revision", "tree", "paths-info", "auth-check"}
        if len(parts) >= 2 and "/".join(parts[:2]) in self.repos:
            return "/".join(parts[:2]), parts[2:]
        if parts[0] in self.repos or len(parts) == 1 or parts[1] in subroutes:
            return parts[0], parts[1:]
        return "/".join(parts[:2]), parts[2:]

    async def _api(self, request: web.Request, repo_id: str, rest: list[str]) -> web.Response:
        if not rest and request.method == "GET":
            return self._model_info(request, repo_id, "main")
        if len(rest) == 2 and rest[0] == "revision" and request.method == "GET":
            return self._model_info(request, repo_id, rest[1])
        if len(rest) >= 2 and rest[0] == "tree" and request.method == "GET":
            return self._tree(request, repo_id, rest[1], "/".join(rest[2:]))
        if len(rest) == 2 and rest[0] == "paths-info" and request.method == "POST":
            form = await request.post()
            return self._paths_info(request, repo_id, rest[1], [str(p) for p in form.getall(
                "paths", [])], form.get("expand") == "true")
        if rest == ["auth-check"] and request.method == "GET":
            return self._access(request, repo_id, files=True) or web.json_response({})
        return web.Response(status=404, text="Not Found")

    # -- auth and errors -----------------------------------------------------------------------

    @staticmethod
    def _error(status: int, code: str | None, message: str,
               headers: dict[str, str] | None = None) -> web.Response:
        """The Hub's error shape: X-Error-Code / X-Error-Message, and {"error": ...} as JSON."""
        h = {"X-Error-Message": message, **(headers or {})}
        if code:
            h["X-Error-Code"] = code
        return web.json_response({"error": message}, status=status, headers=h)

    def _access(self, request: web.Request, repo_id: str, *, files: bool) -> web.Response | None:
        """None when allowed. A missing repo: 401 anonymous / 404 with a token (the Hub does not
        tell a private repo from a missing one). A gated repo's files: 401 / 403 GatedRepo."""
        auth = request.headers.get("Authorization")
        token = auth.removeprefix("Bearer ").strip() if auth else None
        if repo_id not in self.repos:
            return self._error(404 if token else 401, "RepoNotFound", "Repository not found")
        if files and repo_id in self.gated and token not in self.tokens:
            if token:
                return self._error(403, "GatedRepo", f"Access to model {repo_id} is restricted "
                                   "and you are not in the authorized list. Visit "
                                   f"{self.url}/{repo_id} to ask for access.")
            return self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You "
                               "must have access to it and be authenticated to access it. "
                               "Please log in.")
        return None

    def _commit(self, repo_id: str, revision: str) -> tuple[str | None, web.Response | None]:
        sha = self.repos[repo_id].resolve(revision)
        if sha is None:
            return None, self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return sha, None

    # -- API -----------------------------------------------------------------------------------

    def _model_info(self, request: web.Request, repo_id: str, revision: str) -> web.Response:
        denied = self._access(request, repo_id, files=False)
        if denied:
            return denied
        sha, missing = self._commit(repo_id, revision)
        if missing or sha is None:
            return missing or web.Response(status=500)
        blobs = request.query.get("blobs") == "true"
        siblings: list[dict[str, Any]] = []
        for path, f in sorted(self.repos[repo_id].commits[sha].items()):
            sib: dict[str, Any] = {"rfilename": path}
            if blobs:
                sib.update(size=len(f.data), blobId=f.blob_id)
                if f.lfs:
                    sib["lfs"] = {"sha256": f.sha256, "size": len(f.data),
                                  "pointerSize": len(f.pointer)}
            siblings.append(sib)
        return web.json_response({
            "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24], "id": repo_id,
            "modelId": repo_id, "author": repo_id.split("/")[0] if "/" in repo_id else None,
            "sha": sha, "lastModified": _DATE, "createdAt": _DATE, "private": False,
            "gated": "manual" if repo_id in self.gated else False, "disabled": False,
            "downloads": 0, "likes": 0, "tags": [], "siblings": siblings})

    def _entry(self, repo_id: str, sha: str, path: str, expand: bool) -> dict[str, Any] | None:
        """A tree entry as list_repo_tree / get_paths_info read it; None when absent."""
        files = self.repos[repo_id].commits[sha]
        extra: dict[str, Any] = {}
        if expand:
            extra["lastCommit"] = {"id": sha, "title": "Upload", "date": _DATE}
        if path in files:
            f = files[path]
            entry = {"type": "file", "oid": f.blob_id, "size": len(f.data), "path": path}
            if f.lfs:
                entry["lfs"] = {"oid": f.sha256, "size": len(f.data), "pointerSize": len(f.pointer)}
            if expand:
                extra["securityFileStatus"] = {"status": "safe", "avScan": {"virusFound": False,
                                               "virusNames": None}, "pickleImportScan": None}
            return {**entry, **extra}
        if any(p.startswith(path + "/") for p in files):
            oid = hashlib.sha1(f"tree\0{sha}\0{path}".encode()).hexdigest()
            return {"type": "directory", "oid": oid, "size": 0, "path": path, **extra}
        return None

    def _tree(self, request: web.Request, repo_id: str, revision: str, path: str) -> web.Response:
        denied = self._access(request, repo_id, files=False)
        if denied:
            return denied
        sha, missing = self._commit(repo_id, revision)
        if missing or sha is None:
            return missing or web.Response(status=500)
        recursive = request.query.get("recursive") == "true"
        expand = request.query.get("expand") == "true"
        base = self._entry(repo_id, sha, path, False) if path else {"type": "directory"}
        if base is None or base["type"] != "directory":
            return self._error(404, "EntryNotFound",
                               f"{path} does not exist on \"{revision}\"",
                               {"X-Repo-Commit": sha})
        names: set[str] = set()
        prefix = f"{path}/" if path else ""
        for p in self.repos[repo_id].commits[sha]:
            if not p.startswith(prefix):
                continue
            segs = p[len(prefix):].split("/")
            for depth in range(1, len(segs) + 1 if recursive else 2):
                names.add(prefix + "/".join(segs[:depth]))
        entries = [self._entry(repo_id, sha, n, expand) for n in sorted(names)]
        size = self.page_size or (50 if expand else 1000)
        start = int(request.query.get("cursor", "0"))
        headers = {}
        if start + size < len(entries):
            query = {**request.query, "cursor": str(start + size)}
            qs = "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
            headers["Link"] = f'<{self.url}{request.rel_url.raw_path}?{qs}>; rel="next"'
        return web.json_response(entries[start:start + size], headers=headers)

    def _paths_info(self, request: web.Request, repo_id: str, revision: str, paths: list[str],
                    expand: bool) -> web.Response:
        denied = self._access(request, repo_id, files=False)
        if denied:
            return denied
        sha, missing = self._commit(repo_id, revision)
        if missing or sha is None:
            return missing or web.Response(status=500)
        entries = [self._entry(repo_id, sha, p.strip("/"), expand) for p in paths]
        return web.json_response([e for e in entries if e is not None])

    # -- files ---------------------------------------------------------------------------------

    async def _resolve(self, request: web.Request, repo_id: str, revision: str,
                       path: str) -> web.StreamResponse:
        """A regular file is served here (ETag: its git blob sha1); an LFS file redirects (302)
        to the CDN, the metadata on the redirect itself, as the Hub does."""
        denied = self._access(request, repo_id, files=True)
        if denied:
            return denied
        sha, missing = self._commit(repo_id, revision)
        if missing or sha is None:
            return missing or web.Response(status=500)
        f = self.repos[repo_id].commits[sha].get(path)
        if f is None:
            return self._error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": sha})
        headers = {"X-Repo-Commit": sha, "ETag": f.etag, "Accept-Ranges": "bytes"}
        if not f.lfs:
            return await self._body(request, f.data, path, headers)
        location = f"{self.cdn_url}/cdn/{sha}/{quote(path)}"
        headers.update({"X-Linked-Etag": f.etag, "X-Linked-Size": str(len(f.data)),
                        "Location": location})
        return web.Response(status=302, text=f"Found. Redirecting to {location}",
                            headers=headers)

    async def _cdn(self, request: web.Request, sha: str, path: str) -> web.StreamResponse:
        """The signed-URL CDN: no auth, content by commit and path, ETag the sha256."""
        for repo in self.repos.values():
            f = repo.commits.get(sha, {}).get(path)
            if f is not None:
                return await self._body(request, f.data, path, {"ETag": f'"{f.sha256}"'})
        return web.Response(status=404, text="Not Found")

    async def _body(self, request: web.Request, data: bytes, path: str,
                    headers: dict[str, str]) -> web.StreamResponse:
        """Serve a file: Range (206 / 416), the corrupt / cut / throttle knobs."""
        total = len(data)
        start, end, status = 0, total, 200
        m = _RANGE.fullmatch(request.headers.get("Range", "").strip())
        if m and (m[1] or m[2]):
            if m[1]:
                start, end = int(m[1]), min(int(m[2]) + 1, total) if m[2] else total
            else:
                start = max(total - int(m[2]), 0)
            if start >= total or (m[1] and m[2] and int(m[2]) < start):
                return web.Response(status=416, headers={"Content-Range": f"bytes */{total}"})
            status = 206
        name = path.rsplit("/", 1)[-1]
        headers = {**headers, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream",
                   "Content-Disposition": f"inline; filename*=UTF-8''{quote(name)}; "
                                          f'filename="{name}";'}
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{total}"
        if path in self.corrupt:
            data = data.translate(_FLIP)
        body = data[start:end]
        if request.method == "HEAD":
            return web.Response(status=status, headers={**headers,
                                                        "Content-Length": str(len(body))})
        resp = web.StreamResponse(status=status, headers=headers)
        resp.content_length = len(body)
        await resp.prepare(request)
        cut = self.cut_after_bytes
        if cut is not None and len(body) > cut:
            self.cut_times -= 1
            if self.cut_times <= 0:
                self.cut_after_bytes, self.cut_times = None, 1
            body = body[:cut]
        else:
            cut = None
        rate = self.slow_bytes_per_s
        step = max(1, int(rate / 20)) if rate else 1 << 16
        for i in range(0, len(body), step):
            if rate:
                await asyncio.sleep(step / rate)  # before the chunk: a body takes len / rate
            await resp.write(body[i:i + step])
        if cut is not None:
            assert request.transport is not None
            request.transport.close()  # flushes what was written, then an abrupt EOF
            return resp
        await resp.write_eof()
        return resp
