"""The Hub fake driven by huggingface_hub 2.4.0 itself, as `genbot models pull` will drive it:
endpoint= on every call (HF_ENDPOINT is read once, at import), the cache in tmp, no token."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import httpx2
import pytest
from huggingface_hub import HfApi, hf_hub_download, hf_hub_url, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from tests.fakes.hub import FakeHub, git_blob_sha1

ROOT = Path(__file__).resolve().parent.parent
REPO = "org/tiny-sd"
WEIGHTS = bytes(range(256)) * 40  # 10240 bytes, an LFS file by its suffix
FILES = {"model_index.json": b'{"_class_name": "StableDiffusionPipeline"}',
         "unet/config.json": b'{"sample_size": 8}',
         "unet/diffusion_pytorch_model.safetensors": WEIGHTS}
UNET_W = "unet/diffusion_pytorch_model.safetensors"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    with FakeHub.running() as h:
        monkeypatch.setenv("HF_ENDPOINT", h.url)  # for subprocesses; in-process: endpoint=
        h.add_repo(REPO, FILES)
        yield h


def download(hub: FakeHub, tmp_path: Path, filename: str, *, repo_id: str = REPO,
             token: str | bool = False, revision: str | None = None) -> bytes:
    path = hf_hub_download(repo_id, filename, revision=revision, endpoint=hub.url,
                           cache_dir=tmp_path / "cache", token=token)
    return Path(path).read_bytes()


def test_model_info_gives_siblings_with_lfs_sha256(hub: FakeHub):
    api = HfApi(endpoint=hub.url, token=False)
    info = api.model_info(REPO, files_metadata=True)
    assert info.sha == hub.repos[REPO].refs["main"] and len(info.sha) == 40
    by_name = {s.rfilename: s for s in info.siblings}
    assert set(by_name) == set(FILES)
    w = by_name[UNET_W]
    assert w.lfs is not None and w.lfs.sha256 == hashlib.sha256(WEIGHTS).hexdigest()
    assert w.size == w.lfs.size == len(WEIGHTS)
    cfg = by_name["unet/config.json"]
    assert cfg.lfs is None and cfg.blob_id == git_blob_sha1(FILES["unet/config.json"])
    assert api.model_info(REPO).siblings[0].size is None  # sizes only with files_metadata
    # Revisions: another branch, one with a slash, and a commit sha itself.
    v2 = hub.add_repo(REPO, {"a.bin": b"2"}, revision="refs/pr/1")
    assert api.model_info(REPO, revision="refs/pr/1").sha == v2
    assert [s.rfilename for s in api.model_info(REPO, revision=v2).siblings] == ["a.bin"]
    assert api.repo_info(REPO, revision=info.sha).sha == info.sha
    assert api.list_repo_files(REPO, revision="refs/pr/1") == ["a.bin"]


def test_list_repo_tree_recursive_paginated_and_expanded(hub: FakeHub):
    api = HfApi(endpoint=hub.url, token=False)
    top = {e.path: type(e).__name__ for e in api.list_repo_tree(REPO)}
    assert top == {"model_index.json": "RepoFile", "unet": "RepoFolder"}
    hub.page_size = 2
    entries = list(api.list_repo_tree(REPO, recursive=True))
    assert sorted(e.path for e in entries) == sorted([*FILES, "unet"])
    assert len([r for r in hub.requests if "/tree/" in r[1]]) == 1 + 2  # Link: two pages of 2
    lfs = {e.path: e.lfs for e in entries if hasattr(e, "lfs")}
    assert lfs[UNET_W]["sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
    sub = list(api.list_repo_tree(REPO, path_in_repo="unet", expand=True))
    assert {e.path for e in sub} == {"unet/config.json", UNET_W}
    assert all(e.last_commit is not None for e in sub)
    (info,) = api.get_paths_info(REPO, [UNET_W])
    assert info.lfs is not None and info.lfs.size == len(WEIGHTS)
    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree(REPO, path_in_repo="nope"))


def test_hf_hub_download_lfs_via_cdn_and_regular_file(hub: FakeHub, tmp_path: Path):
    assert download(hub, tmp_path, "unet/config.json") == FILES["unet/config.json"]
    hub.requests.clear()
    assert download(hub, tmp_path, UNET_W) == WEIGHTS
    (head, get) = hub.requests
    assert head[:2] == ("HEAD", f"/{REPO}/resolve/main/{UNET_W}")  # 302 not followed: other port
    assert get[0] == "GET" and get[1].startswith("/cdn/")


def test_snapshot_download_of_a_diffusers_repo(hub: FakeHub, tmp_path: Path):
    folder = Path(snapshot_download(REPO, endpoint=hub.url, cache_dir=tmp_path / "cache",
                                    token=False))
    assert {p: (folder / p).read_bytes() for p in FILES} == FILES
    assert folder.name == hub.repos[REPO].refs["main"]


def test_range_returns_the_tail_and_416_past_the_end(hub: FakeHub):
    url = hf_hub_url(REPO, UNET_W, endpoint=hub.url)
    with httpx2.Client(follow_redirects=True) as client:
        r = client.get(url, headers={"Range": "bytes=10000-"})
        assert r.status_code == 206 and r.content == WEIGHTS[10000:]
        assert r.headers["Content-Range"] == f"bytes 10000-{len(WEIGHTS) - 1}/{len(WEIGHTS)}"
        r = client.get(url, headers={"Range": "bytes=-16"})
        assert r.status_code == 206 and r.content == WEIGHTS[-16:]
        r = client.get(url, headers={"Range": f"bytes={len(WEIGHTS)}-"})
        assert r.status_code == 416 and r.headers["Content-Range"] == f"bytes */{len(WEIGHTS)}"
        r = client.get(hf_hub_url(REPO, "unet/config.json", endpoint=hub.url),
                       headers={"Range": "bytes=1-3"})
        assert r.status_code == 206 and r.content == FILES["unet/config.json"][1:4]


def test_cut_after_bytes_breaks_bodies_and_range_resumes(hub: FakeHub, tmp_path: Path):
    url = hf_hub_url(REPO, UNET_W, endpoint=hub.url)
    hub.cut_after_bytes = 1000
    with httpx2.Client(follow_redirects=True) as client:
        with client.stream("GET", url) as r, pytest.raises(httpx2.RemoteProtocolError):
            got = b""
            for chunk in r.iter_bytes():
                got += chunk
        assert got == WEIGHTS[:1000] and hub.cut_after_bytes is None
        rest = client.get(url, headers={"Range": f"bytes={len(got)}-"})
        assert rest.status_code == 206 and got + rest.content == WEIGHTS
    # http_get retries a cut body itself, after 1 s; it counts only chunks of 10 MiB it has
    # yielded, so a smaller file restarts without a Range.
    hub.cut_after_bytes, hub.cut_times = 4096, 1
    hub.requests.clear()
    assert download(hub, tmp_path, UNET_W) == WEIGHTS
    assert [r[2] for r in hub.requests if r[0] == "GET"] == [None, None]


def test_corrupt_bytes_keep_the_length_and_the_metadata(hub: FakeHub, tmp_path: Path):
    hub.corrupt.add(UNET_W)
    got = download(hub, tmp_path, UNET_W)  # huggingface_hub does not check the sha256 itself
    assert len(got) == len(WEIGHTS) and got != WEIGHTS
    info = HfApi(endpoint=hub.url, token=False).model_info(REPO, files_metadata=True)
    (w,) = [s for s in info.siblings if s.rfilename == UNET_W]
    assert w.lfs is not None and w.lfs.sha256 != hashlib.sha256(got).hexdigest()


def test_gated_repo_needs_a_known_token(hub: FakeHub, tmp_path: Path):
    hub.add_repo("org/gated", {"model.safetensors": b"secret" * 100}, gated=True)
    hub.tokens = {"hf_good"}
    api = HfApi(endpoint=hub.url, token=False)
    assert api.model_info("org/gated").gated == "manual"  # the listing is public, as on the Hub
    with pytest.raises(GatedRepoError) as anonymous:
        download(hub, tmp_path, "model.safetensors", repo_id="org/gated")
    assert anonymous.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as wrong:
        download(hub, tmp_path, "model.safetensors", repo_id="org/gated", token="hf_bad")
    assert wrong.value.response.status_code == 403
    hub.requests.clear()
    got = download(hub, tmp_path, "model.safetensors", repo_id="org/gated", token="hf_good")
    assert got == b"secret" * 100
    assert [r[3] for r in hub.requests] == ["Bearer hf_good", None]  # the CDN gets no token
    with pytest.raises(GatedRepoError):
        api.auth_check("org/gated")
    api.auth_check("org/gated", token="hf_good")


def test_missing_repo_file_and_revision_raise_the_named_errors(hub: FakeHub, tmp_path: Path):
    api = HfApi(endpoint=hub.url, token=False)
    with pytest.raises(RepositoryNotFoundError):
        download(hub, tmp_path, "x.json", repo_id="org/none")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("org/none")
    with pytest.raises(EntryNotFoundError):
        download(hub, tmp_path, "missing.json")
    with pytest.raises(RevisionNotFoundError):
        download(hub, tmp_path, "model_index.json", revision="v9")
    with pytest.raises(RevisionNotFoundError):
        api.model_info(REPO, revision="v9")
    with pytest.raises(RevisionNotFoundError):
        snapshot_download(REPO, revision="v9", endpoint=hub.url, cache_dir=tmp_path / "c",
                          token=False)


def test_static_files_for_direct_url_pulls(hub: FakeHub):
    url = hub.add_static("dir/lora.safetensors", WEIGHTS)
    with httpx2.Client() as client:
        head = client.head(url)
        assert head.headers["Content-Length"] == str(len(WEIGHTS)) and head.headers["ETag"]
        assert client.get(url, headers={"Range": "bytes=100-"}).content == WEIGHTS[100:]
        assert client.get(url).content == WEIGHTS
        assert client.get(f"{hub.url}/static/absent").status_code == 404
        hub.slow_bytes_per_s = 40_000
        started = time.monotonic()
        assert client.get(url, headers={"Range": "bytes=-4000"}).content == WEIGHTS[-4000:]
        assert time.monotonic() - started >= 0.09


def test_hf_endpoint_counts_only_when_set_before_import(hub: FakeHub, tmp_path: Path):
    # The fixture set HF_ENDPOINT after huggingface_hub was imported: in-process, it is ignored.
    assert not hf_hub_url(REPO, "a.json").startswith(hub.url)  # (whatever it was at import)
    assert hf_hub_url(REPO, "a.json", endpoint=hub.url).startswith(hub.url + "/")
    # A fresh process reads it (and HF_HUB_CACHE) at import.
    code = ("from huggingface_hub import hf_hub_download as d; import sys;"
            f"sys.stdout.write(open(d({REPO!r}, {UNET_W!r}, token=False), 'rb').read().hex())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT, env={k: v for k, v in os.environ.items()
                                                    if k not in ("HF_HUB_OFFLINE",
                                                                 "TRANSFORMERS_OFFLINE")})
    assert out.returncode == 0, out.stderr
    assert bytes.fromhex(out.stdout) == WEIGHTS
    assert any((tmp_path / "cache").rglob("diffusion_pytorch_model.safetensors"))


async def test_async_use_with_aiohttp():
    async with FakeHub() as hub:
        sha = hub.add_repo("solo", {"w.bin": b"abc"})
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{hub.url}/api/models/solo") as r:
                assert (await r.json())["sha"] == sha
            async with s.get(f"{hub.url}/solo/resolve/{sha}/w.bin") as r:  # follows the 302
                assert await r.read() == b"abc" and r.history[0].status == 302
            async with s.head(f"{hub.url}/solo/resolve/main/nope") as r:
                assert r.status == 404 and r.headers["X-Error-Code"] == "EntryNotFound"

