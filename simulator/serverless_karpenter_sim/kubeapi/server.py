"""The simulated Kubernetes API server: real Kubernetes REST over HTTP/1.1 and TLS on 127.0.0.1.

The official ``kubernetes`` python client talks to it unchanged (see :func:`client_configuration`).
Paths, verbs, status codes and ``Status`` bodies follow kube-apiserver; object semantics live in
:mod:`.store`. Notes for callers:

- ``CoreV1Api.create_namespaced_pod_binding`` / ``create_namespaced_binding`` answer 201 with the
  Binding echoed back (upstream answers a ``Status``, which the python client cannot deserialize into a
  ``V1Binding``), so callers need no ``_preload_content=False``.
- A watch whose ``resourceVersion`` is older than the kept history gets a 200 stream holding one
  ``ERROR`` event with a 410 ``Status`` (as the watch cache does); ``kubernetes.watch.Watch`` raises
  ``ApiException(410)`` from it.
- A watch ends after ``timeoutSeconds`` (default 1800) of wall time *or* of the injected clock, whichever
  passes first, so simulations on a manual clock see their watches expire in virtual time.
- ``dryRun=All`` (in the query, or in a DELETE's or an eviction's options) runs a write in full and
  rolls it back (no watch event, no audit record).
- Not served: server-side apply field ownership (``apply-patch+yaml`` is a create-or-strategic-merge),
  garbage collection (propagationPolicy is accepted and ignored), namespace deletion, protobuf (a
  protobuf body is answered 415, so ``kubectl create configmap`` and kin fail; ``kubectl apply`` works).
- kubectl: ``/openapi/v3``, ``fieldValidation``, Table output and HTTPS (see :mod:`.kubectl_support`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import select
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import kubernetes.client
from serverless_karpenter.clock import Clock

from . import codec, crd_schema, dryrun, kinds, kubectl_support, selectors, tls
from .access import ADMIN_USER, AccessControl
from .audit import Audit
from .errors import REASONS, ApiError, bad_request, method_not_allowed, unauthorized
from .faults import FaultInjector, FaultRule
from .kinds import Kind
from .rbac import SUPERUSER_GROUP
from .store import Page, Query, Result, Store, render
from .watch_writer import ChunkWriter
from .watches import WatchRegistry

log = logging.getLogger(__name__)

DEFAULT_WATCH_TIMEOUT_SECONDS = 1800
# kube-apiserver's watch cache: a bookmark about every minute, and one 2 s before a watch's deadline.
BOOKMARK_FREQUENCY = timedelta(minutes=1)
BOOKMARK_BEFORE_DEADLINE = timedelta(seconds=2)
_PHRASES = {status.value: status.phrase for status in HTTPStatus}
_WATCH_POLL_SECONDS = 0.1
_HOLD_POLL_SECONDS = 0.05  # how often a held "timeout" request looks for its client hanging up
_UNAUTHENTICATED_PATHS = frozenset({"/version", "/healthz", "/livez", "/readyz"})
_HANDSHAKE_TIMEOUT_SECONDS = 10.0
# Encodings kube-apiserver accepts that this server does not speak; answered 415, as upstream answers what
# it does not speak.
_BINARY_MEDIA_TYPES = frozenset({"application/vnd.kubernetes.protobuf", "application/cbor"})


@dataclass(frozen=True)
class _Route:
    kind: Kind | None  # None for the core "bindings" pseudo-resource
    namespace: str | None
    name: str | None
    subresource: str | None

    @property
    def resource(self) -> str:
        plural = self.kind.plural if self.kind else "bindings"
        return f"{plural}/{self.subresource}" if self.subresource else plural


@dataclass
class _Response:
    code: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


def _not_found_path() -> ApiError:
    return ApiError(404, "the server could not find the requested resource")


def _parse_route(segments: list[str]) -> _Route | dict[str, Any]:
    """A resource route, or the discovery document the path names."""
    if segments[0] == "api":
        if len(segments) == 1:
            return {"kind": "APIVersions", "versions": ["v1"]}
        group, version, rest = "", segments[1], segments[2:]
    else:
        if len(segments) == 1:
            return kinds.api_group_list()
        if len(segments) == 2:
            doc = kinds.api_group(segments[1])
            if doc is None:
                raise _not_found_path()
            return doc
        group, version, rest = segments[1], segments[2], segments[3:]
    if not rest:
        doc = kinds.api_resource_list(group, version)
        if doc is None:
            raise _not_found_path()
        return doc
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        raise _not_found_path()
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if not group and version == "v1" and plural == "bindings" and namespace and name is None:
        return _Route(None, namespace, None, None)
    kind = kinds.lookup(group, version, plural)
    if kind is None or (sub is not None and sub not in kind.subresources):
        raise _not_found_path()
    if namespace is not None and not kind.namespaced:
        raise _not_found_path()
    if kind.namespaced and namespace is None and name is not None:
        raise _not_found_path()
    return _Route(kind, namespace, name, sub)


def _verb(method: str, route: _Route, watch: bool) -> str:
    if method == "GET":
        if route.name is None:
            return "watch" if watch else "list"
        return "get"
    if method == "DELETE":
        return "delete" if route.name is not None else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def _json_response(code: int, obj: Any, headers: tuple[tuple[str, str], ...] = ()) -> _Response:
    return _Response(code, codec.dumps(obj), headers)


def _error_response(err: ApiError) -> _Response:
    headers = (("Retry-After", str(err.retry_after)),) if err.retry_after else ()
    return _json_response(err.code, err.status(), headers)


def _list_response(kind: Kind, page: Page) -> _Response:
    meta: dict[str, Any] = {"resourceVersion": str(page.resource_version)}
    if page.continue_token:
        meta["continue"] = page.continue_token
        meta["remainingItemCount"] = page.remaining
    head = codec.dumps({"kind": kind.list_kind, "apiVersion": kind.api_version, "metadata": meta})
    body = head[:-1] + b',"items":[' + b",".join(render(item) for item in page.items) + b"]}"
    return _Response(200, body)


def _watch_line(event_type: str, result: Result) -> bytes:
    return b'{"type":"' + event_type.encode() + b'","object":' + render(result) + b"}\n"


def _framed(data: bytes) -> bytes:
    """One chunk of a chunked transfer encoding."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _bookmark_line(kind: Kind, resource_version: int) -> bytes:
    """A BOOKMARK: an object of the watched kind with only its resourceVersion, as kube-apiserver sends."""
    obj = {
        "kind": kind.kind,
        "apiVersion": kind.api_version,
        "metadata": {"resourceVersion": str(resource_version), "creationTimestamp": None},
    }
    return b'{"type":"BOOKMARK","object":' + codec.dumps(obj) + b"}\n"


def _next_bookmark(now: datetime, deadline: datetime) -> datetime | None:
    """When a watch sends its next bookmark: a minute on, or 2 s before its deadline if that is sooner;
    none when that is already past (the cacheWatcher's nextBookmarkTime)."""
    due = min(now + BOOKMARK_FREQUENCY, deadline - BOOKMARK_BEFORE_DEADLINE)
    return due if due > now else None


def _injected_error(rule: FaultRule, route: _Route) -> ApiError:
    code = int(rule.status)
    default = {
        409: f'Operation cannot be fulfilled on {route.resource} "{route.name or ""}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        429: "Too many requests, please try again later.",
        500: "Internal error occurred: injected fault",
        503: "the server is currently unable to handle the request",
        504: "The request could not be completed within the allowed time (injected)",
    }.get(code, f"injected fault ({code})")
    return ApiError(code, rule.message or default, reason=REASONS.get(code), retry_after=rule.retry_after)


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, api: KubeApiServer) -> None:
        self.api = api
        self.stopping = threading.Event()
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        self.tls = api.authority.server_context()
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that does not trust the certificate, or speaks plain HTTP, fails its handshake: that is
        # the client's error to report, not a server fault to print a traceback for.
        log.debug("kubeapi: connection from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HttpServer

    def setup(self) -> None:
        # The handshake runs here, on the connection's own thread, so a slow client holds up no other.
        raw: socket.socket = self.request
        raw.settimeout(_HANDSHAKE_TIMEOUT_SECONDS)
        self.request = self.server.tls.wrap_socket(raw, server_side=True)
        self.request.settimeout(None)
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # --- plumbing ---------------------------------------------------------------------------------------

    def _send(self, response: _Response, *, drop: bool = False) -> None:
        reason = _PHRASES.get(response.code, "Unknown")
        head = [
            f"HTTP/1.1 {response.code} {reason}",
            "Content-Type: application/json",
            f"Content-Length: {len(response.body)}",
        ]
        head.extend(f"{k}: {v}" for k, v in response.headers)
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        if drop:
            self.wfile.write(data + response.body[: len(response.body) // 2])
            self._abort()
            return
        self.wfile.write(data + response.body)

    def _abort(self) -> None:
        """Close the connection under the client's feet."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _json_body(self, raw: bytes) -> Any:
        if not raw:
            return None
        media = (self.headers.get("Content-Type") or "").split(";", maxsplit=1)[0].strip()
        if media in _BINARY_MEDIA_TYPES:  # kubectl's typed clients (`kubectl create configmap`) send protobuf
            raise ApiError(
                415,
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json, application/yaml",
            )
        try:
            return codec.loads(raw)
        except ValueError as err:
            raise bad_request(f"error decoding the request body: {err}") from err

    # --- dispatch ---------------------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        api = self.server.api
        split = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        raw = self._read_body()
        path = split.path.rstrip("/") or "/"
        try:
            if path in _UNAUTHENTICATED_PATHS:
                self._send(
                    _json_response(200, api.version_info()) if path == "/version" else _Response(200, b"ok")
                )
                return
            user = api.access.authenticate(self.headers.get("Authorization") or "")
            if user is None:
                self._send(_error_response(unauthorized()))
                return
            segments = [unquote(s) for s in path.split("/") if s]
            if segments and segments[0] == "openapi":
                api.access.authorize_path(user, method, path)
                if method != "GET":
                    raise method_not_allowed()
                self._send(_Response(200, kubectl_support.openapi_body(segments[1:])))
                return
            if not segments or segments[0] not in ("api", "apis"):
                api.access.authorize_path(user, method, path)
                raise _not_found_path()
            route = _parse_route(segments)
            if not isinstance(route, _Route):
                api.access.authorize_path(user, method, path)
                if method != "GET":
                    raise method_not_allowed()
                if route.get("kind") == "APIVersions":
                    route = {
                        **route,
                        "serverAddressByClientCIDRs": [
                            {"clientCIDR": "0.0.0.0/0", "serverAddress": api.url.removeprefix("https://")}
                        ],
                    }
                self._send(_json_response(200, route))
                return
            watch = params.get("watch") in ("true", "1")
            verb = _verb(method, route, watch)
            api.access.authorize_resource(
                user,
                verb,
                group=route.kind.group if route.kind else "",
                resource=route.kind.plural if route.kind else "bindings",
                subresource=route.subresource or "",
                namespace=route.namespace or "",
                name=route.name or "",
            )
            api.audit.count_request(verb, user.name, route.resource)
            rule = api.faults.take(verb, route.resource, route.namespace, route.name)
            if rule is not None and rule.status == "timeout":
                if self._hold(rule.delay_seconds):
                    api.faults.client_gave_up(rule)
                self._abort()
                return
            if rule is not None and rule.status != "drop":
                self._send(_error_response(_injected_error(rule, route)))
                return
            drop = rule is not None
            if verb == "watch":
                assert route.kind is not None
                self._serve_watch(route.kind, route.namespace, params, user.name, drop=drop)
                return
            # Custom resources are pruned and validated against their CRD by the store (crd_schema, under
            # _handle_with_warnings); built-in kinds against their published OpenAPI schema here.
            warnings = (
                kubectl_support.field_warnings(
                    method, route.kind, route.subresource, params, self.headers, raw
                )
                if route.kind is None or crd_schema.schema_for(route.kind) is None
                else ()
            )
            if dryrun.requested(method, route.subresource, params, raw):
                response = api.store.dry_run(lambda: self._handle_with_warnings(method, route, params, raw))
            else:
                response = self._handle_with_warnings(method, route, params, raw)
            if warnings:
                response = dataclasses.replace(response, headers=response.headers + warnings)
        except ApiError as err:
            response = _error_response(err)
            drop = False
        except Exception as err:  # a bug here must reach the client as a 500, not a hung connection
            log.exception("kubeapi: %s %s failed", method, self.path)
            response = _error_response(ApiError(500, f"Internal error occurred: {err}"))
            drop = False
        try:
            self._send(response, drop=drop)
        except OSError:
            self.close_connection = True

    def _handle_with_warnings(
        self, method: str, route: _Route, params: Mapping[str, str], raw: bytes
    ) -> _Response:
        """``_handle`` under the request's ``fieldValidation``; a ``Warning`` header per unknown field."""
        with crd_schema.request_context(params.get("fieldValidation")) as warnings:
            response = self._handle(method, route, params, raw)
        if warnings:
            headers = tuple(("Warning", kubectl_support.warning_value(w)) for w in warnings)
            response = _Response(response.code, response.body, response.headers + headers)
        return response

    def _handle(self, method: str, route: _Route, params: Mapping[str, str], raw: bytes) -> _Response:
        store = self.server.api.store
        kind, namespace, name, sub = route.kind, route.namespace, route.name, route.subresource
        if kind is None:  # POST /api/v1/namespaces/{ns}/bindings
            if method != "POST":
                raise method_not_allowed()
            assert namespace is not None
            return _json_response(201, store.bind(namespace, None, self._json_body(raw)))
        if method == "GET":
            if name is None:
                query = self._query(kind, namespace, params)
                limit = int(params["limit"]) if params.get("limit", "").isdigit() else None
                page = store.list_objects(query, limit=limit, continue_token=params.get("continue"))
                if kubectl_support.wants_table(self.headers):
                    return _json_response(
                        200, kubectl_support.list_table(kind, page, self.server.api.clock, params)
                    )
                return _list_response(kind, page)
            if sub == "scale":
                return _json_response(200, store.get_scale(kind, namespace or "", name))
            if sub in (None, "status"):
                result = store.get(kind, namespace, name)
                if kubectl_support.wants_table(self.headers):
                    return _json_response(
                        200, kubectl_support.get_table(kind, result, self.server.api.clock, params)
                    )
                return _Response(200, render(result))
            raise method_not_allowed()
        if method == "POST":
            if name is None:
                if kind.namespaced and namespace is None:
                    raise method_not_allowed()
                return _Response(201, render(store.create(kind, namespace, self._json_body(raw))))
            if sub == "binding":
                return _json_response(201, store.bind(namespace or "", name, self._json_body(raw)))
            if sub == "eviction":
                return _json_response(201, store.evict(namespace or "", name, self._json_body(raw)))
            raise method_not_allowed()
        if method in ("PUT", "PATCH"):
            if name is None:
                raise method_not_allowed()
            if sub == "scale":
                if method == "PUT":
                    return _json_response(
                        200, store.update_scale(kind, namespace or "", name, self._json_body(raw))
                    )
                content_type = self.headers.get("Content-Type") or ""
                return _json_response(200, store.patch_scale(kind, namespace or "", name, content_type, raw))
            if sub not in (None, "status"):
                raise method_not_allowed()
            if method == "PUT":
                return _Response(200, render(store.update(kind, namespace, name, self._json_body(raw), sub)))
            result = store.patch(
                kind,
                namespace,
                name,
                self.headers.get("Content-Type") or "",
                raw,
                subresource=sub,
                field_manager=params.get("fieldManager"),
            )
            return _Response(200, render(result))
        if method == "DELETE":
            if sub is not None:
                raise method_not_allowed()
            options = self._delete_options(params, raw)
            if name is None:
                items = store.delete_collection(self._query(kind, namespace, params), options)
                page = Page(items, store.resource_version, None, None)
                return _list_response(kind, page)
            result, gone = store.delete(kind, namespace, name, options)
            if gone and not kind.return_deleted_object:
                obj = result.obj if not isinstance(result, dict) else result
                details: dict[str, Any] = {
                    "name": name,
                    "kind": kind.plural,
                    "uid": (obj.get("metadata") or {}).get("uid"),
                }
                if kind.group:
                    details["group"] = kind.group
                return _json_response(
                    200,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": details,
                    },
                )
            return _Response(200, render(result))
        raise method_not_allowed()

    def _query(self, kind: Kind, namespace: str | None, params: Mapping[str, str]) -> Query:
        return Query(
            kind,
            namespace,
            selectors.parse_label_selector(params.get("labelSelector")),
            selectors.parse_field_selector(params.get("fieldSelector"), kind.field_labels),
        )

    def _delete_options(self, params: Mapping[str, str], raw: bytes) -> dict[str, Any]:
        body = self._json_body(raw)
        options: dict[str, Any] = dict(body) if isinstance(body, dict) else {}
        if options.get("gracePeriodSeconds") is None and params.get("gracePeriodSeconds", "") != "":
            options["gracePeriodSeconds"] = params["gracePeriodSeconds"]
        return options

    # --- watch ------------------------------------------------------------------------------------------

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(_framed(data))

    def _serve_watch(
        self, kind: Kind, namespace: str | None, params: Mapping[str, str], user: str, *, drop: bool
    ) -> None:
        api = self.server.api
        store = api.store
        query = self._query(kind, namespace, params)
        timeout_param = params.get("timeoutSeconds", "")
        timeout = int(timeout_param) if timeout_param.isdigit() else DEFAULT_WATCH_TIMEOUT_SECONDS
        audit_id = str(uuid.uuid4())
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            f"Audit-Id: {audit_id}\r\n\r\n"
        )
        encode = _watch_line
        table = kubectl_support.wants_table(self.headers)
        if table:  # `kubectl get -w`: each object as a Table row
            encode = kubectl_support.TableWatchEncoder(kind, api.clock, params).line
        bookmarks = params.get("allowWatchBookmarks") in ("true", "1") and not table
        stream = api.watches.open(audit_id, user, kind.plural)
        writer: ChunkWriter | None = None
        try:
            try:
                initial, cursor = store.watch_start(query, params.get("resourceVersion"))
            except ApiError as err:
                if err.code != 410:
                    raise
                self.wfile.write(head.encode())
                self._chunk(_watch_line("ERROR", err.status()))
                self.wfile.write(b"0\r\n\r\n")
                api.watches.sent(stream, 1, cursor=store.resource_version, checked=api.clock.now())
                return
            self.wfile.write(head.encode())
            if drop:
                line = b"".join(encode(t, r) for t, r in initial) or b'{"type":"ADDED","object":{}}\n'
                self.wfile.write(b"%x\r\n%s" % (len(line), line[: max(1, len(line) // 2)]))
                self._abort()
                return
            # From here the chunks go through a writer of their own (``watch_writer.py``): a burst larger
            # than the socket's buffers must not hold the stream back from catching up.
            writer = ChunkWriter(self.wfile.write)
            if initial:
                writer.put(_framed(b"".join(encode(t, r) for t, r in initial)))
            api.watches.sent(stream, len(initial), cursor=cursor, checked=None)
            wall_deadline = time.monotonic() + timeout
            virtual_deadline = api.clock.now() + timedelta(seconds=timeout)
            next_bookmark = _next_bookmark(api.clock.now(), virtual_deadline) if bookmarks else None
            while not store.closed and not writer.failed:
                pokes = store.pokes
                remaining = wall_deadline - time.monotonic()
                now = api.clock.now()
                if remaining <= 0 or now >= virtual_deadline:
                    break
                try:
                    events, cursor = store.watch_next(
                        query, cursor, min(remaining, _WATCH_POLL_SECONDS), pokes
                    )
                except ApiError as err:
                    writer.put(_framed(_watch_line("ERROR", err.status())))
                    api.watches.sent(stream, 1, cursor=cursor, checked=now)
                    break
                lines = len(events)
                data = b"".join(encode(t, r) for t, r in events)
                if next_bookmark is not None and now >= next_bookmark:
                    # After the events: every event up to ``cursor`` has been sent (kube-apiserver's watch
                    # cache sends one about every minute, and one 2 s before the watch's deadline).
                    data += _bookmark_line(kind, cursor)
                    lines += 1
                    next_bookmark = _next_bookmark(now, virtual_deadline)
                if data:
                    writer.put(_framed(data))
                elif writer.idle and self._client_gone():  # not while the writer uses the connection
                    self.close_connection = True
                    return
                api.watches.sent(stream, lines, cursor=cursor, checked=now)
            writer.put(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
        finally:
            # Ended once its end is queued: the writer may wait on the client to read a backlog, and the
            # client reads on its turn, after the settle that must see this stream ended.
            api.watches.close(stream)
            if writer is not None:
                writer.close()
                if writer.failed:
                    self.close_connection = True

    def _hold(self, seconds: float) -> bool:
        """Answer nothing for ``seconds``; True when the client hung up first (its read timeout fired)."""
        deadline = time.monotonic() + seconds
        while not self.server.stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                readable, _, _ = select.select([self.connection], [], [], min(remaining, _HOLD_POLL_SECONDS))
            except OSError:
                return True
            if readable and self._client_gone():
                return True
            if readable:
                # Bytes from a client that does not wait for its answer; still holding, without spinning.
                self.server.stopping.wait(min(remaining, _HOLD_POLL_SECONDS))
        return False

    def _client_gone(self) -> bool:
        """Whether the client closed the connection. Only called while the client waits for an answer, so
        whatever else it sent (nothing, in HTTP/1.1 without pipelining) may be read and dropped: TLS has no
        way to peek at decrypted bytes."""
        connection = self.connection
        try:
            readable, _, _ = select.select([connection], [], [], 0)
            if not readable:
                return False
            connection.setblocking(False)
            try:
                return connection.recv(1) == b""
            finally:
                connection.settimeout(None)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False
        except OSError:
            return True


class KubeApiServer:
    """A Kubernetes API server for the simulator and the integration tests.

    ``faults`` injects failures; ``audit`` counts evictions and budget violations; ``store`` is the
    in-process object store (for seeding and inspection without HTTP).
    """

    kubernetes_version = ("1", "33")

    def __init__(
        self,
        clock: Clock,
        *,
        watch_history: int = 10_000,
        event_ttl_seconds: float = 3600.0,
    ) -> None:
        self.clock = clock
        self.audit = Audit()
        self.faults = FaultInjector()
        self.store = Store(
            clock, self.audit, watch_history=watch_history, event_ttl_seconds=event_ttl_seconds
        )
        self.authority = tls.local_authority()
        self.access = AccessControl(self.store)
        self.watches = WatchRegistry(self.store)
        self.url = ""
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        if self._httpd is not None:
            return self.url
        httpd = _HttpServer(self)
        host, port = httpd.server_address[:2]
        self.url = f"https://{host!s}:{port}"
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=f"kubeapi-{port}", daemon=True
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        httpd = self._httpd
        if httpd is None:
            return
        self._httpd = None
        httpd.stopping.set()
        self.store.close()
        httpd.shutdown()
        httpd.server_close()
        with httpd.connections_lock:
            connections = list(httpd.connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> KubeApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client_configuration(
        self, user: str = ADMIN_USER, groups: tuple[str, ...] = (SUPERUSER_GROUP,)
    ) -> kubernetes.client.Configuration:
        """A client configuration whose static token is ``user`` in ``groups`` (an admin by default)."""
        return client_configuration(self.url, self.access.tokens.issue(user, groups))

    def version_info(self) -> dict[str, str]:
        major, minor = self.kubernetes_version
        return {
            "major": major,
            "minor": minor,
            "gitVersion": f"v{major}.{minor}.0-eks-sim",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.24",
            "compiler": "gc",
            "platform": "linux/amd64",
        }


def client_configuration(url: str, token: str) -> kubernetes.client.Configuration:
    """A client configuration for the simulated server with a bearer token (see
    :meth:`KubeApiServer.client_configuration` for one the server knows), that trusts the server's
    certificate authority (and nothing else)."""
    configuration = kubernetes.client.Configuration(host=url)
    configuration.ssl_ca_cert = tls.local_authority().ca_file
    configuration.api_key = {"BearerToken": token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    configuration.proxy = None  # 127.0.0.1 must never go through an HTTP(S)_PROXY from the environment
    return configuration


__all__ = ["KubeApiServer", "client_configuration"]
