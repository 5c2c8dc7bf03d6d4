"""The items of an iterator made on the machine's other core: a forked process runs it and
sends each item back through a pipe while the caller works on the previous one.

`mnemos import` reads, parses and checks the file this way (`transfer_import.py`) while its own
process only writes to the database: the two halves of an import take about as long as each
other, and one process did both in turn. The pipe holds about one item in flight, so the child
runs ahead by one batch and memory stays bounded. The child touches nothing but the iterator it
is given (never the caller's database connection, which it inherits) and ends with `os._exit`,
so nothing of the caller's is closed or flushed twice.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, TypeVar

from mnemos.storage.transfer import TransferError

T = TypeVar("T")
_ITEM, _END, _REFUSED, _FAILED = range(4)


def made_aside(produce: Callable[[], Iterator[T]]) -> Iterator[T]:
    """The items of `produce()`, made in a forked process; what it raises is raised here (a
    `TransferError` as it was, anything else as RuntimeError). Where processes cannot be forked,
    the items are made here, in turn with the caller's work."""
    if "fork" not in multiprocessing.get_all_start_methods():
        yield from produce()
        return
    context = multiprocessing.get_context("fork")
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_send_all, args=(produce, sending), daemon=True)
    child.start()
    sending.close()
    try:
        while True:
            try:
                kind, payload = receiving.recv()
            except EOFError:
                raise RuntimeError("the process reading the file ended without a word") from None
            if kind == _ITEM:
                yield payload
            elif kind == _END:
                return
            elif kind == _REFUSED:
                raise TransferError(*payload)
            else:
                raise RuntimeError(f"the process reading the file failed: {payload}")
    finally:
        receiving.close()
        if child.is_alive():
            child.terminate()  # the caller stopped early (a refusal): nothing more is wanted
        child.join()


def _send_all(produce: Callable[[], Iterator[Any]], sending: Connection) -> None:
    """In the child: every item, then the end or what stopped it."""
    ForkingPickler.register(memoryview, _as_bytes)  # the drivers' form of a bytes value
    try:
        for item in produce():
            sending.send((_ITEM, item))
        sending.send((_END, None))
    except TransferError as exc:
        sending.send((_REFUSED, (exc.message, exc.details)))
    except BrokenPipeError:  # the caller is gone
        return
    except Exception as exc:  # a fault of Mnemos: the caller reports it
        sending.send((_FAILED, f"{type(exc).__name__}: {exc}"))
    finally:
        sending.close()


def _as_bytes(view: memoryview) -> tuple[type[memoryview], tuple[bytes]]:
    return memoryview, (view.tobytes(),)
