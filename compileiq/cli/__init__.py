"""The `compileiq` command (`commands`): typed options, one library call each; rendering lives in
`render`, `listings`, `progress` and `json_views`.

The top of the layers with `app` (wiring) and `api` (the Python API): it may import any stage.
The only importer of typer and rich. Loading it (typer, rich, the stages) takes a few tenths of a
second, before `main` takes SIGINT and SIGTERM over: a Ctrl-C meanwhile says the one line
`main` would say and exits 130 (`signals.loading`), with no KeyboardInterrupt traceback."""

from __future__ import annotations

from compileiq.cli.signals import loading

with loading():
    from compileiq.cli.commands import cli, main

__all__ = ["cli", "main"]
