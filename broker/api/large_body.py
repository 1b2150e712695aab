"""A large answer body written to the socket in pieces, with no copy of it in Python.

Why: on Python 3.11 an aiohttp ``web.Response`` joins its headers and body into one new bytes object
(``StreamWriter._writelines``), and asyncio's transport then copies whatever the socket did not take at once
twice more (``data[n:]`` of bytes, then into its buffer): for a REST read answer of 1-3 MB that was three
copies of the answer, about a seventh of the broker's CPU per read. Here the headers go out with a small first
piece and the rest as memoryview slices of the one body, each after the transport drained, so only the part of a
piece the socket does not take at once is ever copied.

Sent by aiohttp after the middlewares (which may still add headers) through ``prepare``, as ``web.FileResponse``
and broker/api/fetch.py's ``SegmentResponse`` are; Content-Length is the body's, so the bytes on the wire are
exactly what ``web.Response(body=...)`` would send.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

FIRST_PIECE = 16 * 1024  # goes out with the status line and headers (which aiohttp joins with it)
PIECE = 256 * 1024
LARGE = 256 * 1024  # below this a plain web.Response costs less than the pieces' awaits


class LargeBodyResponse(web.StreamResponse):
    def __init__(self, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(headers=headers)
        self.content_type = content_type
        self.content_length = len(body)
        self._body_bytes = body

    @property
    def body(self) -> bytes:
        """The whole body, as ``web.Response.body`` (client quotas count a fetch answer by it)."""
        return self._body_bytes

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self.prepared:
            return await super().prepare(request)
        writer = await super().prepare(request)
        if request.method != "HEAD":
            with memoryview(self._body_bytes) as view:
                await self.write(view[:FIRST_PIECE])
                for start in range(FIRST_PIECE, len(view), PIECE):
                    await self.write(view[start:start + PIECE])
        await super().write_eof()
        return writer


def body_response(body: bytes, content_type: str, headers: dict[str, str] | None = None) -> web.StreamResponse:
    """``web.Response(body=body, ...)``, or for a large body the same bytes sent in pieces."""
    if len(body) < LARGE:
        return web.Response(body=body, content_type=content_type, headers=headers)
    return LargeBodyResponse(body, content_type, headers)
