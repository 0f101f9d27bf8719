"""A local Python package index (PEP 503 simple API over HTTP on 127.0.0.1) serving
wheels made here, so that a setup script's ``pip install`` needs no internet."""

from __future__ import annotations

import base64
import hashlib
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(folder: Path, name: str, version: str, modules: dict[str, str]) -> Path:
    """A pure-Python wheel of ``modules`` (path in the wheel → source)."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        **{path: source.encode() for path, source in modules.items()},
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: autocoder-tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = [_record_line(path, data) for path, data in files.items()] + [f"{dist_info}/RECORD,,"]
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return wheel


class PackageIndex:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "simple").mkdir(parents=True, exist_ok=True)
        self.requests: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    def add(self, name: str, version: str, modules: dict[str, str]) -> None:
        project = self.root / "simple" / name
        project.mkdir(parents=True, exist_ok=True)
        wheel = make_wheel(project, name, version, modules)
        links = "".join(f'<a href="{path.name}">{path.name}</a>\n' for path in sorted(project.glob("*.whl")))
        (project / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
        assert wheel.exists()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/simple/"

    @contextmanager
    def serving(self) -> Iterator[PackageIndex]:
        index = self

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                index.requests.append(self.path)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(self.root)))
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
