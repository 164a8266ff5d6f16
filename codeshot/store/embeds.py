"""Embed bytes on S3: the platform's content-addressed objects, and users' uploads.

An embed's bytes live at ``embeds/<sha256>``, written only by the platform, after it has
the bytes in hand (sent inline, returned by an agent, or read back from an upload and
hashed), always conditionally (``If-None-Match: *``). Users upload larger bytes through a
presigned PUT to ``uploads/<their user id>/<sha256>``: a place only they can name, so a
user can bind only their own uploads to a message (guessing another user's hash finds
nothing, and says the same as a wrong guess), and nobody can put bytes where another
user's content will be looked for. The PUT signs its length and SHA-256 checksum, so S3
refuses other bytes or a request without those headers. Unbound uploads expire.

Every write is conditional: in AWS the bucket's policy refuses a PutObject without
``If-None-Match`` (infra/components/data.py), so nothing, the platform included, can
overwrite an object in place.

Presigned GETs serve only a few passive types inline; anything a browser could run
(HTML, SVG, XML, scripts) comes as a download, text as text/plain.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
from typing import Any

from botocore.exceptions import ClientError

from codeshot import aws
from codeshot.errors import InvalidInput, NotFound
from codeshot.settings import Settings
from codeshot.store.tables import EMBEDS_BUCKET

log = logging.getLogger("codeshot.store")

_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_CONTENT_TYPE_RE = re.compile(r"[\w.+-]+/[\w.+-]+(;[ \t]*[\w.+-]+=[\w.+-]+)*", re.ASCII)
_OWNER_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MISSING = ("404", "NoSuchKey", "NotFound")
UPLOAD_CHUNK = 1024 * 1024  # bytes of an upload held at a time while it is hashed
UPLOAD_MISMATCH = "uploaded bytes do not match their SHA-256"
# Served inline with their own type: nothing a browser would run.
_INLINE = re.compile(r"(text/plain|image/(png|jpeg|gif|webp|avif|bmp)|audio/[\w.+-]+|"
                     r"video/[\w.+-]+|application/pdf)", re.ASCII)


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_content_type(content_type: str) -> str:
    if not _CONTENT_TYPE_RE.fullmatch(content_type or "") or len(content_type) > 200:
        raise InvalidInput(f"invalid content type {content_type!r}")
    return content_type


def _check_hash(value: str) -> str:
    if not _SHA256_RE.fullmatch(value or ""):
        raise InvalidInput("content hash must be 64 lowercase hex digits (SHA-256)")
    return value


def served_as(content_type: str) -> dict[str, str]:
    """The presigned GET's response overrides for an embed of ``content_type``."""
    media = content_type.split(";", 1)[0].strip().lower()
    if _INLINE.fullmatch(media):
        return {}
    shown = "text/plain; charset=utf-8" if media.startswith("text/") else \
        "application/octet-stream"
    return {"ResponseContentType": shown, "ResponseContentDisposition": "attachment"}


class NoSuchUpload(NotFound):
    """The caller has no upload with that hash: never says whether anyone else has."""


def _no_upload(digest: str) -> NoSuchUpload:
    return NoSuchUpload(f"you have no upload with contentHash {digest}: upload the bytes "
                        "with createEmbedUpload first")


class EmbedStore:
    def __init__(self, settings: Settings, s3: Any | None = None) -> None:
        self.settings = settings
        self.s3 = s3 or aws.client("s3", settings)
        self.bucket: str = getattr(settings, EMBEDS_BUCKET.setting)

    def object_key(self, digest: str) -> str:
        return EMBEDS_BUCKET.prefix + _check_hash(digest)

    def upload_key(self, owner: str, digest: str) -> str:
        return self._uploads_of(owner) + _check_hash(digest)

    @staticmethod
    def _uploads_of(owner: str) -> str:
        if not _OWNER_RE.fullmatch(owner or ""):
            raise InvalidInput("uploads belong to a user")
        return f"{EMBEDS_BUCKET.uploads_prefix}{owner}/"

    def put(self, data: bytes, content_type: str) -> str:
        """Store bytes once; returns their SHA-256. Storing the same bytes again is a
        no-op; an object under that name holding other bytes (written before uploads had
        their own place, or by hand) is replaced, so a name always means its content."""
        check_content_type(content_type)
        if len(data) > self.settings.max_embed_bytes:
            raise InvalidInput(f"embed exceeds {self.settings.max_embed_bytes} bytes")
        digest = content_hash(data)
        key = self.object_key(digest)
        if self._put_new(key, data, content_type) or content_hash(self._get(key)) == digest:
            return digest
        # Other bytes under this name. Replaced by delete, then a conditional put (the
        # bucket refuses an unconditional one): the key stays the content's hash, which
        # every reader derives the object from, and versioning keeps the bad bytes as a
        # noncurrent version for a look (30 days). A racing writer can only be the
        # platform putting these same bytes, which the check after a 412 accepts.
        log.warning("embed %s held other bytes; replacing them", digest)
        self.s3.delete_object(Bucket=self.bucket, Key=key)
        if not self._put_new(key, data, content_type) and \
                content_hash(self._get(key)) != digest:
            raise RuntimeError(f"embed {digest} holds other bytes and could not be replaced")
        return digest

    def _put_new(self, key: str, data: bytes, content_type: str) -> bool:
        """Write ``key`` unless it exists (If-None-Match: *); False if it did."""
        try:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=data,
                               ContentType=content_type, IfNoneMatch="*")
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in ("PreconditionFailed", "412"):
                raise
            return False
        return True

    def _object(self, key: str) -> Any:
        """The object as S3 answers it (its body unread), or NotFound (callers word it)."""
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response["Error"]["Code"] in _MISSING:
                raise NotFound(f"{key} not found") from exc
            raise

    def _get(self, key: str) -> bytes:
        """The object's bytes, or NotFound (callers word it)."""
        body: bytes = self._object(key)["Body"].read()
        return body

    def _upload(self, owner: str, digest: str) -> Any:
        """``owner``'s upload of ``digest`` (its body unread); NOT_FOUND, worded the same
        whoever else holds such bytes, unless ``owner`` uploaded them."""
        key = self.upload_key(owner, digest)
        try:
            return self._object(key)
        except NotFound:
            raise _no_upload(digest) from None
        except ClientError as exc:
            # S3 answers a GET of a missing key 403 unless the caller may list the bucket,
            # and AWS does not say whether a grant limited to a prefix (the API's) counts:
            # a listing of the key tells a missing upload from a refused read.
            if exc.response["Error"]["Code"] != "AccessDenied" or self._listed(key, exc):
                raise
            raise _no_upload(digest) from None

    def _listed(self, key: str, refused: ClientError) -> bool:
        """Whether ``key`` is there; a refused listing raises ``refused`` (the read's)."""
        try:
            found = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=key, MaxKeys=1)
        except ClientError:
            raise refused from None
        return any(item["Key"] == key for item in found.get("Contents", ()))

    def read(self, digest: str) -> bytes:
        try:
            return self._get(self.object_key(digest))
        except NotFound:
            raise NotFound(f"embed content {digest} not found") from None

    def check_upload(self, owner: str, digest: str) -> int:
        """The size of ``owner``'s upload of ``digest``, its bytes hashed (a 1 MB chunk
        held at a time) and found to match their name; writes nothing, so a post can check
        all it names before it stores anything. NOT_FOUND as :meth:`_upload`."""
        hashed, size = hashlib.sha256(), 0
        for chunk in self._upload(owner, digest)["Body"].iter_chunks(UPLOAD_CHUNK):
            hashed.update(chunk)
            size += len(chunk)
        if hashed.hexdigest() != digest:
            raise InvalidInput(UPLOAD_MISMATCH)
        return size

    def claim_upload(self, owner: str, digest: str, content_type: str) -> int:
        """Make ``owner``'s upload of ``digest`` an embed (checked: the bytes must hash to
        their name); returns its size. NOT_FOUND as :meth:`_upload`."""
        data: bytes = self._upload(owner, digest)["Body"].read()
        if content_hash(data) != digest:
            raise InvalidInput(UPLOAD_MISMATCH)
        self.put(data, content_type)
        return len(data)

    # -- a deleted user's erasure (codeshot/usecases/erasure.py) --------------------------
    def forget(self, digest: str) -> None:
        """Delete the object of these bytes (the bucket is versioned: its bytes stay a
        noncurrent version until the lifecycle rule expires them, for :meth:`restore`)."""
        self.s3.delete_object(Bucket=self.bucket, Key=self.object_key(digest))

    def restore(self, digest: str) -> bool:
        """Undo every :meth:`forget` of these bytes since their newest version was stored,
        whoever made it (any erasure, any copy of a part, one whose part died): each delete
        marker no older than that version removed, it is current again. Idempotent;
        nothing when no version of the bytes is left. Whether they were deleted."""
        key = self.object_key(digest)
        newest, markers = None, []
        page: dict[str, Any] = {}
        while True:  # a key's versions: its Prefix lists longer keys too, none under embeds/
            out = self.s3.list_object_versions(Bucket=self.bucket, Prefix=key, **page)
            for version in out.get("Versions", ()):
                if version["Key"] == key and (newest is None or version["LastModified"] > newest):
                    newest = version["LastModified"]
            markers += [marker for marker in out.get("DeleteMarkers", ()) if marker["Key"] == key]
            if not out.get("IsTruncated"):
                break
            page = {"KeyMarker": out["NextKeyMarker"],
                    "VersionIdMarker": out["NextVersionIdMarker"]}
        # Markers stored in the same second as that version may be below it: removing a
        # noncurrent marker changes nothing.
        above = [marker for marker in markers
                 if newest is not None and marker["LastModified"] >= newest]
        for marker in above:
            self.s3.delete_object(Bucket=self.bucket, Key=key, VersionId=marker["VersionId"])
        return any(marker["IsLatest"] for marker in above)

    def drop_uploads(self, owner: str, most: int) -> bool:
        """Delete up to ``most`` of ``owner``'s uploads; whether any may be left."""
        out = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=self._uploads_of(owner),
                                      MaxKeys=most)
        for item in out.get("Contents", ()):
            self.s3.delete_object(Bucket=self.bucket, Key=item["Key"])
        return bool(out.get("IsTruncated"))

    def get_url(self, digest: str, content_type: str = "application/octet-stream",
                expires_in: int | None = None, download_as: str | None = None) -> str:
        """A presigned GET; only passive types are served inline as themselves, and
        nothing is with ``download_as`` (a file name: always a download of that name)."""
        shown = served_as(content_type) if download_as is None else {
            "ResponseContentType": "application/octet-stream",
            "ResponseContentDisposition": f'attachment; filename="{download_as}"'}
        return self.s3.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": self.object_key(digest), **shown},
            ExpiresIn=expires_in or self.settings.embed_url_ttl_seconds,
        )

    def put_url(self, owner: str, digest: str, content_type: str, size: int) -> dict[str, Any]:
        """A presigned PUT of exactly ``size`` bytes hashing to ``digest``, to ``owner``'s
        own upload place; the uploader must send the headers (they are signed). It never
        overwrites: a 412 answer means those bytes are uploaded already."""
        check_content_type(content_type)
        if not 0 < size <= self.settings.max_embed_bytes:
            raise InvalidInput(f"embed size must be 1..{self.settings.max_embed_bytes} bytes")
        checksum = base64.b64encode(bytes.fromhex(_check_hash(digest))).decode()
        url = self.s3.generate_presigned_url(
            "put_object",
            Params={
                "Bucket": self.bucket,
                "Key": self.upload_key(owner, digest),
                "ContentType": content_type,
                "ContentLength": size,
                "ChecksumSHA256": checksum,
                "IfNoneMatch": "*",
            },
            ExpiresIn=self.settings.embed_url_ttl_seconds,
        )
        headers = {"Content-Type": content_type, "x-amz-checksum-sha256": checksum,
                   "If-None-Match": "*"}
        return {"url": url, "headers": headers}
