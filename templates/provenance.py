"""C2PA Content Credentials on a channel's file: signed with the team's certificate, read
back with c2pa's own reader.

A rendition's manifest says what the law and the platforms look for: the picture was
made by a trained model (action `c2pa.created`, digitalSourceType trainedAlgorithmicMedia,
the model as its software agent), then fitted to the channel (`c2pa.resized`); the
product photo the row named is an ingredient (componentOf, `c2pa.placed`); and genbot's
own assertion `com.genbot.job` names the template, its version, the row, batch and job.
Signing comes last, after the implicit label is written: changing a signed file's bytes
breaks its signature.

The certificate is the team's ([deliver] c2pa_cert and c2pa_key: a PEM chain, the signing
certificate first, and its private key). Without one, genbot makes its own once per data
folder (`c2pa/`: an ES256 root and a signing certificate under it): every file is still
signed and valid, and readers say its signer is not one they trust until a team's
certificate replaces it. Thumbnails are not embedded: they cost 100 ms and 100 KB a file.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

try:
    VERSION = version("genbot")
except PackageNotFoundError:  # pragma: no cover - a checkout run without installing
    VERSION = "0+unknown"

TRAINED = "http://cv.iptc.org/newscodes/digitalsourcetype/trainedAlgorithmicMedia"
EDITED = "http://cv.iptc.org/newscodes/digitalsourcetype/compositeWithTrainedAlgorithmicMedia"
MIME = {"jpg": "image/jpeg", "png": "image/png", "webp": "image/webp"}
SETTINGS = {"builder": {"thumbnail": {"enabled": False}}}
DOCUMENT_SIGNING = "1.3.6.1.5.5.7.3.36"  # id-kp-documentSigning


class ProvenanceError(Exception):
    """A certificate or key that cannot sign, said with its file."""


@dataclass(frozen=True)
class Credentials:
    chain: bytes  # PEM: the signing certificate, then its issuers
    key: bytes  # PEM: its private key
    anchors: bytes  # PEM: the root readers are told to trust (the local one's own root)
    local: bool  # genbot's own, made for this data folder


def credentials(cert: str, key: str, data_dir: Path) -> Credentials:
    """The team's certificate and key where configured, else this data folder's own."""
    if cert or key:
        try:
            chain, secret = Path(cert).read_bytes(), Path(key).read_bytes()
        except OSError as e:
            raise ProvenanceError(f"[deliver] c2pa_cert/c2pa_key: cannot read "
                                  f"{e.filename}: {e.strerror}") from None
        return Credentials(chain, secret, b"", local=False)
    return local_credentials(data_dir / "c2pa")


def local_credentials(folder: Path) -> Credentials:
    """genbot's own signing chain for this data folder, made at first use: written into a
    folder of its own and renamed into place whole, so two executors starting together
    keep one chain (the loser's is removed)."""
    if not (folder / "chain.pem").exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        made = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".c2pa-"))
        for name, data in zip(("root.pem", "chain.pem", "signer.key"), _make_chain(),
                              strict=True):
            (made / name).write_bytes(data)
        (made / "signer.key").chmod(0o600)
        try:
            made.rename(folder)  # (an empty folder is replaced; a filled one stays)
        except OSError:
            shutil.rmtree(made, ignore_errors=True)
    return Credentials((folder / "chain.pem").read_bytes(), (folder / "signer.key").read_bytes(),
                       (folder / "root.pem").read_bytes(), local=True)


def _make_chain() -> tuple[bytes, bytes, bytes]:
    """A P-256 root and a signing certificate under it, as C2PA requires of a signer: not
    a CA, digitalSignature, an extended key usage (emailProtection, documentSigning), and
    its authority key identifier. PEMs: root, chain (signer then root), signer's key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "genbot (local)"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def usage(*, sign: bool, ca: bool) -> x509.KeyUsage:
        return x509.KeyUsage(digital_signature=sign, content_commitment=False,
                             key_encipherment=False, data_encipherment=False,
                             key_agreement=False, key_cert_sign=ca, crl_sign=ca,
                             encipher_only=False, decipher_only=False)

    now = dt.datetime.now(dt.UTC)
    root_key, signer_key = ec.generate_private_key(ec.SECP256R1()), \
        ec.generate_private_key(ec.SECP256R1())
    root_name = name("genbot local root")
    root = (x509.CertificateBuilder().subject_name(root_name).issuer_name(root_name)
            .public_key(root_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(usage(sign=False, ca=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(root_key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                root_key.public_key()), critical=False)
            .sign(root_key, hashes.SHA256()))
    signer = (x509.CertificateBuilder().subject_name(name("genbot local signer"))
              .issuer_name(root_name).public_key(signer_key.public_key())
              .serial_number(x509.random_serial_number())
              .not_valid_before(now - dt.timedelta(days=1))
              .not_valid_after(now + dt.timedelta(days=3650))
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(usage(sign=True, ca=False), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.EMAIL_PROTECTION,
                                                    ObjectIdentifier(DOCUMENT_SIGNING)]),
                             critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                  root_key.public_key()), critical=False)
              .sign(root_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    key = signer_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption())
    return root.public_bytes(pem), signer.public_bytes(pem) + root.public_bytes(pem), key


class Signer:
    """Signs files with one set of credentials (made once, used for every file)."""

    def __init__(self, creds: Credentials):
        import c2pa
        self.creds = creds
        try:
            self.signer = c2pa.Signer.from_info(c2pa.C2paSignerInfo(
                c2pa.C2paSigningAlg.ES256, creds.chain, creds.key, None))
        except Exception as e:  # noqa: BLE001 - c2pa says why in its own words
            raise ProvenanceError(f"the C2PA certificate cannot sign: {e}") from None
        self.context = c2pa.Context.from_dict(SETTINGS)

    def sign(self, data: bytes, fmt: str, title: str, about: dict[str, Any],
             ingredients: Sequence[tuple[str, bytes]] = (), *, model: str = "",
             parent: tuple[str, bytes] | None = None) -> bytes:
        """A generated picture's manifest: made by a model (`c2pa.created`) — or, with a
        `parent` (name, bytes: the picture it changed; an edit, a variation, an upscale),
        that picture opened and edited by one (`c2pa.opened`, `c2pa.edited`), the parent
        an ingredient whose own manifest the file carries. `ingredients` (name, bytes):
        the pictures placed in it (the product photo); `about`: genbot's own assertion."""
        agent = {"name": f"genbot ({model})" if model else "genbot", "version": VERSION}
        links = [(f"ingredient_{i}", name, picture, "componentOf")
                 for i, (name, picture) in enumerate(ingredients)]
        if parent is not None:
            links.insert(0, ("parent", parent[0], parent[1], "parentOf"))
            actions: list[dict[str, Any]] = [
                {"action": "c2pa.opened", "parameters": {"ingredientIds": ["parent"]}},
                {"action": "c2pa.edited", "digitalSourceType": EDITED, "softwareAgent": agent}]
        else:
            actions = [{"action": "c2pa.created", "digitalSourceType": TRAINED,
                        "softwareAgent": agent}]
        placed = [label for label, *_, how in links if how == "componentOf"]
        if placed:
            actions.append({"action": "c2pa.placed", "parameters": {"ingredientIds": placed}})
        return self._signed(data, fmt, title, about, actions, links)

    def sign_rendition(self, data: bytes, fmt: str, title: str, about: dict[str, Any],
                       source: tuple[str, bytes], *, drawn: bool = True) -> bytes:
        """A channel's file: the generated picture it was made from opened (`source`:
        name, bytes — signed itself, so the chain reaches the model and the product
        photo), resized to the channel, and (`drawn`) the label or layout drawn on it."""
        actions: list[dict[str, Any]] = [
            {"action": "c2pa.opened", "parameters": {"ingredientIds": ["source"]}},
            {"action": "c2pa.resized"}]
        if drawn:
            actions.append({"action": "c2pa.edited", "description":
                            "the AI-content label and the layout drawn"})
        return self._signed(data, fmt, title, about, actions,
                            [("source", source[0], source[1], "parentOf")])

    def _signed(self, data: bytes, fmt: str, title: str, about: dict[str, Any],
                actions: list[dict[str, Any]], links: Sequence[tuple[str, str, bytes, str]]
                ) -> bytes:
        import c2pa
        manifest = {"claim_generator_info": [{"name": "genbot", "version": VERSION}],
                    "title": title, "format": MIME[fmt],
                    "assertions": [{"label": "c2pa.actions", "data": {"actions": actions}},
                                   {"label": "com.genbot.job", "data": about}]}
        out = io.BytesIO()
        with c2pa.Builder(manifest, self.context) as builder:
            for label, name, picture, relationship in links:
                builder.add_ingredient({"title": name, "relationship": relationship,
                                        "label": label}, _mime(picture), io.BytesIO(picture))
            builder.sign(self.signer, MIME[fmt], io.BytesIO(data), out)
        return out.getvalue()


def _mime(picture: bytes) -> str:
    from PIL import Image
    with Image.open(io.BytesIO(picture)) as im:
        return Image.MIME.get(im.format or "", "image/png")


@dataclass(frozen=True)
class Read:
    state: str  # c2pa's: Trusted, Valid, Invalid; "" where the file has no manifest
    failures: list[str]  # the validation failures' codes
    manifest: dict[str, Any]  # the active manifest as c2pa reads it
    manifests: dict[str, Any] = field(default_factory=dict)  # every one the file carries

    def lineage(self) -> list[dict[str, Any]]:
        """The active manifest, then its parent's, its parent's … (each `parentOf`
        ingredient's own manifest, carried in the file): where the picture came from."""
        out: list[dict[str, Any]] = []
        seen: set[int] = set()
        at: dict[str, Any] | None = self.manifest
        while at and id(at) not in seen:
            seen.add(id(at))
            out.append(at)
            parent = next((i for i in at.get("ingredients", [])
                           if i.get("relationship") == "parentOf"), None)
            at = self.manifests.get(parent.get("active_manifest", "")) if parent else None
        return out


def read(data: bytes, fmt: str, anchors: bytes = b"") -> Read:
    """The file's manifest as c2pa's own reader validates it (`anchors`: the roots it is
    told to trust besides its own list)."""
    import c2pa
    context = c2pa.Context.from_dict({"trust": {"user_anchors": anchors.decode()}}) \
        if anchors else c2pa.Context()
    try:
        with c2pa.Reader(MIME[fmt], io.BytesIO(data), context=context) as reader:
            store = json.loads(reader.json())
            state = reader.get_validation_state() or ""
            results = reader.get_validation_results() or {}
    except Exception:  # noqa: BLE001 - c2pa raises on a file with no manifest
        return Read("", [], {})
    failures = [f["code"] for f in (results.get("activeManifest") or {}).get("failure", [])]
    return Read(state, failures, store["manifests"][store["active_manifest"]],
                store["manifests"])
