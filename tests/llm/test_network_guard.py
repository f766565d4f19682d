"""The guard fixture itself: any attempt to reach a non-loopback host fails the test."""

from __future__ import annotations

import socket

import pytest


def test_guard_blocks_non_loopback_connections(network_guard):
    s = socket.socket()
    try:
        with pytest.raises(ConnectionRefusedError, match="network guard"):
            s.connect(("203.0.113.7", 443))  # TEST-NET-3: would be a real packet without the guard
    finally:
        s.close()
    with pytest.raises(socket.gaierror, match="network guard"):
        socket.getaddrinfo("api.openai.com", 443)
    assert len(network_guard) == 2
    network_guard.clear()  # this test caused them on purpose


def test_guard_lets_loopback_through(server, network_guard):
    with socket.create_connection(("127.0.0.1", server.port), timeout=2):
        pass
    assert network_guard == []
