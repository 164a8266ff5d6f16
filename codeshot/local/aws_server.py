"""moto's server on loopback: the local AWS (DynamoDB, S3, SQS, Secrets Manager).

``python -m codeshot.local.aws_server --port P`` serves it with our fidelity patches,
printing the port once listening; :class:`LocalAWS` runs that as a child process.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import errno
import functools
import importlib.util
import inspect
import logging
import os
import select
import socket
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from codeshot.errors import InvalidInput, PortInUse


def check_port_free(host: str, port: int, flag: str) -> None:
    """Fail early, with a message a person can act on, when a port is taken (``flag`` is
    the option of the command that chose it) or ``host`` is no address to listen on."""
    try:
        [(family, _, _, _, address), *_] = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InvalidInput(f"cannot listen on {host!r}: {exc.strerror} (--host)") from exc
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As the servers themselves bind: a stack stopped a moment ago leaves connections
        # in TIME-WAIT on its ports for a minute, which only a listener should block.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortInUse(
                    f"port {port} on {host} is already in use; stop what is using it "
                    f"or pick another port ({flag})"
                ) from exc
            if exc.errno == errno.EADDRNOTAVAIL:
                raise InvalidInput(f"cannot listen on {host}: it is not an address of this "
                                   f"machine (--host)") from exc
            raise


def make_dynamodb_writes_atomic() -> None:
    """DynamoDB applies each conditional write atomically; moto's threaded server does not
    lock, so two requests can both pass a condition. Serialise moto's writes so quotas and
    uniqueness behave locally as they do in AWS."""
    from moto.dynamodb.models import DynamoDBBackend

    if getattr(DynamoDBBackend, "_codeshot_atomic_writes", False):
        return
    roll_back_transactions_by_item()  # inside the lock below, so its snapshots hold
    lock = threading.RLock()

    def locked(original: Any) -> Any:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with lock:
                # A copy: moto hands back the stored item itself, which a later write could
                # change before this response is serialised (a counter read twice as 4).
                return copy.deepcopy(original(*args, **kwargs))

        return wrapper

    for name in ("put_item", "update_item", "delete_item", "transact_write_items",
                 "batch_write_item"):
        setattr(DynamoDBBackend, name, locked(getattr(DynamoDBBackend, name)))
    DynamoDBBackend._codeshot_atomic_writes = True  # type: ignore[attr-defined]  # our mark


def roll_back_transactions_by_item() -> None:
    """moto rolls a failed TransactWriteItems back by deep-copying, up front, every table
    it names: each post to a session then costs time in proportion to all sessions stored.
    Snapshot only the items the transaction names and restore those instead (the caller
    serialises writes, so nothing else changes them meanwhile)."""
    from moto.dynamodb import models
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    class CopyKeepingTables:
        """The copy module as moto's DynamoDB models see it: a deep copy of a table is the
        table itself, so moto's own whole-table rollback becomes a no-op."""

        def __getattr__(self, name: str) -> Any:
            return getattr(copy, name)

        @staticmethod
        def deepcopy(value: Any, memo: Any = None) -> Any:
            return value if isinstance(value, Table) else copy.deepcopy(value, memo)

    models.copy = CopyKeepingTables()  # type: ignore[attr-defined,assignment]  # moto's import
    original = DynamoDBBackend.transact_write_items

    def snapshot(backend: Any, request: dict[str, Any]) -> tuple[Any, ...] | None:
        """(table, hash key, range key, item attributes or None) of one operation."""
        try:
            kind, op = next(iter(request.items()))
            table = backend.tables[op["TableName"]]
            attrs = op["Item"] if kind == "Put" else op["Key"]
            hash_key = DynamoType(attrs[table.hash_key_attr])
            range_key = DynamoType(attrs[table.range_key_attr]) if table.range_key_attr \
                else None
        except (StopIteration, AttributeError, KeyError, TypeError):
            return None  # malformed: moto refuses it without writing
        item = table.get_item(hash_key, range_key)
        return table, hash_key, range_key, item.to_json()["Attributes"] if item else None

    @functools.wraps(original)
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved = [snapshot(self, request) for request in transact_items]
        try:
            original(self, transact_items)
        except Exception:
            for table, hash_key, range_key, attrs in filter(None, reversed(saved)):
                if attrs is None:
                    table.delete_item(hash_key, range_key)
                else:
                    table.put_item(attrs, overwrite=True)
            raise

    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]


def query_one_partition() -> None:
    """moto's Query gathers and sorts every item of a table, then keeps one partition:
    reading a session cost time in proportion to all sessions stored. Give it a view of
    the table holding just the partition asked for (for an index keyed by the table's own
    partition key too; other indexes still see the whole table)."""
    from moto.dynamodb.models.table import Table

    original = Table.query
    signature = inspect.signature(original)

    @functools.wraps(original)
    def query(self: Any, *args: Any, **kwargs: Any) -> Any:
        asked = signature.bind(self, *args, **kwargs).arguments
        hash_key, index_name = asked["hash_key"], asked.get("index_name")
        partitioned = not index_name or [
            k["AttributeName"] for k in self.get_index(index_name, error_if_not=True).schema
            if k["KeyType"] == "HASH"] == [self.hash_key_attr]
        if hash_key is None or not partitioned:
            return original(self, *args, **kwargs)
        # not Table(): moto tracks every instance it makes
        view = object.__new__(Table)  # type: ignore[type-abstract]
        view.__dict__.update(self.__dict__)
        # A plain dict, only read here.
        view.items = {hash_key: self.items[hash_key]} \
            if hash_key in self.items else {}  # type: ignore[assignment]
        return original(view, *args, **kwargs)

    Table.query = query  # type: ignore[method-assign]


def list_moto_services_once() -> None:
    """moto lists its package directory (150 stat calls) to route every request, under
    a lock shared by all requests; the list does not change while it runs."""
    from moto import backends

    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules


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


# The credentials every local client uses (codeshot.aws): presigned URLs they sign are
# checked as S3 checks them; URLs signed with other keys pass as moto lets them.
LOCAL_SECRETS = {"codeshot-local": "codeshot-local"}


def _s3_error(start_response: Any, status: str, code: str, message: str) -> list[bytes]:
    start_response(status, [("Content-Type", "application/xml")])
    return [f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error>".encode()]


def presigned_signature(method: str, raw_uri: str, headers: dict[str, str], secret: str
                        ) -> tuple[str, str]:
    """(the SigV4 query signature this request should carry, the one it carries)."""
    import hashlib
    import hmac
    from urllib.parse import quote, unquote

    def sign(key: bytes, text: str) -> bytes:
        return hmac.new(key, text.encode(), hashlib.sha256).digest()

    path, _, query = raw_uri.partition("?")
    params = {unquote(k): unquote(v) for k, _, v in (p.partition("=") for p in query.split("&")
                                                     if p)}
    canonical_query = "&".join(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}"
        for k, v in sorted(params.items()) if k != "X-Amz-Signature")
    signed = params["X-Amz-SignedHeaders"].split(";")
    canonical_headers = "".join(f"{h}:{' '.join(headers.get(h, '').split())}\n" for h in signed)
    request = "\n".join([method, path, canonical_query, canonical_headers, ";".join(signed),
                         "UNSIGNED-PAYLOAD"])
    _, date, region, service, terminal = params["X-Amz-Credential"].split("/")
    to_sign = "\n".join(["AWS4-HMAC-SHA256", params["X-Amz-Date"],
                         f"{date}/{region}/{service}/{terminal}",
                         hashlib.sha256(request.encode()).hexdigest()])
    key = sign(("AWS4" + secret).encode(), date)
    for part in (region, service, terminal):
        key = sign(key, part)
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest(), params["X-Amz-Signature"]


def check_presigned_s3(app: Any) -> Any:
    """S3 refuses a presigned request whose signature does not cover what it sends (a
    signed header left out or changed), and a PUT whose body does not match its
    x-amz-checksum-sha256; moto checks neither. This WSGI layer does, so an upload URL
    can only deliver the bytes it was made for, locally as in AWS."""
    import base64
    import hashlib
    import hmac
    import io
    from urllib.parse import parse_qs, unquote

    def middleware(environ: dict[str, Any], start_response: Any) -> Any:
        query = parse_qs(environ.get("QUERY_STRING", ""))
        credential = query.get("X-Amz-Credential", [""])[0]
        secret = LOCAL_SECRETS.get(unquote(credential).split("/")[0])
        if "X-Amz-Signature" in query and secret:
            headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items()
                       if k.startswith("HTTP_")}
            headers |= {"content-type": environ.get("CONTENT_TYPE", ""),
                        "content-length": environ.get("CONTENT_LENGTH", "")}
            raw_uri = environ.get("RAW_URI") or environ.get("REQUEST_URI") or ""
            try:
                expected, given = presigned_signature(environ["REQUEST_METHOD"], raw_uri,
                                                      headers, secret)
            except (KeyError, ValueError):
                expected, given = "", "malformed"
            if not hmac.compare_digest(expected, given):
                return _s3_error(start_response, "403 Forbidden", "SignatureDoesNotMatch",
                                 "The request signature we calculated does not match the "
                                 "signature you provided.")
        checksum = environ.get("HTTP_X_AMZ_CHECKSUM_SHA256")
        if environ["REQUEST_METHOD"] == "PUT" and checksum:
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            environ["wsgi.input"] = io.BytesIO(body)
            if base64.b64encode(hashlib.sha256(body).digest()).decode() != checksum:
                return _s3_error(start_response, "400 Bad Request", "BadDigest",
                                 "The SHA256 you specified did not match the calculated "
                                 "checksum.")
        return app(environ, start_response)

    return middleware


class LocalAWS:
    """moto's server in a child process of this one: moto handles every request in Python
    (an SQS receive scans the whole queue), so in the platform's process it would compete
    with the API and the runner for one GIL."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.port = host, port
        self._process: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 60.0) -> str:
        check_port_free(self.host, self.port, "--aws-port")  # `local up` chooses it so
        if importlib.util.find_spec("moto") is None:  # the child would die of it, unsaid
            raise ModuleNotFoundError("No module named 'moto'", name="moto")
        import codeshot

        # The child imports the same codeshot as this process, wherever that comes from.
        source = str(Path(codeshot.__file__).resolve().parents[1])
        path = os.pathsep.join(p for p in (source, os.environ.get("PYTHONPATH")) if p)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "codeshot.local.aws_server", "--host", self.host,
             "--port", str(self.port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": path},
            start_new_session=True,  # Ctrl-C goes to the parent, which stops us in order
        )
        try:
            self.port = self._listening_port(timeout)
        except BaseException:
            self.stop()
            raise
        return self.endpoint_url

    def _listening_port(self, timeout: float) -> int:
        """The port the child prints once its socket listens (connections queue from then)."""
        assert self._process is not None and self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout], [], [], timeout)
        line = self._process.stdout.readline() if ready else ""
        if not line.strip().isdigit():
            try:  # an early exit closes stdout a moment before its code is there
                code = self._process.wait(timeout=5 if ready else 0)
            except subprocess.TimeoutExpired:
                code = None
            why = f"exited with code {code}" if code is not None else f"not up in {timeout:.0f}s"
            raise RuntimeError(f"moto server on {self.host}:{self.port} {why}")
        return int(line)

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        if self._process is None:
            return
        process, self._process = self._process, None
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()  # the child's cue, should this process die before the next
        process.stdout.close()
        process.terminate()  # moto keeps all in memory: nothing to wind down (0.7 s saved)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def serve(host: str, port: int) -> None:
    """Serve moto with our fidelity patches until stdin closes: the parent closes it to
    stop us, and the OS closes it if the parent dies, so this process never outlives it."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    make_dynamodb_writes_atomic()
    query_one_partition()
    list_moto_services_once()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    app = check_presigned_s3(reject_expired_presigned(
        DomainDispatcherApplication(create_backend_app)))
    server = make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler)
    try:
        print(server.server_address[1], flush=True)
    except BrokenPipeError:  # the parent stopped (Ctrl-C) before reading it
        return
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nobody reads our stdout after the port

    def until_stdin_closes() -> None:
        sys.stdin.read()
        server.shutdown()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    with contextlib.suppress(KeyboardInterrupt):  # run by hand
        server.serve_forever()
    server.server_close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="moto's server with codeshot's fixes")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    serve(args.host, args.port)
