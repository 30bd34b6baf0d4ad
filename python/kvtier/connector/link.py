"""link.py — one connection to kvtierd that survives kvtierd going away: it is
opened again when it is next needed, at most once every reconnect_ms, and
an operation found on a dead connection (kvtierd restarted since its last
use) is made once more on a new one. The scheduler's lookup client and the
worker's pipeline are each one Link."""

import logging
import time
from typing import Callable, Generic, Optional, TypeVar

log = logging.getLogger("kvtier.connector")

T = TypeVar("T")
R = TypeVar("R")


class Unreachable(ConnectionError):
    """kvtierd did not answer (the connection is lost and cannot be opened yet)."""


class Link(Generic[T]):
    def __init__(self, open_conn: Callable[[], T], reconnect_ms: int, who: str) -> None:
        """open_conn(): a new connection, or an OSError; who names the side in the log."""
        self.open_conn = open_conn
        self.reconnect_ms = reconnect_ms
        self.who = who
        self.conn: Optional[T] = None
        self.last_try = 0.0

    def open(self) -> T:
        """Opens the connection now; its error goes to the caller."""
        self.last_try = time.monotonic()
        self.conn = self.open_conn()
        return self.conn

    def usable(self) -> Optional[T]:
        """The connection, opened again if it was lost and reconnect_ms has passed since the
        last try; None if not."""
        if self.conn is None and time.monotonic() - self.last_try >= self.reconnect_ms / 1000:
            try:
                self.open()
                log.info("kvtier: %s connected to kvtierd again", self.who)
            except OSError as e:
                log.warning("kvtier: %s: kvtierd still unreachable: %s", self.who, e)
                self.conn = None
        return self.conn

    def drop(self) -> None:
        """Closes the connection (quietly: it may be dead) and forgets it."""
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()  # type: ignore[attr-defined]
            except OSError:
                pass

    def run(self, op: Callable[[T], R], lost: Callable[[OSError], bool],
            on_lost: Callable[[OSError], None], retry: bool = True) -> R:
        """op(conn); an error for which lost(e) holds calls on_lost(e) (which drops the
        connection) and, when retry, op runs once more on a new connection. Unreachable
        when there is none; any other error goes to the caller after on_lost."""
        tries = 2 if retry else 1
        while True:
            tries -= 1
            conn = self.usable()
            if conn is None:
                raise Unreachable(f"kvtier: {self.who}: kvtierd unreachable")
            try:
                return op(conn)
            except OSError as e:
                on_lost(e)
                if tries == 0 or not lost(e):
                    raise
