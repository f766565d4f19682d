"""Length-prefixed JSON frames over a stream socket (host <-> cell control channel)."""

from __future__ import annotations

import json
import socket
import struct

_HEADER = struct.Struct("!I")
MAX_FRAME = 64 * 1024 * 1024


def send_frame(sock: socket.socket, obj: object) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(_HEADER.pack(len(data)) + data)


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> object | None:
    """Blocking read of one frame; None on a clean EOF."""
    header = recv_exact(sock, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes exceeds {MAX_FRAME}")
    body = recv_exact(sock, size)
    if body is None:
        return None
    return json.loads(body)


class FrameBuffer:
    """Incremental decoder for a non-blocking reader."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self.max_frame = max_frame

    def feed(self, data: bytes) -> list[object]:
        """Complete frames so far. Raises ValueError on an oversized or undecodable frame."""
        self._buf += data
        frames = []
        while len(self._buf) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buf)
            if size > self.max_frame:
                raise ValueError(f"frame of {size} bytes exceeds {self.max_frame}")
            if len(self._buf) < _HEADER.size + size:
                break
            frames.append(json.loads(bytes(self._buf[_HEADER.size : _HEADER.size + size])))
            del self._buf[: _HEADER.size + size]
        return frames
