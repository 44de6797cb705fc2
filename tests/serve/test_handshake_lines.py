"""A handshake line from a stranger is refused, whatever JSON it holds (a fresh attack on
issue 32, item 1).

A line of at most 1,024 bytes can still nest a thousand arrays: ``json.loads`` then raises
RecursionError, which neither side of the handshake took for a bad line. A squatter on a
dead owner's loopback port (any local user can take one) sent it to every client, which
failed with a traceback instead of "the owner did not prove itself" (and waited for the
file); a stranger sent it to a live owner, whose connection thread died with a traceback
on stderr, once per connection.
"""

from __future__ import annotations

import socket
import threading

import pytest

from hybridkb.serve.handshake import OwnerNotProven, client_handshake, owner_handshake

NESTED = b"[" * 1000 + b"\n"  # within the line's 1,024 bytes
TOKEN = "t" * 64


def test_a_squatters_nested_line_is_an_owner_not_proven() -> None:
    client, squatter = socket.socketpair()
    with client, squatter:
        client.settimeout(30)
        squatter.sendall(NESTED)  # its answer to the hello, already waiting
        with pytest.raises(OwnerNotProven):
            client_handshake(client, TOKEN)


def test_a_strangers_nested_line_is_refused_by_the_owner() -> None:
    owner, stranger = socket.socketpair()
    failures: list[BaseException] = []

    def answer() -> None:
        try:
            owner_handshake(owner, TOKEN)
        except (OSError, ValueError):
            pass  # refused, as OwnerServer._prove takes it
        except BaseException as exc:  # noqa: BLE001 - what the owner's thread died of
            failures.append(exc)

    with owner, stranger:
        owner.settimeout(30)
        stranger.sendall(NESTED)
        thread = threading.Thread(target=answer)
        thread.start()
        thread.join()
    assert failures == []
