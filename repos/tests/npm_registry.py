"""A local npm registry on 127.0.0.1: the documented package document
(``GET /<name>``) and tarballs, for packages made here, so that a setup script's
``npm install`` needs no internet."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def package_tarball(manifest: dict[str, object], files: dict[str, str]) -> bytes:
    """An npm package tarball: every file under ``package/``, ``package.json`` first."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in {"package.json": json.dumps(manifest), **files}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            info.mode = 0o755 if name.startswith("bin/") else 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class NpmRegistry:
    def __init__(self) -> None:
        self.packages: dict[str, dict[str, tuple[dict[str, object], bytes]]] = {}
        self.requests: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    def add(self, manifest: dict[str, object], files: dict[str, str]) -> None:
        name, version = str(manifest["name"]), str(manifest["version"])
        self.packages.setdefault(name, {})[version] = (manifest, package_tarball(manifest, files))

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/"

    def _document(self, name: str) -> dict[str, object]:
        versions = {}
        for version, (manifest, tarball) in self.packages[name].items():
            integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
            versions[version] = {
                **manifest,
                "dist": {
                    "tarball": f"{self.url}{name}/-/{name}-{version}.tgz",
                    "shasum": hashlib.sha1(tarball).hexdigest(),
                    "integrity": integrity,
                },
            }
        return {"name": name, "versions": versions, "dist-tags": {"latest": max(versions)}}

    @contextmanager
    def serving(self) -> Iterator[NpmRegistry]:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                registry.requests.append(self.path)
                parts = self.path.split("?")[0].strip("/").split("/")
                name = parts[0]
                if name not in registry.packages:
                    self.send_error(404)
                    return
                if len(parts) == 1:
                    body, kind = json.dumps(registry._document(name)).encode(), "application/json"
                else:
                    version = parts[-1].removeprefix(f"{name}-").removesuffix(".tgz")
                    body, kind = registry.packages[name][version][1], "application/octet-stream"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
