"""Embed bytes on S3: content-addressed, written once, read and written by presigned URL.

The object name is the SHA-256 of the content, and every write is conditional
(``If-None-Match: *``), so an embed can never be overwritten, not even through a
presigned URL: S3 answers 412 and the original bytes stay.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from botocore.exceptions import ClientError

from codeshot import aws
from codeshot.errors import InvalidInput, NotFound
from codeshot.settings import Settings
from codeshot.store.tables import EMBEDS_BUCKET

_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_CONTENT_TYPE_RE = re.compile(r"[\w.+-]+/[\w.+-]+(;[ \t]*[\w.+-]+=[\w.+-]+)*", re.ASCII)


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


class EmbedStore:
    def __init__(self, settings: Settings, s3: Any | None = None) -> None:
        self.settings = settings
        self.s3 = s3 or aws.client("s3", settings)
        self.bucket: str = getattr(settings, EMBEDS_BUCKET.setting)

    def object_key(self, digest: str) -> str:
        return EMBEDS_BUCKET.prefix + _check_hash(digest)

    def put(self, data: bytes, content_type: str) -> str:
        """Store bytes once; returns their SHA-256. Storing the same bytes again is a no-op."""
        check_content_type(content_type)
        if len(data) > self.settings.max_embed_bytes:
            raise InvalidInput(f"embed exceeds {self.settings.max_embed_bytes} bytes")
        digest = content_hash(data)
        try:
            self.s3.put_object(
                Bucket=self.bucket,
                Key=self.object_key(digest),
                Body=data,
                ContentType=content_type,
                IfNoneMatch="*",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in ("PreconditionFailed", "412"):
                raise
        return digest

    def head(self, digest: str) -> dict[str, Any]:
        try:
            out = self.s3.head_object(Bucket=self.bucket, Key=self.object_key(digest))
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                raise NotFound(f"embed content {digest} not found") from exc
            raise
        return {"size": out["ContentLength"], "content_type": out.get("ContentType")}

    def read(self, digest: str) -> bytes:
        try:
            out = self.s3.get_object(Bucket=self.bucket, Key=self.object_key(digest))
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("404", "NoSuchKey"):
                raise NotFound(f"embed content {digest} not found") from exc
            raise
        return out["Body"].read()

    def verify(self, digest: str) -> int:
        """Check that uploaded bytes hash to their name; returns their size."""
        data = self.read(digest)
        if content_hash(data) != digest:
            raise InvalidInput("uploaded bytes do not match their SHA-256")
        return len(data)

    def get_url(self, digest: str, expires_in: int | None = None) -> str:
        return self.s3.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": self.object_key(digest)},
            ExpiresIn=expires_in or self.settings.embed_url_ttl_seconds,
        )

    def put_url(self, digest: str, content_type: str, size: int) -> dict[str, Any]:
        """A presigned PUT for bytes with this SHA-256; the uploader must send the headers."""
        check_content_type(content_type)
        if not 0 < size <= self.settings.max_embed_bytes:
            raise InvalidInput(f"embed size must be 1..{self.settings.max_embed_bytes} bytes")
        checksum = base64.b64encode(bytes.fromhex(_check_hash(digest))).decode()
        url = self.s3.generate_presigned_url(
            "put_object",
            Params={
                "Bucket": self.bucket,
                "Key": self.object_key(digest),
                "ContentType": content_type,
                "ContentLength": size,
                "ChecksumSHA256": checksum,
                "IfNoneMatch": "*",
            },
            ExpiresIn=self.settings.embed_url_ttl_seconds,
        )
        headers = {
            "Content-Type": content_type,
            "x-amz-checksum-sha256": checksum,
            "If-None-Match": "*",
        }
        return {"url": url, "headers": headers}
