"""The `compileiq` command (`commands`): typed options, one library call each; rendering lives in
`render`, `listings`, `progress` and `json_views`.

The top of the layers with `app` (wiring) and `api` (the Python API): it may import any stage.
The only importer of typer and rich. Loading it (typer, rich, the stages) takes a few tenths of a
second: run as the command (`main`), SIGINT and SIGTERM are taken over first and a Ctrl-C meanwhile
says the one line and exits 130 (`signals.loading`), with no KeyboardInterrupt traceback;
imported, it loads as any module."""

from __future__ import annotations

from compileiq.cli.signals import installed, late, loading

__all__ = ["cli", "main"]


def main(argv: list[str] | None = None) -> None:
    """The console script and `python -m compileiq` (`argv`: the arguments, default sys.argv's):
    SIGINT and SIGTERM taken over first, the commands loaded under `loading` (a Ctrl-C meanwhile
    ends this process alone, with the one line), then run."""
    try:
        with installed():
            with loading():
                from compileiq.cli.commands import main as run
            run(argv)
    except KeyboardInterrupt:  # one that came as the command returned, outside its own handling
        late()


def __getattr__(name: str) -> object:
    """`cli` (the typer app) for an importer (tests, docs): loaded plainly, so a Ctrl-C while a
    library or notebook imports it is its own KeyboardInterrupt, not the end of its process."""
    if name == "cli":
        from compileiq.cli.commands import cli
        return cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
