"""`genbot models pull`: a model from the Hugging Face Hub (or a mirror), or from a URL,
into the models folder — resumable, verified, offline afterwards.

huggingface_hub speaks the hub's protocol here: the repo's files at a revision, their
sizes and hashes (`model_info(files_metadata=True)`), tokens (HF_TOKEN, or a saved login)
and mirrors (HF_ENDPOINT, read when the command runs and passed as `endpoint=`: the
library reads the variable only once, at import). The bytes are fetched here, into a
`.partial` file kept beside the target: a pull cut by Ctrl-C or a dead mirror continues
where it stopped on the next run (HTTP Range), where huggingface_hub 2.x would start
again. Each file is checked against the hub's sha256 (LFS files) or git blob id (the
rest), or `--sha256` for a URL, before it takes its name; a wrong one is deleted.
Nothing here loads torch.

The file names a hub or mirror lists are not trusted: every one is checked
(storage.names) before the plan is made, and every target (and its `.partial`) again on
disk before anything is written, so a hostile or broken mirror (`HF_ENDPOINT`) cannot
write outside the model's folder — a name such as `../x.json`, `/abs.json`, one with a
NUL, or one a symlink under the folder would lead out, refuses the pull in one line
naming the file and where it came from.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

import aiohttp

from storage.names import UnsafeName, checked, inside, shown

DEFAULT_ENDPOINT = "https://huggingface.co"
CHUNK = 1 << 20
TRIES = 3  # per file and run: a blip is ridden out here; more, and the next run resumes
# In a diffusers folder: configs, tokenizers and weights, safetensors where there are; not
# the other copies of the same weights (flax, ONNX, TF, whole-model .ckpt files).
SKIP = re.compile(r"\.(msgpack|onnx|onnx_data|pb|h5|ckpt|pt|pth)$|(^|/)\.gitattributes$")
SHA = re.compile(r"[0-9a-f]{40}")  # a git commit id, as the hub answers it
WEIGHTS = (".safetensors", ".bin", ".ckpt", ".pt", ".pth")


class PullError(Exception):
    """What went wrong and what to do, in one line: whatever a server put in it (an error
    text, a name) has its control characters escaped, so it cannot forge terminal lines."""

    def __init__(self, message: str):
        super().__init__(shown(message, limit=2000))


@dataclass(frozen=True)
class Remote:
    """One file to fetch: where from, where to, and what it must hash to."""
    url: str
    path: str  # relative to the target folder
    size: int | None
    sha256: str | None = None
    git_sha1: str | None = None  # a small (non-LFS) file's git blob id
    repo: str | None = None  # the hub repo it is from, for messages
    source: str = ""  # who named the file ("the file list of org/model at URL"), for messages


Progress = Callable[[str, int, int | None], None]  # file, bytes so far, total


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def token() -> str | None:
    from huggingface_hub import get_token
    return os.environ.get("HF_TOKEN") or get_token()


def plan_repo(repo_id: str, revision: str | None, file: str | None,
              variant: str | None = None) -> tuple[str, list[Remote]]:
    """The commit a revision names and the files to fetch: `file` alone, or a diffusers
    folder's configs, tokenizers and weights (a variant such as fp16 only when asked)."""
    from huggingface_hub import HfApi, hf_hub_url
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    where = endpoint()
    try:
        with _online():
            info = HfApi(endpoint=where, token=token()).model_info(
                repo_id, revision=revision, files_metadata=True)
    except GatedRepoError:
        raise PullError(gated(repo_id)) from None
    except RepositoryNotFoundError:
        raise PullError(f"no model repo {repo_id} at {where} (a private one needs HF_TOKEN "
                        "set to a token that may read it)") from None
    except RevisionNotFoundError:
        raise PullError(f"{repo_id} has no revision {revision!r}") from None
    except EntryNotFoundError as e:
        raise PullError(f"{repo_id}: {e}") from None
    except (HfHubHTTPError, OSError) as e:
        raise PullError(unreachable(where, e)) from None
    if info.sha is not None and not (isinstance(info.sha, str) and SHA.fullmatch(info.sha)):
        raise PullError(f"{where} answered an odd commit id for {repo_id}: "
                        f"{shown(repr(info.sha))}")
    commit = info.sha or revision or "main"
    source = listed_by(repo_id, where)
    files = {}
    for sibling in info.siblings or []:
        name = sibling.rfilename
        if not isinstance(name, str):
            raise PullError(f"{source} lists a file without a name ({shown(repr(name))})")
        _check(name, source)  # every name, whether chosen or not: the listing is suspect
        files[name] = sibling
    if file:
        if file not in files:
            raise PullError(f"{repo_id} has no file {file!r}; it has: "
                            + ", ".join(sorted(files)[:20]))
        chosen = [file]
    elif "model_index.json" in files:
        chosen = _diffusers_files(list(files), variant)
    elif "config.json" in files:  # one diffusers model (a ControlNet): its folder is the root
        chosen = _diffusers_files(list(files), variant, depth=1)
    else:
        singles = [f for f in files if "/" not in f and f.endswith(".safetensors")]
        if len(singles) != 1:
            raise PullError(f"{repo_id} is not a diffusers folder: name one file with --file "
                            f"({', '.join(singles) or 'it has no .safetensors file'})")
        chosen = singles
    out = []
    for name in chosen:
        s = files[name]
        lfs = s.lfs
        out.append(Remote(
            hf_hub_url(repo_id, name, revision=commit, endpoint=where), name,
            s.size if s.size is not None else (lfs.size if lfs else None),
            sha256=lfs.sha256 if lfs else None, git_sha1=None if lfs else s.blob_id,
            repo=repo_id, source=source))
    return commit, out


def listed_by(repo_id: str, where: str) -> str:
    return f"the file list of {repo_id} at {where}"


def _check(name: str, source: str) -> None:
    try:
        checked(name, source)
    except UnsafeName as e:
        raise PullError(str(e)) from None


@contextlib.contextmanager
def _online() -> Iterator[None]:
    """A pull is the one time genbot goes online: HF_HUB_OFFLINE (set for the executor, or
    by people who run offline) must not stop what was asked for explicitly. The library
    reads the variable once, at import, into this constant."""
    from huggingface_hub import constants
    was = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = was


def _diffusers_files(names: list[str], variant: str | None, depth: int = 2) -> list[str]:
    """A pipeline's files (depth 2: model_index.json and its component folders) or one
    model's (depth 1: the root). Of a weights file's copies: the variant if asked for,
    else the plain one; .safetensors where there is one, .bin only where there is not."""
    present = set(names)
    chosen = []
    for name in sorted(names):
        path = PurePosixPath(name)
        if SKIP.search(name) or (len(path.parts) != depth and name != "model_index.json"):
            continue  # (whole-model files beside a pipeline's folders, nested extras)
        parts = path.name.split(".")
        has_variant = len(parts) > 2 and path.suffix in WEIGHTS
        if has_variant and parts[-2] != variant:
            continue
        if variant and path.suffix in WEIGHTS and not has_variant and \
                path.with_name(f"{parts[0]}.{variant}{path.suffix}").as_posix() in present:
            continue  # the variant stands in for it
        chosen.append(name)
    # A folder's pickled weights where it has safetensors ones: the same weights (diffusers
    # names both alike; transformers writes pytorch_model.bin beside model.safetensors).
    safe = {PurePosixPath(n).parent for n in chosen if n.endswith(".safetensors")}
    return [n for n in chosen if PurePosixPath(n).parent not in safe
            or not (n.endswith(".bin") or n.endswith(".bin.index.json"))]


def plan_url(url: str, sha256: str | None) -> list[Remote]:
    name = PurePosixPath(urlparse(url).path).name
    if not name:
        raise PullError(f"{url}: no file name in the address")
    source = f"the address {url}"
    _check(name, source)
    return [Remote(url, name, None, sha256=sha256.lower() if sha256 else None, source=source)]


async def fetch(remotes: list[Remote], into: Path, progress: Progress,
                auth: str | None = None) -> list[Path]:
    """Every file, resumed from its `.partial` and verified; the paths written. Every
    target is checked on disk first (a symlink already under `into` that would lead a
    name out refuses the pull), so a refusal writes nothing."""
    targets = [_target(into, r) for r in remotes]
    timeout = aiohttp.ClientTimeout(total=None, connect=30, sock_read=120)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        return [await _fetch(http, r, target, progress, auth)
                for r, target in zip(remotes, targets, strict=True)]


def _target(into: Path, r: Remote) -> Path:
    """Where `r` goes under `into`, it and its `.partial` both checked against what is
    on disk; the path as asked for (`into / name`), once it is known to stay inside."""
    source = r.source or f"the address {r.url}"
    try:
        inside(into, r.path, source)
        inside(into, r.path + ".partial", source)
    except UnsafeName as e:
        raise PullError(str(e)) from None
    return into.joinpath(*PurePosixPath(r.path).parts)


async def _fetch(http: aiohttp.ClientSession, r: Remote, target: Path, progress: Progress,
                 auth: str | None) -> Path:
    """One file; a file system's refusal (a name that clashes with a folder, a full disk)
    is one line too, and leaves no `.partial` of this run behind."""
    partial = target.with_name(target.name + ".partial")
    existed = partial.exists()
    try:
        return await _fetch_into(http, r, target, partial, progress, auth)
    except OSError as e:
        if not existed:
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
        raise PullError(f"{r.path}: cannot write {target}: {e.strerror or e}") from None


async def _fetch_into(http: aiohttp.ClientSession, r: Remote, target: Path, partial: Path,
                      progress: Progress, auth: str | None) -> Path:
    if target.is_file() and (r.size is None or target.stat().st_size == r.size) and \
            (r.sha256 is None and r.git_sha1 is None or _verified(r, target)):
        progress(r.path, target.stat().st_size, target.stat().st_size)
        return target  # pulled before
    target.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, TRIES + 1):
        have = partial.stat().st_size if partial.exists() else 0
        if r.size is not None and have > r.size:
            partial.unlink()
            have = 0
        if r.size is not None and have == r.size:
            break
        try:
            await _stream(http, r, partial, have, progress, auth)
            break
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as e:
            got = partial.stat().st_size if partial.exists() else 0
            if attempt == TRIES:
                total = f" of {_mb(r.size)}" if r.size else ""
                raise PullError(f"{r.path}: the download stopped after {_mb(got)}{total} "
                                f"({type(e).__name__}: {e}); run the same command again to "
                                "resume it") from None
            await asyncio.sleep(float(attempt))
    if r.size is not None and partial.stat().st_size != r.size:
        raise PullError(f"{r.path}: got {partial.stat().st_size} bytes, the hub says "
                        f"{r.size}; run the command again to resume it")
    if not await asyncio.to_thread(_verified, r, partial):
        partial.unlink()
        raise PullError(f"{r.path}: the file's sha256 does not match "
                        f"{'the hub' if r.git_sha1 or r.size else 'the one given'} "
                        f"({r.sha256 or r.git_sha1}); the damaged download was deleted — run "
                        "the command again, or try another mirror (HF_ENDPOINT)")
    partial.replace(target)
    return target


async def _stream(http: aiohttp.ClientSession, r: Remote, partial: Path, have: int,
                  progress: Progress, auth: str | None) -> None:
    headers = {"Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
    if auth:
        headers["Authorization"] = f"Bearer {auth}"  # (dropped on a redirect to a CDN)
    async with http.get(r.url, headers=headers) as resp:
        if resp.status == 416 and have:
            return  # nothing left: the partial file is whole
        if resp.status in (401, 403):
            raise PullError(gated(r.repo or r.url)
                            if "GatedRepo" in resp.headers.get("X-Error-Code", "")
                            else f"{r.url}: refused ({resp.status}); set HF_TOKEN to a token "
                                 "that may read it")
        if resp.status == 404:
            raise PullError(f"{r.url}: not found (404)")
        if resp.status >= 400:
            raise aiohttp.ClientResponseError(resp.request_info, resp.history,
                                              status=resp.status, message=resp.reason or "")
        if resp.status == 200:
            have = 0  # the server ignored the Range: start over
        total = r.size or ((resp.content_length or 0) + have) or None
        mode = "ab" if have else "wb"
        with partial.open(mode) as out:
            done = have
            async for chunk in resp.content.iter_chunked(CHUNK):
                out.write(chunk)
                done += len(chunk)
                progress(r.path, done, total)
            out.flush()
            os.fsync(out.fileno())


def _verified(r: Remote, path: Path) -> bool:
    if r.sha256:
        digest = hashlib.sha256()
    elif r.git_sha1:
        digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    else:
        return True
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest() == (r.sha256 or r.git_sha1)


def gated(repo: str) -> str:
    return (f"{repo} is gated: accept its licence on its page on the hub (signed in), then "
            "set HF_TOKEN to a read token of that account")


def unreachable(where: str, error: Exception) -> str:
    hint = "" if where != DEFAULT_ENDPOINT else \
        " (from mainland China set HF_ENDPOINT to a mirror, e.g. https://hf-mirror.com)"
    return f"cannot reach {where}: {type(error).__name__}: {error}{hint}"


def model_name(source: str) -> str:
    """A [models] name from a repo id or a file name: letters, digits, _ and -."""
    stem = PurePosixPath(urlparse(source).path if "://" in source else source).name
    stem = re.sub(r"\.(safetensors|ckpt|bin|gguf|onnx)$", "", stem)
    return re.sub(r"[^A-Za-z0-9_-]+", "_", stem).strip("_-").lower() or "model"


def _mb(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:.1f} MB"
