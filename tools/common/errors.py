"""Errors the CLI reports as one line, without a traceback."""


class UserError(Exception):
    """Something the user can fix: bad config, unknown peer, port in use, ..."""
