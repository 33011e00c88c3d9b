"""An ACF's `[kernel] path` led `flags` to a file of another name (red53 #4): an ACF of kernel
`transpose` whose path was forged to `../victim/other.cu` (or an absolute path to it) printed a CMake
snippet setting the tuned options on other.cu, another project's file. The file found is held to the
kernel's name, as the gate's locate already held it; `..` stays allowed (store/ ACFs point at
../kernels/x/x.cu)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import TINY_KERNEL, run_cli


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("acfpath")
    for folder in ("proj", "victim", "build"):
        (root / folder).mkdir()
    (root / "proj" / "scale.cu").write_text(TINY_KERNEL)
    (root / "victim" / "other.cu").write_text(TINY_KERNEL + "// victim\n")
    done = run_cli(["tune", "proj/scale.cu", "--budget", "1", "--workers", "local", "--no-simplify", "--arch", "sm_90",
                    "--db", f"sqlite:///{root / 't.db'}", "--out", "proj/s.acf.toml"], cwd=root)
    assert done.returncode == 0, done.describe()
    return root


@pytest.mark.parametrize("forged", ["../victim/other.cu", "ABSOLUTE"])
def test_flags_never_sets_options_on_a_file_of_another_name(tuned: Path, forged: str) -> None:
    path = str(tuned / "victim" / "other.cu") if forged == "ABSOLUTE" else forged
    text = (tuned / "proj" / "s.acf.toml").read_text()
    assert 'path = "scale.cu"' in text
    (tuned / "build" / "s.acf.toml").write_text(text.replace('path = "scale.cu"', f'path = "{path}"', 1))
    cmake = run_cli(["flags", "--format", "cmake", str(tuned / "build" / "s.acf.toml")], cwd=tuned)
    assert "other.cu" not in cmake.output, cmake.describe()
    assert cmake.returncode == 0 and "scale.cu" in cmake.stdout, cmake.describe()
    gate = run_cli(["gate", str(tuned / "build" / "s.acf.toml"), "--static"], cwd=tuned)  # refused, as it was
    assert gate.returncode == 2 and "is the ACF of kernel 'scale', not of" in gate.output, gate.describe()


def test_a_path_that_climbs_to_the_kernel_itself_is_still_found(tuned: Path) -> None:
    text = (tuned / "proj" / "s.acf.toml").read_text()
    (tuned / "build" / "up.acf.toml").write_text(text.replace('path = "scale.cu"', 'path = "../proj/scale.cu"', 1))
    cmake = run_cli(["flags", "--format", "cmake", str(tuned / "build" / "up.acf.toml")], cwd=tuned)
    assert cmake.returncode == 0, cmake.describe()
    assert _names(cmake.stdout, "proj/scale.cu"), cmake.stdout


def test_through_a_symlinked_folder_flags_names_the_file_the_gate_checks(tuned: Path) -> None:
    """rev53 #5: with store/ a symlink (proj2/store -> ../real/store) and the ACF's path
    ../kernels/scale.cu, the gate read real/kernels/scale.cu (the OS follows `store/..` through the
    link) while `flags` (and the gate's macro reading) took `store/..` as text and named
    proj2/kernels/scale.cu, another copy."""
    real, proj = tuned / "real", tuned / "proj2"
    for folder in (real / "store", real / "kernels", proj / "kernels"):
        folder.mkdir(parents=True)
    (real / "kernels" / "scale.cu").write_text(TINY_KERNEL)
    (proj / "kernels" / "scale.cu").write_text(TINY_KERNEL + "// a copy\n")
    (proj / "store").symlink_to(Path("..") / "real" / "store")
    text = (tuned / "proj" / "s.acf.toml").read_text()
    (real / "store" / "s.acf.toml").write_text(text.replace('path = "scale.cu"', 'path = "../kernels/scale.cu"', 1))
    cmake = run_cli(["flags", "--format", "cmake", "store/s.acf.toml"], cwd=proj)
    assert cmake.returncode == 0, cmake.describe()
    assert _names(cmake.stdout, "../real/kernels/scale.cu"), cmake.stdout  # from proj2, the folder flags ran in


def _names(snippet: str, path: str) -> bool:
    """Whether the cmake snippet sets its options on `path` (from the folder flags ran in), or says
    it has nothing to apply to that file (an ACF that keeps the build's own settings)."""
    return (f'set_source_files_properties("${{CMAKE_CURRENT_SOURCE_DIR}}/{path}"' in snippet
            or f"# compileiq: nothing to apply to {path}: " in snippet)
