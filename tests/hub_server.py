"""A local stand-in for the Hugging Face Hub's HTTP API, enough of it for ``huggingface_hub``'s
``model_info``, ``list_repo_tree`` and ``snapshot_download`` (version 2.x): point ``HF_ENDPOINT`` (and
``huggingface_hub.constants``) at ``HubServer.url``.

Routes, as the Hub answers them:

- ``GET /api/models/{repo}[/revision/{rev}]``: the repository's info (``sha``, ``siblings``, ``gated``);
- ``GET /api/models/{repo}/tree/{rev}[/{path}]``: its files (``type``, ``path``, ``size``, ``oid``, ``lfs``);
- ``HEAD`` / ``GET /{repo}/resolve/{rev}/{file}``: a file, with ``X-Repo-Commit``, ``ETag``,
  ``Content-Length`` and ``Range`` support (``206`` with ``Content-Range``).

An unknown repository answers 404 with ``X-Error-Code: RepoNotFound``; a gated one lists its files but
answers 401 ``GatedRepo`` for their contents unless the request carries one of its tokens. Switches
for failures: ``cut`` (send part of a file's body, then drop the connection, once) and ``outage`` (after
any cut, drop every connection for a file's contents without an answer, until the switch is cleared).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pth", ".gguf", ".onnx", ".msgpack", ".h5")
"""Files the Hub keeps in LFS (their ETag is the content's sha256)."""


@dataclass(frozen=True)
class HubRepo:
    """One model repository the server holds (a single commit)."""

    files: Mapping[str, bytes]
    """Path in the repository -> content."""
    gated: bool = False
    """Whether its file contents need a token (the file list stays public, as on the Hub)."""
    tokens: frozenset[str] = frozenset()
    """Tokens that may read a gated repository's files."""

    @property
    def sha(self) -> str:
        """The commit id: a hash of all paths and contents."""
        h = hashlib.sha1()
        for path in sorted(self.files):
            h.update(path.encode() + b"\0" + hashlib.sha256(self.files[path]).digest())
        return h.hexdigest()

    def etag(self, path: str) -> str:
        """The file's ETag: sha256 for LFS files, a git blob id otherwise."""
        data = self.files[path]
        if path.endswith(LFS_SUFFIXES):
            return hashlib.sha256(data).hexdigest()
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class Seen:
    """One request the server received."""

    method: str
    """HTTP method."""
    path: str
    """URL path (unquoted), without the query."""
    range: str | None
    """Its ``Range`` header, if any."""


@dataclass
class HubServer:
    """The server; use as a context manager (it runs in a thread)."""

    repos: dict[str, HubRepo]
    """Repository id -> repository."""
    cut: dict[str, int] = field(default_factory=dict)
    """File path -> bytes of its body to send before dropping the connection (once: the entry is removed)."""
    outage: set[str] = field(default_factory=set)
    """File paths whose contents are refused (connection dropped without an answer) while listed."""
    seen: list[Seen] = field(default_factory=list)
    """Every request received, in order."""

    def __enter__(self) -> HubServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    @property
    def url(self) -> str:
        """The endpoint (``HF_ENDPOINT``)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def fetched(self, repo: str) -> list[str]:
        """Paths of ``repo`` whose contents were requested with GET (in order, repeats included)."""
        prefix = f"/{repo}/resolve/"
        return [s.path[len(prefix):].split("/", 1)[1] for s in self.seen
                if s.method == "GET" and s.path.startswith(prefix)]


_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?$")
_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


def _handler(server: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _answer(self, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            server.seen.append(Seen(self.command, path, self.headers.get("Range")))
            for pattern, route in ((_INFO, self._info), (_TREE, self._tree), (_RESOLVE, self._resolve)):
                if m := pattern.match(path):
                    repo = server.repos.get(m["repo"])
                    if repo is None:
                        return self._error(404, "RepoNotFound", "Repository not found", body)
                    if m["rev"] not in (None, "main", repo.sha):
                        return self._error(404, "RevisionNotFound", "Invalid rev id", body)
                    return route(m, repo, body)
            self._error(404, None, "Not found", body)

        def _info(self, m: re.Match[str], repo: HubRepo, body: bool) -> None:
            self._json({"id": m["repo"], "modelId": m["repo"], "sha": repo.sha, "private": False,
                        "gated": "manual" if repo.gated else False, "disabled": False, "tags": [],
                        "siblings": [{"rfilename": f} for f in sorted(repo.files)]}, body)

        def _tree(self, m: re.Match[str], repo: HubRepo, body: bool) -> None:
            prefix = f"{m['path']}/" if m["path"] else ""
            entries, folders = [], set()
            for f in sorted(repo.files):
                if not f.startswith(prefix):
                    continue
                parts = f.split("/")
                folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
                entry = {"type": "file", "path": f, "size": len(repo.files[f]), "oid": repo.etag(f)}
                if f.endswith(LFS_SUFFIXES):
                    entry["lfs"] = {"oid": repo.etag(f), "size": len(repo.files[f]), "pointerSize": 134}
                entries.append(entry)
            entries += [{"type": "directory", "path": d, "oid": hashlib.sha1(d.encode()).hexdigest()}
                        for d in sorted(folders) if d.startswith(prefix)]
            self._json(entries, body)

        def _resolve(self, m: re.Match[str], repo: HubRepo, body: bool) -> None:
            name = m["file"]
            if repo.gated and self.headers.get("Authorization", "").removeprefix("Bearer ") not in repo.tokens:
                return self._error(401, "GatedRepo", f"Access to model {m['repo']} is restricted.", body)
            data = repo.files.get(name)
            if data is None:
                return self._error(404, "EntryNotFound", "Entry not found", body, commit=repo.sha)
            cut = server.cut.pop(name, None) if body else None
            if body and cut is None and name in server.outage:
                self.close_connection = True  # dropped without an answer
                return
            start, status = 0, 200
            if body and (r := _RANGE.match(self.headers.get("Range", ""))):
                start, status = int(r[1]), 206
            self.send_response(status)
            self.send_header("X-Repo-Commit", repo.sha)
            self.send_header("ETag", f'"{repo.etag(name)}"')
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data) - start))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if not body:
                return
            if cut is None:
                self.wfile.write(data[start:])
                return
            self.wfile.write(data[start:start + cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

        def _json(self, value: object, body: bool) -> None:
            data = json.dumps(value).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def _error(self, status: int, code: str | None, message: str, body: bool, commit: str | None = None) -> None:
            data = json.dumps({"error": message}).encode()
            self.send_response(status)
            if code:
                self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            if commit:
                self.send_header("X-Repo-Commit", commit)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler


def repo_from_dir(directory: Path, extra: Mapping[str, bytes] = (), **kwargs: object) -> HubRepo:
    """A repository holding every file of ``directory`` (dot files aside) plus ``extra``."""
    files = {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*"))
             if p.is_file() and not p.name.startswith(".")}
    return HubRepo(files={**files, **dict(extra)}, **kwargs)  # type: ignore[arg-type]
