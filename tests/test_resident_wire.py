"""The resident's messages (``silica.resident.send``/``receive``): a length, then JSON, with
descriptors riding along. Whatever bytes arrive, ``receive`` gives a message, the end of the
connection, or ``ValueError``; it never crashes the resident nor leaks a descriptor."""

from __future__ import annotations

import os
import socket
import struct
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from silica import resident

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=5),
    max_leaves=20)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=20), JSON, max_size=8))
def test_a_message_arrives_as_sent_with_its_descriptors(message):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    r, w = os.pipe()
    try:
        resident.send(a, message, [r])
        got, fds = resident.receive(b, max_fds=3)
        assert got == message
        assert len(fds) == 1 and os.fstat(fds[0]).st_ino == os.fstat(r).st_ino
        os.close(fds[0])
    finally:
        for fd in (r, w):
            os.close(fd)
        a.close()
        b.close()


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300) | st.builds(
    lambda body, extra: struct.pack("!I", len(body) + extra) + body,
    st.binary(max_size=200), st.integers(0, 3)))
def test_any_bytes_give_a_message_the_end_or_value_error(data):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    writer = threading.Thread(target=lambda: (a.sendall(data), a.shutdown(socket.SHUT_WR)))
    writer.start()
    try:
        got, fds = resident.receive(b, max_fds=3)
        assert got is None or isinstance(got, dict)
        assert fds == []
    except ValueError:
        pass
    finally:
        writer.join()
        a.close()
        b.close()


def test_a_message_over_the_limit_is_refused_before_it_is_read():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        a.sendall(struct.pack("!I", resident.MAX_MESSAGE + 1))
        try:
            resident.receive(b)
        except ValueError as exc:
            assert "too long" in str(exc)
        else:
            raise AssertionError("a message over the limit was read")
    finally:
        a.close()
        b.close()
