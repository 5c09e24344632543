"""Errors meant for the user: printed as one line, exit status 2, never a traceback."""


class UserError(Exception):
    """Bad input: spec, topology, host name, missing binary. The message is the whole story."""
