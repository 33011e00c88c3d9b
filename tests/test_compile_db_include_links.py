"""An include folder of a compile command that is (or passes through) a symlink is recorded as the
command names it (`/usr/local/cuda/include`, not this CUDA's `cuda-13.0`): after an upgrade the
link names the new headers, and an ACF that baked in the link's target would mix old headers with
a new nvcc. The real folder is still what bundling and the include checks read."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.helpers import LOOP_KERNEL, run_cli


def _linked(tmp_path: Path) -> Path:
    real = tmp_path / "toolkit-13.0" / "include"
    real.mkdir(parents=True)
    (real / "scale.h").write_text("#define SCALE 2.0f\n")
    (tmp_path / "toolkit-13.0" / "sys").mkdir()
    (tmp_path / "toolkit").symlink_to(tmp_path / "toolkit-13.0")
    return tmp_path / "toolkit" / "include"


def test_a_linked_include_folder_is_recorded_and_printed_as_the_command_names_it(tmp_path: Path) -> None:
    folder = _linked(tmp_path)
    (tmp_path / "k.cu").write_text('#include "scale.h"\n' + LOOP_KERNEL)
    (tmp_path / "compile_commands.json").write_text(json.dumps([{
        "directory": str(tmp_path), "file": "k.cu",
        "command": f"nvcc -arch=sm_90 -I{folder} -isystem ./toolkit/./sys -c k.cu -o k.o"}]))
    done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--objective", "registers",
                    "--budget", "2", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    acf = tomllib.loads(next((tmp_path / "store").glob("*.acf.toml")).read_text())
    flags = " ".join(acf["base"]["nvcc_flags"])
    assert "toolkit-13.0" not in flags, flags
    assert "-Itoolkit/include" in acf["base"]["nvcc_flags"], flags  # relative to the kernel's folder, as ever
    assert "-isystem=toolkit/sys" in acf["base"]["nvcc_flags"], flags
    printed = run_cli(["flags", str(next((tmp_path / "store").glob("*.acf.toml"))), "--all"], cwd=tmp_path)
    assert printed.returncode == 0, printed.describe()
    assert "-Itoolkit/include" in printed.stdout.split() and "toolkit-13.0" not in printed.stdout, printed.describe()
    gate = run_cli(["gate", str(next((tmp_path / "store").glob("*.acf.toml"))), "--static", "--compile-commands",
                    "compile_commands.json"], cwd=tmp_path)  # the gate reads the command alike
    assert gate.returncode == 0 and "stale-settings" not in gate.output, gate.describe()


def test_a_dotdot_after_a_link_keeps_naming_the_folder_the_compiler_reads(tmp_path: Path) -> None:
    """`link/../x` is the link target's sibling for the compiler: normalising it without following
    the link would name another folder, so such a path stays resolved."""
    _linked(tmp_path)
    (tmp_path / "toolkit-13.0" / "lib").mkdir()
    (tmp_path / "toolkit-13.0" / "lib" / "scale.h").write_text("#define SCALE 2.0f\n")
    deep = tmp_path / "deep"
    deep.mkdir()
    (deep / "in").symlink_to(tmp_path / "toolkit-13.0" / "include")
    (tmp_path / "k.cu").write_text('#include "scale.h"\n' + LOOP_KERNEL)
    (tmp_path / "compile_commands.json").write_text(json.dumps([{
        "directory": str(tmp_path), "file": "k.cu", "command": "nvcc -arch=sm_90 -Ideep/in/../lib -c k.cu -o k.o"}]))
    done = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()


@pytest.mark.skipif(not Path("/usr/local/cuda").is_symlink(), reason="needs the /usr/local/cuda link")
def test_the_cuda_include_link_stays_the_link(tmp_path: Path) -> None:
    """The user's report: `-I/usr/local/cuda/include` became `-I/usr/local/cuda-13.0/include`."""
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    (tmp_path / "compile_commands.json").write_text(json.dumps([{
        "directory": str(tmp_path), "file": "k.cu",
        "command": "nvcc -arch=sm_90 -I/usr/local/cuda/include -c k.cu -o k.o"}]))
    done = run_cli(["tune", "k.cu", "--compile-commands", "compile_commands.json", "--objective", "registers",
                    "--budget", "2", "--workers", "local", "--db", f"sqlite:///{tmp_path / 't.db'}"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    acf = next((tmp_path / "store").glob("*.acf.toml"))
    assert tomllib.loads(acf.read_text())["base"]["nvcc_flags"] == ["-I/usr/local/cuda/include"]
    printed = run_cli(["flags", str(acf), "--all"], cwd=tmp_path)
    assert "-I/usr/local/cuda/include" in printed.stdout.split(), printed.describe()
