"""The testbed's own error: something the user can fix (a bad topology key, a
name already up, a malformed fault). The CLI (``tools.cli``) reports it as one
line without a traceback, like ``tools.common.errors.UserError``."""


class TestbedError(Exception):
    """A testbed request the user can fix; the message names what and where."""

    __test__ = False  # not a pytest test class despite its name
