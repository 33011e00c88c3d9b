"""Real toolchains (issue 24, item 5): nvcc and ptxas reached through wrapper scripts (ccache, conda,
spack, a module system, ~/bin/nvcc) in a folder above the project. The toolkit's own folder is the
one nvcc reports, so the project's files are still the project's: they are bundled and built."""

from __future__ import annotations

from pathlib import Path

from helpers import TINY_KERNEL, run_cli, slow_toolchain

from compileiq.core.toolchain import cuda_root, find_toolchain
from compileiq.results import acf


def test_the_toolkit_folder_is_what_nvcc_reports_not_where_its_wrapper_lies(tmp_path: Path) -> None:
    slow_toolchain(tmp_path, 0)  # tmp_path/bin/nvcc: a script that execs the real one
    real = cuda_root(find_toolchain().nvcc)
    assert (real / "include" / "cuda_runtime.h").is_file() or (real / "targets").is_dir()
    assert cuda_root(str(tmp_path / "bin" / "nvcc")) == real != tmp_path


def test_a_project_below_the_wrappers_folder_tunes_and_gates(tmp_path: Path) -> None:
    env = slow_toolchain(tmp_path, 0)  # CUDA_HOME=tmp_path: its bin/ holds the wrapper scripts
    project = tmp_path / "work" / "project"
    project.mkdir(parents=True)
    (project / "scale.cuh").write_text(TINY_KERNEL)
    (project / "k.cu").write_text('#include "scale.cuh"\n')
    result = run_cli(["tune", "k.cu", "--budget", "4", "--workers", "local", "--db", "sqlite:///t.db"],
                     cwd=project, env=env)
    assert result.returncode == 0, result.describe()
    written = acf.read(project / "store" / "k.static.acf.toml")
    assert written.kernel == "k"
    gated = run_cli(["gate", "store/k.static.acf.toml", "--static"], cwd=project, env=env)
    assert gated.returncode == 0, gated.describe()
