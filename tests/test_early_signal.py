"""A Ctrl-C or SIGTERM while the package itself loads (red54 F6): the command's first milliseconds,
before the CLI's own handlers go in, said a KeyboardInterrupt traceback (rc 1, or -2). From the
package's first line on it is the one line and 130 (143); imported by a program, the package leaves
that program's signals alone.

The signal is sent by an import hook the moment `compileiq.core.version` is imported (in the
package's `__init__`, before the CLI is), so it lands in that window every time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env, compileiq_command

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="signals as Linux delivers them")

HOOK = """\
import importlib.abc, os, signal, sys

class _SignalOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "compileiq.core.version":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), getattr(signal, os.environ["SEND_SIGNAL"]))
        return None

sys.meta_path.insert(0, _SignalOnImport())
"""


def _env(hook: Path, number: signal.Signals) -> dict[str, str]:
    paths = [str(hook), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return clean_env({"PYTHONPATH": os.pathsep.join(paths), "SEND_SIGNAL": number.name})


@pytest.fixture
def hook(tmp_path: Path) -> Path:
    (tmp_path / "sitecustomize.py").write_text(HOOK)
    return tmp_path


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("how", ["console script", "python -m"])
def test_a_signal_while_the_package_loads_says_one_line(hook: Path, number: signal.Signals, how: str) -> None:
    command = [compileiq_command()] if how == "console script" else [sys.executable, "-m", "compileiq"]
    done = subprocess.run([*command, "--version"], env=_env(hook, number), capture_output=True, text=True,
                          timeout=120, check=False)
    said = "interrupted" if number == signal.SIGINT else "terminated (SIGTERM)"
    assert (done.returncode, done.stderr, done.stdout) == (128 + number, f"{said}\n", ""), done


@pytest.mark.parametrize("arguments", [[], ["-m", "compileiq"], ["--engine", "-m", "compileiq"]])
def test_a_program_importing_the_package_keeps_its_own_ctrl_c(hook: Path, arguments: list[str]) -> None:
    """Not the command: its KeyboardInterrupt is its own to catch, the package's load notwithstanding,
    whatever its own arguments say (rev54 3: `prog -m compileiq` was taken for `python -m compileiq`)."""
    program = "try:\n    import compileiq\nexcept KeyboardInterrupt:\n    print('caught')\n"
    done = subprocess.run([sys.executable, "-c", program, *arguments], env=_env(hook, signal.SIGINT),
                          capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout) == (0, "caught\n"), done
