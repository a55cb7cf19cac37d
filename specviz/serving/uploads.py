"""Uploads bounded by number: gradio bounds an upload's size (`max_file_size`), not how many come.

Gradio's `/gradio_api/upload` takes up to 1,000 files a request from anyone, empty ones too, and
keeps each in a folder of its own in its cache: a block and a folder on disk however small it is
(300 uploads of 8 bytes took 2.4 MB in 1.1 s, issue 53). `UploadBounds`, a middleware on gradio's
app (`specviz.ui.blocks.launch` adds it through `app_kwargs`, so it is there on a Space too), reads
the parts of every multipart request as they stream past, with the parser gradio itself uses
(python-multipart), and refuses

- a multipart request to another route than gradio's upload (404: `UPLOAD_PATH`),
- a request with more files than `AppLimits.upload_files` (HTTP 413),
- an empty file (400),
- a network address's files past `uploads_per_address` in `upload_window_s` (429, with Retry-After;
  the address as `specviz.serving.visitors` reads it).

Each refusal is one plain line to the client and one INFO line in the log. A request refused part
way is cut off there the way gradio cuts off a file past `max_file_size`: the body's next read
raises starlette's MultiPartException, on which gradio's parser deletes what it stored of the
request (at most one chunk past the bound) and answers; the middleware answers instead.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.formparsers import MultiPartException

from specviz.serving.limits import AppLimits
from specviz.serving.visitors import scope_address

log = logging.getLogger("specviz.app")  # the app's refusals are all "specviz.app: refused: ..." lines
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
# the one route of gradio's that takes files here; its others (a screen recording, a component's own
# server function: this app has neither) are refused: /gradio_api/process_recording left each upload,
# up to 16 MB, in the system's temp folder, where no janitor looks
UPLOAD_PATH = "/gradio_api/upload"


class UploadWindow:
    """The files each address uploaded in the last `window_s` seconds, at most `most` of them. Used
    from the server's event loop only."""

    def __init__(self, most: int, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.most, self.window_s, self.clock = most, window_s, clock
        self._taken: dict[str, deque[float]] = {}  # address -> when each of its recent files came
        self._swept = clock()

    def take(self, address: str) -> bool:
        """Count one more file of `address`; False (nothing counted) when it has uploaded `most` already."""
        taken = self._recent(address)
        if len(taken) >= self.most:
            return False
        taken.append(self.clock())
        return True

    def give_back(self, address: str, files: int) -> None:
        """Uncount `address`'s last `files` files (those of a refused request: nothing of it was kept)."""
        taken = self._recent(address)
        for _ in range(min(files, len(taken))):
            taken.pop()

    def wait_s(self, address: str) -> int:
        """Seconds until `address` may upload a file again (0: now)."""
        taken = self._recent(address)
        if len(taken) < self.most:
            return 0
        return max(1, math.ceil(taken[0] + self.window_s - self.clock()))

    def spent(self, address: str) -> str:
        """What an address that has uploaded its files is told."""
        return (
            f"{self.most} files came from your network address in the last {self.window_s:g} s, the most one "
            "address may upload (SPECVIZ_LIMIT_UPLOADS_PER_ADDRESS per SPECVIZ_LIMIT_UPLOAD_WINDOW_S): "
            f"try again in {self.wait_s(address)} s"
        )

    def _recent(self, address: str) -> deque[float]:
        now = self.clock()
        if now - self._swept > self.window_s:  # forget the addresses that have gone quiet
            self._taken = {a: t for a, t in self._taken.items() if t and now - t[-1] < self.window_s}
            self._swept = now
        taken = self._taken.setdefault(address, deque())
        while taken and now - taken[0] >= self.window_s:
            taken.popleft()
        return taken


class PartsCheck:
    """The parts of one multipart body from `address`, checked as its bytes come: `refusal` is
    (status, message) once the body breaks a bound; each file counts in `window` as it begins."""

    def __init__(self, boundary: bytes, most_files: int, window: UploadWindow, address: str) -> None:
        self.most_files, self.window, self.address = most_files, window, address
        self.files = 0  # files begun, each counted against the address
        self.refusal: tuple[int, str] | None = None
        self._header = b""  # the part's header being read (name, then value)
        self._disposition = b""  # the part's Content-Disposition
        self._name: str | None = None  # the file name of the part being read (None: a plain field)
        self._bytes = 0  # of the part being read
        self._parser = MultipartParser(
            boundary,
            {
                "on_part_begin": self._begin,
                "on_header_field": self._header_field,
                "on_header_value": self._header_value,
                "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished,
                "on_part_data": self._data,
                "on_part_end": self._end,
            },
        )

    def write(self, chunk: bytes) -> None:
        """Read the next bytes of the body (nothing more once refused)."""
        if self.refusal is None:
            try:
                self._parser.write(chunk)
            except MultipartParseError as e:
                self._refuse(400, f"the upload is not a multipart form that can be read: {e}")

    def _refuse(self, status: int, message: str) -> None:
        if self.refusal is None:
            self.refusal = (status, message)

    def _begin(self) -> None:
        self._disposition, self._name, self._bytes = b"", None, 0

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        if self._header.lower() == b"content-disposition":
            self._disposition += data[start:end]

    def _header_end(self) -> None:
        self._header = b""

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        if b"filename" not in options:
            return
        self._name = options[b"filename"].decode("latin-1")[:80]
        if self.files >= self.most_files:
            self._refuse(
                413,
                f"an upload request carries at most {self.most_files} file(s) here (SPECVIZ_LIMIT_UPLOAD_FILES); "
                "this one carries more: send each file in a request of its own",
            )
        elif not self.window.take(self.address):
            self._refuse(429, self.window.spent(self.address))
        else:
            self.files += 1

    def _data(self, data: bytes, start: int, end: int) -> None:
        self._bytes += end - start

    def _end(self) -> None:
        if self._name is not None and not self._bytes:
            self._refuse(400, f"the file {self._name!r} is empty (0 bytes): there is nothing to upload")


class HeldAnswer:
    """What the app sends back: passed on, or dropped when `held()` says the request was refused
    (gradio's answer to the refusal its parser met; the middleware answers instead)."""

    def __init__(self, send: Send, held: Callable[[], bool]) -> None:
        self._send, self._held = send, held
        self.status: int | None = None
        self.holding = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status, self.holding = message["status"], self._held()
        if not self.holding:
            await self._send(message)


class UploadBounds:
    """ASGI middleware: every multipart request checked against the upload bounds of `limits`."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], limits: AppLimits) -> None:
        self.app, self.limits = app, limits
        self.window = UploadWindow(limits.uploads_per_address, limits.upload_window_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        boundary = multipart_boundary(scope)
        if boundary is None:
            await self.app(scope, receive, send)
            return
        address = scope_address(scope) or "(no address)"
        if not scope["path"].rstrip("/").endswith(UPLOAD_PATH):
            await self.refuse(send, address, 404, f"this app takes files at {UPLOAD_PATH} only")
            return
        if self.window.wait_s(address):  # refused before a byte is read
            await self.refuse(send, address, 429, self.window.spent(address))
            return
        check = PartsCheck(boundary, self.limits.upload_files, self.window, address)

        async def checked() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                check.write(message.get("body", b""))
                if check.refusal is not None:  # gradio's parser deletes what it stored of the request
                    raise MultiPartException(check.refusal[1])
            return message

        answer = HeldAnswer(send, lambda: check.refusal is not None)
        try:
            await self.app(scope, checked, answer.send)
        except MultiPartException:  # a route that lets the parser's refusal through (gradio's own catch it)
            if check.refusal is None:
                raise
        except BaseException:
            self.window.give_back(address, check.files)
            raise
        if check.refusal is not None or answer.status != 200:  # refused here, or by gradio: nothing is kept
            self.window.give_back(address, check.files)
        if check.refusal is not None:
            await self.refuse(send, address, *check.refusal)

    async def refuse(self, send: Send, address: str, status: int, message: str) -> None:
        """Answer with `message` as one plain line (429: with when to come back), and log it as one INFO line."""
        log.info("refused: %s", message)
        body = message.encode()
        head = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
        if status == 429:
            head.append((b"retry-after", str(max(1, self.window.wait_s(address))).encode()))
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": body})


def multipart_boundary(scope: Scope) -> bytes | None:
    """The boundary of an HTTP request with a multipart/form-data body (an upload); None for any other."""
    if scope["type"] != "http":
        return None
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            kind, options = parse_options_header(value)
            return options.get(b"boundary") if kind == b"multipart/form-data" else None
    return None
