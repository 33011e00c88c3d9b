"""userfix 3: with --compile-commands, tune.toml's `arch = "sm_86"` was replaced by the command's sm_90
in silence (`space` and `tune`): a note says which arch is tuned and why."""

from __future__ import annotations

from pathlib import Path

from helpers import LOOP_KERNEL, compile_commands_file, run_cli, tune_in

SAYS = ('note: tuning sm_90, the arch the compile command builds (compile_commands.json), not tune.toml\'s '
        'arch = "sm_86": with --compile-commands the command\'s arch is tuned; --arch sm_86 tunes that one')


def _kernel(folder: Path, arch: str = "sm_86") -> None:
    (folder / "k.cu").write_text(LOOP_KERNEL)
    (folder / "tune.toml").write_text(f'arch = "{arch}"\n')
    compile_commands_file(folder, "nvcc -O3 -arch=sm_90 -c k.cu -o k.o")


def test_space_and_tune_say_the_compile_command_chose_the_arch(tmp_path: Path) -> None:
    _kernel(tmp_path)
    space = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert space.returncode == 0 and SAYS in space.stderr_lines, space.describe()
    tuned = tune_in(tmp_path, "--compile-commands", "compile_commands.json", budget=1)
    assert tuned.returncode == 0 and SAYS in tuned.stderr_lines, tuned.describe()
    (tmp_path / "k.acf.toml").unlink()
    chosen = tune_in(tmp_path, "--compile-commands", "compile_commands.json", "--arch", "sm_86", budget=1)
    assert chosen.returncode == 0, chosen.describe()  # --arch says it overrides the command's, as before
    assert not any("tuning sm_90" in line for line in chosen.stderr_lines), chosen.describe()
    assert "note: --arch sm_86 overrides the arch sm_90 that the compile command gives" in chosen.stderr_lines


def test_no_note_where_tune_toml_and_the_command_agree(tmp_path: Path) -> None:
    _kernel(tmp_path, "sm_90")
    space = run_cli(["space", "k.cu", "--compile-commands", "compile_commands.json"], cwd=tmp_path)
    assert space.returncode == 0 and not any("tuning sm_" in line for line in space.stderr_lines), space.describe()
