"""Connection states as data (h11-style): the table is the single source of
truth; ``tools/docs/state_diagrams.py`` can draw it into docs."""

from __future__ import annotations

import enum


class ConnState(enum.Enum):
    # Identity hash: Enum's own __hash__ is Python code (hash of the name),
    # paid on every dict/set lookup of a state on the per-packet paths.
    __hash__ = object.__hash__

    HANDSHAKING = "handshaking"
    ESTABLISHED = "established"
    #: close() was called; waiting for everything sent to be acknowledged.
    DRAINING = "draining"
    #: CLOSE sent; waiting for the peer's CLOSE.
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


class ConnEvent(enum.Enum):
    # Identity hash: Enum's own __hash__ is Python code (hash of the name),
    # paid on every dict/set lookup of a state on the per-packet paths.
    __hash__ = object.__hash__

    ACCEPT_RECEIVED = "accept_received"
    INIT_ACCEPTED = "init_accepted"
    CLOSE_CALLED = "close_called"
    ALL_ACKED = "all_acked"
    CLOSE_RECEIVED = "close_received"
    CLOSE_TIMEOUT = "close_timeout"
    RESET_RECEIVED = "reset_received"
    RESET_CALLED = "reset_called"
    HANDSHAKE_TIMEOUT = "handshake_timeout"
    RETRY_BUDGET_SPENT = "retry_budget_spent"
    #: UNKNOWN_CONN: the peer restarted or forgot the connection.
    PEER_FORGOT = "peer_forgot"
    #: A responder half-open or idle for too long is forgotten.
    EXPIRED = "expired"
    #: The peer broke the protocol (inconsistent slices, SACK beyond what was sent).
    PROTOCOL_ERROR = "protocol_error"


S, E = ConnState, ConnEvent

TRANSITIONS: dict[tuple[ConnState, ConnEvent], ConnState] = {
    (S.HANDSHAKING, E.ACCEPT_RECEIVED): S.ESTABLISHED,
    (S.HANDSHAKING, E.INIT_ACCEPTED): S.ESTABLISHED,
    (S.HANDSHAKING, E.HANDSHAKE_TIMEOUT): S.FAILED,
    (S.HANDSHAKING, E.RESET_CALLED): S.FAILED,
    (S.HANDSHAKING, E.CLOSE_CALLED): S.CLOSED,
    (S.ESTABLISHED, E.CLOSE_CALLED): S.DRAINING,
    (S.ESTABLISHED, E.CLOSE_RECEIVED): S.CLOSED,
    (S.ESTABLISHED, E.RESET_RECEIVED): S.FAILED,
    (S.ESTABLISHED, E.RESET_CALLED): S.FAILED,
    (S.ESTABLISHED, E.RETRY_BUDGET_SPENT): S.FAILED,
    (S.ESTABLISHED, E.PEER_FORGOT): S.FAILED,
    (S.ESTABLISHED, E.PROTOCOL_ERROR): S.FAILED,
    (S.ESTABLISHED, E.EXPIRED): S.CLOSED,
    (S.DRAINING, E.ALL_ACKED): S.CLOSING,
    (S.DRAINING, E.CLOSE_RECEIVED): S.CLOSED,
    (S.DRAINING, E.RESET_RECEIVED): S.FAILED,
    (S.DRAINING, E.RESET_CALLED): S.FAILED,
    (S.DRAINING, E.RETRY_BUDGET_SPENT): S.FAILED,
    (S.DRAINING, E.PEER_FORGOT): S.FAILED,
    (S.DRAINING, E.PROTOCOL_ERROR): S.FAILED,
    (S.CLOSING, E.CLOSE_RECEIVED): S.CLOSED,
    (S.CLOSING, E.CLOSE_TIMEOUT): S.CLOSED,
    (S.CLOSING, E.RESET_RECEIVED): S.CLOSED,
    (S.CLOSING, E.RESET_CALLED): S.FAILED,
    (S.CLOSING, E.PROTOCOL_ERROR): S.FAILED,
    (S.CLOSING, E.PEER_FORGOT): S.CLOSED,
}

del S, E

TERMINAL = frozenset({ConnState.CLOSED, ConnState.FAILED})


class InvalidTransition(RuntimeError):
    pass


def next_state(state: ConnState, event: ConnEvent) -> ConnState:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransition(f"{event.value} in state {state.value}") from None
