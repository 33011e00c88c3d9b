"""The one exception family the CLI turns into a one-line message and a non-zero exit."""


class CompileIQError(Exception):
    """A domain error whose message is fit to show a user as it is (one line, no secrets)."""

    exit_code = 1


class UsageError(CompileIQError):
    """Bad input from the user: a missing file, a malformed spec, an unknown option value."""

    exit_code = 2


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI job cancelled, `kill`), raised in the main thread as Ctrl-C's KeyboardInterrupt
    is (`cli.signals`): every stop that handles one handles the other; what is recorded names it."""
