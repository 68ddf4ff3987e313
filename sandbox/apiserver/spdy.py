"""The few SPDY/3.1 frames a port-forward session needs, server side, as moby/spdystream
(the framer client-go and the kubelet use) reads and writes them.

kubectl port-forward (1.31 and later, PortForwardWebsockets) tunnels SPDY through a WebSocket
(subprotocol "SPDY/3.1+portforward.k8s.io"): the binary messages carry the SPDY byte stream.
There, kubectl is the SPDY client: it opens streams (SYN_STREAM, odd ids, headers compressed
with zlib and the SPDY/3 dictionary, one compression context per direction), sends DATA, closes
its half with a FIN, and pings. The server answers each SYN_STREAM with a SYN_REPLY, echoes
pings, sends DATA and FINs. No flow control: spdystream keeps no windows.

No library speaks SPDY/3.1 (it is long retired from the web); this module is only that.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
RST_CANCEL = 5

# The SPDY/3 header compression dictionary (draft-mbelshe-httpbis-spdy-00, 2.6.10.1): names
# and values each with a 32-bit length, then status lines, dates and types as one string.
_DICT_WORDS = (
    "options head post put delete trace accept accept-charset accept-encoding accept-language accept-ranges age "
    "allow authorization cache-control connection content-base content-encoding content-language content-length "
    "content-location content-md5 content-range content-type date etag expect expires from host if-match "
    "if-modified-since if-none-match if-range if-unmodified-since last-modified location max-forwards pragma "
    "proxy-authenticate proxy-authorization range referer retry-after server te trailer transfer-encoding upgrade "
    "user-agent vary via warning www-authenticate method get status").split() + [
    "200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"]
_DICT_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.")
DICTIONARY = b"".join(struct.pack("!I", len(w)) + w.encode() for w in _DICT_WORDS) + _DICT_TAIL.encode()


class ProtocolError(Exception):
    """The peer sent what SPDY/3.1 does not allow (the session ends)."""


@dataclass
class Frame:
    type: int  # 0: DATA, else the control frame's type
    flags: int
    stream_id: int = 0
    data: bytes = b""
    headers: dict[str, list[str]] = field(default_factory=dict)
    value: int = 0  # PING id, RST_STREAM / GOAWAY status

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


class Reader:
    """Frames from the bytes received so far (a frame may span WebSocket messages)."""

    def __init__(self):
        self._buf = bytearray()
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames = []
        while len(self._buf) >= 8:
            first, flags_len = struct.unpack_from("!II", self._buf)
            length = flags_len & 0xFFFFFF
            if len(self._buf) < 8 + length:
                break
            body = bytes(self._buf[8:8 + length])
            del self._buf[:8 + length]
            flags = flags_len >> 24
            if not first & 0x80000000:
                frames.append(Frame(0, flags, first & 0x7FFFFFFF, body))
                continue
            version, kind = (first >> 16) & 0x7FFF, first & 0xFFFF
            if version != VERSION:
                raise ProtocolError(f"unsupported SPDY version {version}")
            frames.append(self._control(kind, flags, body))
        return frames

    def _control(self, kind: int, flags: int, body: bytes) -> Frame:
        if kind == SYN_STREAM:
            stream_id = struct.unpack_from("!I", body)[0] & 0x7FFFFFFF
            return Frame(kind, flags, stream_id, headers=self._headers(body[10:]))
        if kind in (SYN_REPLY, HEADERS):
            stream_id = struct.unpack_from("!I", body)[0] & 0x7FFFFFFF
            return Frame(kind, flags, stream_id, headers=self._headers(body[4:]))
        if kind in (RST_STREAM, GOAWAY, WINDOW_UPDATE):
            stream_id, value = struct.unpack_from("!II", body)
            return Frame(kind, flags, stream_id & 0x7FFFFFFF, value=value)
        if kind == PING:
            return Frame(kind, flags, value=struct.unpack_from("!I", body)[0])
        return Frame(kind, flags, data=body)  # SETTINGS and what spdystream would refuse: ignored

    def _headers(self, block: bytes) -> dict[str, list[str]]:
        try:
            raw = self._inflate.decompress(block)
        except zlib.error as exc:
            raise ProtocolError(f"header block: {exc}") from None
        count, pos, out = struct.unpack_from("!I", raw)[0], 4, {}
        for _ in range(count):
            (n,) = struct.unpack_from("!I", raw, pos)
            name = raw[pos + 4:pos + 4 + n].decode().lower()
            pos += 4 + n
            (n,) = struct.unpack_from("!I", raw, pos)
            out.setdefault(name, []).extend(raw[pos + 4:pos + 4 + n].decode().split("\x00"))
            pos += 4 + n
        return out


class Writer:
    """Frames to send; header blocks share one compression context, as spdystream's framer."""

    def __init__(self):
        self._deflate = zlib.compressobj(9, zdict=DICTIONARY)

    def _control(self, kind: int, flags: int, payload: bytes) -> bytes:
        return struct.pack("!HHI", 0x8000 | VERSION, kind, (flags << 24) | len(payload)) + payload

    def _block(self, headers: dict[str, str]) -> bytes:
        raw = struct.pack("!I", len(headers)) + b"".join(
            struct.pack("!I", len(k)) + k.lower().encode() + struct.pack("!I", len(v)) + v.encode()
            for k, v in headers.items())
        return self._deflate.compress(raw) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    def syn_reply(self, stream_id: int, headers: dict[str, str] | None = None) -> bytes:
        return self._control(SYN_REPLY, 0, struct.pack("!I", stream_id) + self._block(headers or {}))

    def data(self, stream_id: int, data: bytes, fin: bool = False) -> bytes:
        return struct.pack("!II", stream_id, ((FLAG_FIN if fin else 0) << 24) | len(data)) + data

    def ping(self, ping_id: int) -> bytes:
        return self._control(PING, 0, struct.pack("!I", ping_id))

    def rst_stream(self, stream_id: int, status: int = RST_CANCEL) -> bytes:
        return self._control(RST_STREAM, 0, struct.pack("!II", stream_id, status))

    def goaway(self, last_stream_id: int) -> bytes:
        return self._control(GOAWAY, 0, struct.pack("!II", last_stream_id, 0))
