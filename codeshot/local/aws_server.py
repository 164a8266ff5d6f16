"""moto's server on loopback: the local AWS (DynamoDB, S3, SQS, Secrets Manager)."""

from __future__ import annotations

import errno
import functools
import logging
import socket
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from codeshot.errors import CodeshotError


class PortInUse(CodeshotError):
    code = "PORT_IN_USE"


def check_port_free(host: str, port: int) -> None:
    """Fail early, with a message a person can act on, when a port is taken."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortInUse(
                    f"port {port} on {host} is already in use; stop what is using it "
                    f"or pick another port (--port / --aws-port)"
                ) from exc
            raise


def make_dynamodb_writes_atomic() -> None:
    """DynamoDB applies each conditional write atomically; moto's threaded server does not
    lock, so two requests can both pass a condition. Serialise moto's writes so quotas and
    uniqueness behave locally as they do in AWS."""
    from moto.dynamodb.models import DynamoDBBackend

    if getattr(DynamoDBBackend, "_codeshot_atomic_writes", False):
        return
    lock = threading.RLock()

    def locked(original: Any) -> Any:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return original(*args, **kwargs)

        return wrapper

    for name in ("put_item", "update_item", "delete_item", "transact_write_items",
                 "batch_write_item"):
        setattr(DynamoDBBackend, name, locked(getattr(DynamoDBBackend, name)))
    DynamoDBBackend._codeshot_atomic_writes = True


_EXPIRED = (
    b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>AccessDenied</Code>"
    b"<Message>Request has expired</Message></Error>"
)


def reject_expired_presigned(app: Any) -> Any:
    """S3 refuses a presigned URL after X-Amz-Date + X-Amz-Expires; moto does not check.
    This WSGI layer does, so expiring embed URLs behave locally as in AWS."""
    from urllib.parse import parse_qs

    def middleware(environ: dict[str, Any], start_response: Any) -> Any:
        query = parse_qs(environ.get("QUERY_STRING", ""))
        if "X-Amz-Expires" in query and "X-Amz-Date" in query:
            try:
                signed = datetime.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ")
                lifetime = int(query["X-Amz-Expires"][0])
            except ValueError:
                lifetime, signed = -1, datetime.now(UTC).replace(tzinfo=None)
            expired = datetime.now(UTC).replace(tzinfo=None) > signed + timedelta(
                seconds=lifetime
            )
            if lifetime < 0 or expired:
                start_response("403 Forbidden", [("Content-Type", "application/xml")])
                return [_EXPIRED]
        return app(environ, start_response)

    return middleware


class LocalAWS:
    """A moto server in a daemon thread of this process."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.port = host, port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        check_port_free(self.host, self.port)
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        make_dynamodb_writes_atomic()
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
        app = reject_expired_presigned(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            self.host, self.port, app, threaded=True, request_handler=MotoRequestHandler
        )
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="moto-server", daemon=True
        )
        self._thread.start()
        return self.endpoint_url

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
