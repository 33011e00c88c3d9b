"""Where a user's build begins: `compileiq flags --format ...` and the CMake package, checked with
real CMake and real nvcc against what the ACF recorded."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import (
    LOOP_KERNEL,
    clean_env,
    compileiq_command,
    run_cli,
    tuned_from_command,
    venv_tool,
)

from compileiq.core.space_files import load_space
from compileiq.results import acf, flag_formats

REPO = Path(__file__).resolve().parents[1]
ENTRY = "spill_heavy"
SOURCE = "kernels/spill_heavy/spill_heavy.cu"


def cmake_command() -> str:
    return venv_tool("cmake", "pip install -e '.[test]' installs it")


@dataclass(frozen=True)
class PtxasFacts:
    registers: int
    spill_bytes: int


def ptxas_facts(output: str, entry: str = ENTRY) -> PtxasFacts:
    """Registers and spill bytes of one entry, from `-Xptxas -v` output."""
    found = re.search(
        rf"Function properties for {entry}\n\s*\d+ bytes stack frame, (\d+) bytes spill stores, "
        rf"(\d+) bytes spill loads\n.*?Used (\d+) registers",
        output,
        re.DOTALL,
    )
    assert found, f"no ptxas -v report for {entry} in:\n{output}"
    return PtxasFacts(registers=int(found[3]), spill_bytes=int(found[1]) + int(found[2]))


@dataclass(frozen=True)
class Tuned:
    root: Path  # a project folder: kernels/ (the bundled ones) and the ACF
    acf_path: Path
    best: PtxasFacts
    baseline: PtxasFacts


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Tuned:
    """The bundled spill_heavy kernel tuned for spills (a narrow space keeps it quick)."""
    root = tmp_path_factory.mktemp("project")
    (root / "kernels").symlink_to(REPO / "kernels")
    done = run_cli(["tune", SOURCE, "--objective", "spills", "--budget", "8", "--workers", "local",
                    "--only", "ptxas.maxrregcount,ptxas.override_directive_values,ptxas.opt_level",
                    "--db", f"sqlite:///{root / 'tune.db'}", "--out", "spill_heavy.acf.toml"], cwd=root)
    assert done.returncode == 0, done.describe()
    evidence = tomllib.loads((root / "spill_heavy.acf.toml").read_text())["evidence"]
    best, baseline = (PtxasFacts(evidence[k]["registers"], evidence[k]["spill_bytes"]) for k in ("best", "baseline"))
    assert best != baseline, "the tune found nothing: the build checks below could not tell flags from none"
    return Tuned(root, root / "spill_heavy.acf.toml", best, baseline)


def _include_dir(root: Path) -> str:
    done = run_cli(["include-dir"], cwd=root)
    assert done.returncode == 0, done.describe()
    return done.stdout.strip()


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{args} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


CMAKE_PROJECT = """\
cmake_minimum_required(VERSION 3.24)
project(demo LANGUAGES CUDA)
find_package(compileiq CONFIG REQUIRED PATHS "{cmake_dir}" NO_DEFAULT_PATH)

add_library(by_target OBJECT {source})
compileiq_apply(TARGET by_target ACF spill_heavy.acf.toml)

add_library(by_source OBJECT copy/spill_heavy.cu)
set_property(TARGET by_source PROPERTY CUDA_ARCHITECTURES 90)
compileiq_apply(SOURCE copy/spill_heavy.cu ACF spill_heavy.acf.toml)

add_library(untuned OBJECT untuned/spill_heavy.cu)
set_property(TARGET untuned PROPERTY CUDA_ARCHITECTURES 90)

add_subdirectory(snippet)  # `compileiq flags --format cmake` output, included

foreach(target by_target by_source untuned by_snippet)
  target_include_directories(${{target}} PRIVATE "{include_dir}")
  target_compile_options(${{target}} PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Xptxas -v>")
  target_compile_definitions(${{target}} PRIVATE TAPS=64)
endforeach()
"""


@pytest.mark.slow
def test_cmake_build_with_compileiq_apply_reproduces_the_acf_evidence(tuned: Tuned) -> None:
    project = tuned.root
    for folder in ("copy", "untuned"):
        (project / folder).mkdir(exist_ok=True)
        shutil.copy(REPO / SOURCE, project / folder / "spill_heavy.cu")
    cmake_dir = run_cli(["cmake-dir"], cwd=project).stdout.strip()
    assert (Path(cmake_dir) / "compileiq-config.cmake").is_file()
    (project / "CMakeLists.txt").write_text(
        CMAKE_PROJECT.format(cmake_dir=cmake_dir, source=SOURCE, include_dir=_include_dir(project)))
    snippet = project / "snippet"  # a directory of its own: source properties are per directory
    snippet.mkdir(exist_ok=True)
    (snippet / "kernels").symlink_to(REPO / "kernels")
    flags = run_cli(["flags", "../spill_heavy.acf.toml", "--format", "cmake"], cwd=snippet)
    assert flags.returncode == 0, flags.describe()
    (snippet / "compileiq-flags.cmake").write_text(flags.stdout)
    (snippet / "CMakeLists.txt").write_text(
        f"add_library(by_snippet OBJECT {REPO / SOURCE})\n"  # the snippet names the file by its real path
        "set_property(TARGET by_snippet PROPERTY CUDA_ARCHITECTURES 90)\n"
        "include(compileiq-flags.cmake)\n")
    cmake = cmake_command()
    configured = _run([cmake, "-S", ".", "-B", "build", f"-DCOMPILEIQ_EXECUTABLE={compileiq_command()}"], project)
    assert "compileiq: by_target: flags of spill_heavy.acf.toml (sm_90" in configured.stdout

    def built(target: str) -> PtxasFacts:
        done = _run([cmake, "--build", "build", "--target", target, "--verbose"], project)
        return ptxas_facts(done.stdout + done.stderr)

    assert built("by_target") == tuned.best
    assert built("by_source") == tuned.best
    assert built("by_snippet") == tuned.best
    assert built("untuned") == tuned.baseline  # the same build without the ACF: the flags made the difference


@pytest.mark.slow
def test_nvcc_options_file_reproduces_the_acf_evidence(tuned: Tuned) -> None:
    done = run_cli(["flags", "spill_heavy.acf.toml", "--format", "optf"], cwd=tuned.root)
    assert done.returncode == 0, done.describe()
    lines = done.stdout.splitlines()
    assert lines == list(acf.read(tuned.acf_path).flags())
    assert len(lines) == len(set(lines)) and "-arch=sm_90" in lines
    (tuned.root / "k.optf").write_text(done.stdout)
    compiled = _run(["nvcc", "--options-file", "k.optf", "-cubin", "-Xptxas", "-v", "-I", _include_dir(tuned.root),
                     SOURCE, "-o", "k.cubin"], tuned.root)
    assert ptxas_facts(compiled.stdout + compiled.stderr) == tuned.best


@pytest.mark.slow
def test_a_two_stage_build_from_the_stage_flags_reproduces_the_acf_evidence(tuned: Tuned) -> None:
    """`nvcc -ptx $(flags --stage frontend)`, then `ptxas $(flags --stage ptxas)`: the ptxas stage
    gave no arch, and ptxas refused the PTX ("SM version specified by .target is higher than
    default SM version assumed")."""
    def stage(name: str) -> list[str]:
        done = run_cli(["flags", "spill_heavy.acf.toml", "--all", "--stage", name], cwd=tuned.root)
        assert done.returncode == 0, done.describe()
        return done.stdout.split()

    _run(["nvcc", *stage("frontend"), "-I", _include_dir(tuned.root), "-ptx", SOURCE, "-o", "k.ptx"], tuned.root)
    assembled = _run(["ptxas", *stage("ptxas"), "-v", "k.ptx", "-o", "k.cubin"], tuned.root)
    assert ptxas_facts(assembled.stdout + assembled.stderr) == tuned.best


# --- the formats, on a hand-made ACF (no compiler) ------------------------------------------------


@pytest.fixture()
def made_acf(tmp_path: Path) -> Path:
    space = load_space("13.0").with_defines({"BK": [8, 16]})
    config = space.default_config().with_values({"ptxas.maxrregcount": 64, "nvcc.extra_device_vectorization": True,
                                                 "define.BK": 16})
    content = acf.AcfContent(
        kernel='k"\nexecute_process(COMMAND touch pwned)', source_name="k.cu", source_path="src/my k;$x.cu",
        source_sha256="ab" * 32, arch="sm_90a", nvcc_version="13.0", ptxas_version="13.0",
        toolchain_build="cuda_13.0", space=space, config=config, fixed_defines=("-DN=4096",),
        objective={"name": "spills"}, evidence={"best": {"spill_bytes": 0, "registers": 64}}, provenance={},
    )  # fmt: skip
    return acf.write(tmp_path / "k.acf.toml", content)


def _flags(path: Path, *options: str) -> str:
    done = run_cli(["flags", path.name, *options], cwd=path.parent)
    assert done.returncode == 0, done.describe()
    return done.stdout


def test_args_is_the_default_format_and_unchanged(made_acf: Path) -> None:
    expected = "-arch=sm_90a --extra-device-vectorization -DBK=16 -Xptxas=--maxrregcount=64 -DN=4096\n"
    assert _flags(made_acf) == expected
    assert _flags(made_acf, "--format", "args") == expected


def test_optf_lists_each_flag_once_per_line(made_acf: Path) -> None:
    assert _flags(made_acf, "--format", "optf", "--stage", "frontend").splitlines() == [
        "-arch=sm_90a", "--extra-device-vectorization", "-DBK=16", "-DN=4096"]


def test_cmake_snippet_keeps_each_flag_one_token_and_cannot_be_injected(made_acf: Path) -> None:
    text = _flags(made_acf, "--format", "cmake")
    comment, check, fail, end, call = text.splitlines()
    assert comment.startswith("# compileiq: kernel ") and "CUDA_ARCHITECTURES 90a" in comment
    here = '"${CMAKE_CURRENT_SOURCE_DIR}/src/my k;\\$x.cu"'  # from the folder flags ran in, not this checkout's path
    assert (check, end) == (f"if(NOT EXISTS {here})", "endif()") and "FATAL_ERROR" in fail
    assert call == (f'set_source_files_properties({here} PROPERTIES COMPILE_OPTIONS '
                    '"--extra-device-vectorization;-DBK=16;-Xptxas=--maxrregcount=64;-DN=4096")')


def test_cmake_snippet_parses_in_cmake_to_the_acf_flags(made_acf: Path) -> None:
    snippet = _flags(made_acf, "--format", "cmake")
    (made_acf.parent / "src").mkdir()
    (made_acf.parent / "src" / "my k;$x.cu").write_text("")  # the snippet fails configure where it is not
    script = made_acf.parent / "check.cmake"
    script.write_text(
        "function(set_source_files_properties file _properties _name options)\n"
        '  message(STATUS "file=${file}")\n'
        '  foreach(o IN LISTS options)\n    message(STATUS "option=${o}")\n  endforeach()\n'
        "endfunction()\n" + snippet)
    done = _run([cmake_command(), "-P", str(script)], made_acf.parent)
    assert done.stdout.splitlines() == [
        f"-- file={made_acf.parent}/src/my k;$x.cu", "-- option=--extra-device-vectorization", "-- option=-DBK=16",
        "-- option=-Xptxas=--maxrregcount=64", "-- option=-DN=4096"]
    assert not (made_acf.parent / "pwned").exists()


def _configure(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([cmake_command(), "-S", ".", "-B", "build", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"], cwd=root,
                          env=clean_env(), capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_cmake_snippet_works_in_every_checkout_and_fails_configure_where_it_cannot(tmp_path: Path) -> None:
    """Issue ci54 #1: the snippet named the source by this checkout's absolute path, so pasted into a
    committed CMakeLists.txt every other checkout (a CI runner's, a teammate's) built untuned code, and
    configure said nothing (CMake ignores a property on a file that is no source)."""
    here = tmp_path / "here"
    (here / "src").mkdir(parents=True)
    (here / "src" / "k.cu").write_text(LOOP_KERNEL)
    space = load_space("13.0")
    content = acf.AcfContent(
        kernel="k", source_name="k.cu", source_path="src/k.cu", source_sha256="ab" * 32, arch="sm_90",
        nvcc_version="13.0", ptxas_version="13.0", toolchain_build="cuda_13.0", space=space,
        config=space.default_config().with_values({"ptxas.maxrregcount": 64}), fixed_defines=(),
        objective={"name": "spills"}, evidence={"best": {"spill_bytes": 0, "registers": 64}}, provenance={},
    )  # fmt: skip
    acf.write(here / "k.acf.toml", content)
    (here / "compileiq-flags.cmake").write_text(_flags(here / "k.acf.toml", "--format", "cmake"))
    (here / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(demo LANGUAGES CUDA)\n"
        "add_library(k OBJECT src/k.cu)\nset_property(TARGET k PROPERTY CUDA_ARCHITECTURES 90)\n"
        "include(compileiq-flags.cmake)\n")
    elsewhere = tmp_path / "ci runner" / "checkout"  # the same commit, cloned at another path
    shutil.copytree(here, elsewhere)
    shutil.rmtree(here)
    configured = _configure(elsewhere)
    assert configured.returncode == 0, configured.stdout + configured.stderr
    commands = json.loads((elsewhere / "build" / "compile_commands.json").read_text())
    (command,) = [c["command"] for c in commands if c["file"].endswith("k.cu")]
    assert "-Xptxas=--maxrregcount=64" in command, command

    wrong = tmp_path / "wrong"  # pasted into a CMakeLists.txt of another folder: no silent untuned build
    shutil.copytree(elsewhere, wrong, ignore=shutil.ignore_patterns("build"))
    (wrong / "sub").mkdir()
    (wrong / "sub" / "CMakeLists.txt").write_text("include(../compileiq-flags.cmake)\n")
    lists = (wrong / "CMakeLists.txt").read_text().replace("include(compileiq-flags.cmake)", "add_subdirectory(sub)")
    (wrong / "CMakeLists.txt").write_text(lists)
    failed = _configure(wrong)
    assert failed.returncode != 0
    assert "compileiq: src/k.cu not found: this snippet names the kernel relative to the folder compileiq flags ran" \
        in " ".join(failed.stderr.split()), failed.stderr


def test_bazel_is_a_rules_cuda_library_and_json_lists_every_flag(made_acf: Path) -> None:
    """rules_cuda's idiom: nvcc options in copts, ptxas options in ptxasopts, the arch on the command line."""
    bazel = _flags(made_acf, "--format", "bazel")
    comment, load, blank, *call = bazel.splitlines()
    assert comment.startswith("# compileiq: kernel ") and comment.endswith("--@rules_cuda//cuda:archs=sm_90a")
    assert load == 'load("@rules_cuda//cuda:defs.bzl", "cuda_library")' and blank == ""
    assert call == [
        "cuda_library(",
        '    name = "k__execute_process_COMMAND_touch_pwned_",',  # the kernel name cannot add a line
        '    srcs = ["my k;$x.cu"],',
        "    copts = [",
        '        "--extra-device-vectorization",',
        '        "-DBK=16",',
        '        "-DN=4096",',
        "    ],",
        "    ptxasopts = [",
        '        "--maxrregcount=64",',
        "    ],",
        ")",
    ]
    assert "ptxasopts" not in _flags(made_acf, "--format", "bazel", "--stage", "frontend")
    assert "copts" not in _flags(made_acf, "--format", "bazel", "--stage", "ptxas")
    document = json.loads(_flags(made_acf, "--format", "json"))
    assert document["flags"][0] == "-arch=sm_90a" and document["cuda_architectures"] == "90a"
    assert document["ptxas"] == ["--maxrregcount=64"] and document["recorded"]["registers"] == 64


def test_plain_flags_say_on_stderr_when_the_build_needs_the_base_flags(made_acf: Path) -> None:
    """The tuned flags alone do not build a kernel that needs -I/-std: one line on stderr says
    so (stdout stays pasteable), and --all prints them instead."""
    quiet = run_cli(["flags", made_acf.name], cwd=made_acf.parent)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.describe()  # no base flags: nothing to say
    data = tomllib.loads(made_acf.read_text())
    data["base"] = {"nvcc_flags": ["-std=c++17", "-Iinclude"]}
    import tomli_w

    made_acf.write_text(tomli_w.dumps(data))
    plain = run_cli(["flags", made_acf.name], cwd=made_acf.parent)
    assert plain.returncode == 0 and plain.stdout.split() == [
        "-arch=sm_90a", "--extra-device-vectorization", "-DBK=16", "-Xptxas=--maxrregcount=64", "-DN=4096"]
    assert plain.stderr_lines == [("note: the build also needs 2 base flag(s) the tuned ones leave out "
                                  "(-std=c++17 -Isrc/include): --all adds them")], plain.describe()
    every = run_cli(["flags", made_acf.name, "--all"], cwd=made_acf.parent)
    assert every.returncode == 0 and every.stderr == "" and "-std=c++17" in every.stdout, every.describe()
    as_json = run_cli(["flags", made_acf.name, "--format", "json"], cwd=made_acf.parent)  # the same note, both ways
    assert as_json.stderr_lines == plain.stderr_lines, as_json.describe()
    assert json.loads(as_json.stdout)["notes"] == plain.stderr_lines, as_json.describe()
    # a BUILD file beside the kernel: its include folders relative to the package, as srcs is (they
    # came out as -I paths from wherever `flags` ran, and srcs from the kernel's folder)
    bazel = run_cli(["flags", made_acf.name, "--all", "--format", "bazel"], cwd=made_acf.parent)
    assert '    includes = [\n        "include",\n    ],' in bazel.stdout, bazel.describe()
    assert '"-std=c++17",' in bazel.stdout and "-I" not in bazel.stdout


def test_bazel_leaves_include_folders_above_the_package_out_and_says_what_to_do(made_acf: Path) -> None:
    """Bazel resolves `includes` from the package and takes none above it (cc_library: "not below
    the relative path of its package. This will be an error in the future"; above the workspace it
    names nothing): `../../../Common` came out as one (the red team's); now it is left out and one
    note on stderr says how Bazel takes such headers."""
    import tomli_w

    data = tomllib.loads(made_acf.read_text())
    data["base"] = {"nvcc_flags": ["-Iinclude", "-I../../../Common", "-Isub/../inc2"]}
    made_acf.write_text(tomli_w.dumps(data))
    bazel = run_cli(["flags", made_acf.name, "--all", "--format", "bazel"], cwd=made_acf.parent)
    assert bazel.returncode == 0, bazel.describe()
    assert '    includes = [\n        "include",\n        "sub/../inc2",\n    ],' in bazel.stdout, bazel.describe()
    assert "Common" not in bazel.stdout, bazel.describe()
    assert bazel.stderr_lines == [(
        "note: 1 include folder(s) outside the kernel's package left out of includes (../../../Common): Bazel takes "
        'none above the package; give those headers a cc_library in their own package (hdrs, includes = ["."]) and '
        "add it to the cuda_library's deps")], bazel.describe()
    for options in (["--all"], ["--format", "bazel"], ["--all", "--format", "bazel", "--stage", "ptxas"]):
        quiet = run_cli(["flags", made_acf.name, *options], cwd=made_acf.parent)
        assert quiet.returncode == 0 and "outside the kernel's package" not in quiet.stderr, quiet.describe()


@pytest.mark.parametrize(
    ("options", "says"),
    [(["--format", "xml"], "--format must be one of args, optf, cmake, bazel, json, got 'xml'"),
     (["--format", "cmake", "--stage", "ptxas"], "--format cmake gives nvcc options: use --stage all or frontend")],
)
def test_bad_format_options_are_one_line_errors(made_acf: Path, options: list[str], says: str) -> None:
    done = run_cli(["flags", made_acf.name, *options], cwd=made_acf.parent)
    assert done.returncode == 2 and done.stderr_lines == [f"error: {says}"], done.describe()


@pytest.mark.parametrize(("define", "says"), [
    ("-DX=1.o -ccbin=/tmp/evilcc -DY=2", "contains ' '"),  # read as three words by nvcc $(compileiq flags ...)
    ("-DN=(1<<10)", "cannot be written as one plain word"),  # `(` would reach nvcc inside quotes, or a shell bare
])
def test_args_never_prints_a_flag_a_shell_would_split_or_quote(tmp_path: Path, define: str, says: str) -> None:
    """The documented `nvcc $(compileiq flags k.acf.toml)`: the shell splits the output at spaces and
    never removes quotes. A -D value with a space (from tune.toml, a compile command or a hand-edited
    ACF) used to come out quoted, and the split made its second word an option of the input's choosing
    (-ccbin ran a program); now such a value is refused on reading, and any other flag that needs
    quoting is refused by `args`, never printed quoted."""
    space = load_space("13.0")
    content = acf.AcfContent(
        kernel="k", source_name="k.cu", source_path="k.cu", source_sha256="ab" * 32, arch="sm_90",
        nvcc_version="13.0", ptxas_version="13.0", toolchain_build="cuda_13.0", space=space,
        config=space.default_config(), fixed_defines=("-DN=4096",), objective={"name": "spills"},
        evidence={"best": {"spill_bytes": 0, "registers": 64}}, provenance={},
    )  # fmt: skip
    path = acf.write(tmp_path / "k.acf.toml", content)
    path.write_text(path.read_text().replace('"-DN=4096"', f'"{define}"'))
    done = run_cli(["flags", path.name, "--all"], cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr_lines) == 1 and says in done.stderr_lines[0], done.describe()
    assert done.stdout == ""


def test_compileiq_apply_refuses_a_tampered_acf_with_compileiqs_reason(made_acf: Path) -> None:
    data = tomllib.loads(made_acf.read_text())
    data["args"]["argv"].append("-Xcompiler=-fPIC")
    import tomli_w

    made_acf.write_text(tomli_w.dumps(data))
    script = made_acf.parent / "apply.cmake"
    script.write_text(f'include("{flag_formats.cmake_dir()}/compileiq-config.cmake")\n'
                      f'compileiq_apply(SOURCE k.cu ACF "{made_acf.name}")\n')
    done = subprocess.run([cmake_command(), f"-DCOMPILEIQ_EXECUTABLE={compileiq_command()}", "-P", str(script)],
                          cwd=made_acf.parent, env=clean_env(), capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "compileiq_apply(k.acf.toml): error:" in done.stderr and "-Xcompiler=-fPIC" in done.stderr


@pytest.mark.parametrize(("archs", "after", "says"), [
    ("75 90", "75;90", "tuned and checked on sm_90 only; CUDA_ARCHITECTURES 75;90 kept"),
    ("90-real", "90-real", "(sm_90)"),
    ("all-major", "all-major", "tuned and checked on sm_90 only; CUDA_ARCHITECTURES all-major kept"),
    ("75", "90", "CUDA_ARCHITECTURES 75 replaced by 90, the arch the ACF was tuned for"),
    ("90-virtual 75-real", "90;75-real", ("CUDA_ARCHITECTURES 90-virtual;75-real made 90;75-real: sm_90 machine "
                                          "code added for the ACF's ptxas settings, compute_90 PTX kept, the other "
                                          "archs kept")),
    ("90-virtual", "90", "CUDA_ARCHITECTURES 90-virtual made 90: sm_90 machine code added"),
    ("90-virtual 90-real", "90-virtual;90-real", "(sm_90)"),
    # stop 53's still weak: a PTX-only entry was said to "get these flags unchecked", ptxas settings included
    ("80-virtual 90-real 75", "80-virtual;90-real;75",
     ("CUDA_ARCHITECTURES 80-virtual;90-real;75 kept: these flags reach 75 unchecked; 80-virtual: PTX alone "
      "(JIT-compiled by the driver), which the ptxas settings do not reach")),
    ("86-virtual 90-virtual", "86-virtual;90", ("compute_90 PTX kept, the other archs kept: 86-virtual: PTX alone "
                                                "(JIT-compiled by the driver)")),
])
def test_compileiq_apply_keeps_a_targets_other_archs(tmp_path: Path, archs: str, after: str, says: str) -> None:
    """A user's CMake target built for 75 and 90: `compileiq_apply(TARGET ...)` set its
    CUDA_ARCHITECTURES to the ACF's 90 alone, dropping sm_75 from the product. A target that builds
    the ACF's arch keeps its others (configure says they get the flags unchecked); one that does not
    is set to it, and configure names what it replaced."""
    space = load_space("13.0")
    config = space.default_config().with_values({"ptxas.maxrregcount": 64})
    content = acf.AcfContent(kernel="k", source_name="k.cu", source_path="k.cu", source_sha256="ab" * 32, arch="sm_90",
                             nvcc_version="13.0", ptxas_version="13.0", toolchain_build="cuda_13.0", space=space,
                             config=config, fixed_defines=(), objective={"name": "spills"},
                             evidence={"best": {"spill_bytes": 0, "registers": 64}}, provenance={})
    acf.write(tmp_path / "k.acf.toml", content)
    (tmp_path / "k.cu").write_text("__global__ void k(float* x) { x[0] = 1.0f; }\n")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(demo LANGUAGES CUDA)\n"
        f'find_package(compileiq CONFIG REQUIRED PATHS "{flag_formats.cmake_dir()}" NO_DEFAULT_PATH)\n'
        f"add_library(t OBJECT k.cu)\nset_property(TARGET t PROPERTY CUDA_ARCHITECTURES {archs})\n"
        "compileiq_apply(TARGET t ACF k.acf.toml)\n"
        'get_property(_after TARGET t PROPERTY CUDA_ARCHITECTURES)\nmessage(STATUS "after: ${_after}")\n')
    done = _run([cmake_command(), "-S", ".", "-B", "build", f"-DCOMPILEIQ_EXECUTABLE={compileiq_command()}"], tmp_path)
    assert f"-- after: {after}\n" in done.stdout and says in done.stdout, done.stdout


@pytest.mark.slow
def test_compileiq_apply_adds_machine_code_to_a_ptx_only_entry_and_keeps_the_other_archs(tmp_path: Path) -> None:
    """rev51 2: shipped as compute_80 PTX next to sm_90 machine code and tuned with ptxas settings
    for sm_80, `compileiq_apply` set the target's `80-virtual;90-real` to `80`: the product lost its
    sm_90 machine code. Only the 80-virtual entry becomes 80 (the ptxas settings need sm_80 machine
    code; the PTX is kept), and 90-real stays."""
    tuned_from_command(tmp_path, "nvcc -gencode arch=compute_80,code=compute_80 -gencode arch=compute_90,code=sm_90 "
                       "-Xptxas -O2 -c k.cu", "--arch", "sm_80", "--only", "ptxas.opt_level",
                       "--objective", "instructions", source=LOOP_KERNEL, budget=1)
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.24)\nproject(demo LANGUAGES CUDA)\n"
        f'find_package(compileiq CONFIG REQUIRED PATHS "{flag_formats.cmake_dir()}" NO_DEFAULT_PATH)\n'
        "add_library(t OBJECT k.cu)\nset_property(TARGET t PROPERTY CUDA_ARCHITECTURES 80-virtual 90-real)\n"
        "compileiq_apply(TARGET t ACF k.acf.toml)\n"
        'get_property(_after TARGET t PROPERTY CUDA_ARCHITECTURES)\nmessage(STATUS "after: ${_after}")\n')
    done = _run([cmake_command(), "-S", ".", "-B", "build", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
                 f"-DCOMPILEIQ_EXECUTABLE={compileiq_command()}"], tmp_path)
    assert "-- after: 80;90-real\n" in done.stdout, done.stdout
    assert "CUDA_ARCHITECTURES 80-virtual;90-real made 80;90-real" in done.stdout, done.stdout
    (command,) = [entry["command"] for entry in json.loads((tmp_path / "build" / "compile_commands.json").read_text())]
    assert "sm_90" in command and "sm_80" in command and "compute_80" in command, command


def test_the_wheel_ships_the_cmake_package(tmp_path: Path) -> None:
    build = ("import sys, hatchling.build as b; sys.stdout.write(b.build_wheel(sys.argv[1]))")
    done = _run([sys.executable, "-c", build, str(tmp_path)], REPO)
    with zipfile.ZipFile(tmp_path / done.stdout.strip()) as wheel:
        assert "compileiq/cmake/compileiq-config.cmake" in wheel.namelist()


REMOVE_PROJECT = """\
cmake_minimum_required(VERSION 3.24)
project(demo LANGUAGES CUDA)
find_package(compileiq CONFIG REQUIRED PATHS "{cmake_dir}" NO_DEFAULT_PATH)
{cuda_flags}add_library(k OBJECT k.cu)
target_compile_options(k PRIVATE {options})
compileiq_apply(TARGET k ACF k.acf.toml)
"""


@pytest.mark.slow
def test_compileiq_apply_takes_out_the_shipped_flag_the_acf_turns_off(tmp_path: Path) -> None:
    """Shipped at ptxas -O0, the choice is a higher level: the ACF says to remove -Xptxas=-O0, and
    the CMake package does (it appended the ACF's flags after it, and nvcc took the shipped one);
    where it cannot (CMAKE_CUDA_FLAGS, a generator expression), configure stops and says where."""
    tuned_from_command(tmp_path, "nvcc -Xptxas=-O0 -lineinfo -arch=sm_90 -c k.cu", "--only", "ptxas.opt_level",
                       "--objective", "instructions", source=LOOP_KERNEL, budget=4)
    assert tomllib.loads((tmp_path / "k.acf.toml").read_text())["baseline"]["remove"] == ["-Xptxas=-O0"]
    cmake_dir = run_cli(["cmake-dir"], cwd=tmp_path).stdout.strip()
    cmake = cmake_command()

    def configure(options: str, cuda_flags: str = "") -> subprocess.CompletedProcess[str]:
        (tmp_path / "CMakeLists.txt").write_text(REMOVE_PROJECT.format(cmake_dir=cmake_dir, options=options,
                                                                      cuda_flags=cuda_flags))
        shutil.rmtree(tmp_path / "build", ignore_errors=True)
        return subprocess.run([cmake, "-S", ".", "-B", "build", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
                               f"-DCOMPILEIQ_EXECUTABLE={compileiq_command()}"], cwd=tmp_path, env=clean_env(),
                              capture_output=True, text=True, timeout=600, check=False)

    applied = configure("-Xptxas=-O0 -lineinfo")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "compileiq: removed '-Xptxas=-O0' from k's COMPILE_OPTIONS" in applied.stdout
    (command,) = [entry["command"] for entry in json.loads((tmp_path / "build" / "compile_commands.json").read_text())]
    assert "-O0" not in command and "-lineinfo" in command and re.search(r"-Xptxas=--?O[123]", command), command
    for cuda_flags, options, place in [('set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} -Xptxas=-O0")\n', "-lineinfo",
                                        "CMAKE_CUDA_FLAGS"),
                                       ("", "$<$<COMPILE_LANGUAGE:CUDA>:-lineinfo;-Xptxas=-O0>", "k's COMPILE_OPTIONS")]:
        refused = configure(options, cuda_flags)
        assert refused.returncode != 0, refused.stdout
        message = " ".join(refused.stderr.split())
        assert (f"compileiq_apply(k.acf.toml): the ACF's settings change the shipped flag '-Xptxas=-O0' "
                f"([baseline] remove), which is still in {place}") in message, refused.stderr


def test_bazel_output_names_the_shipped_flags_to_remove_as_the_cmake_output_does(tmp_path: Path) -> None:
    """rev50 7: an ACF whose settings change a shipped flag ([baseline] remove) wrote the removal note
    into the CMake snippet as a comment, but the Bazel BUILD text had none (the note went to stderr
    only, which `> BUILD` loses): copts cannot take -Xptxas=-O0 out of the project's own command."""
    tuned_from_command(tmp_path, "nvcc -Xptxas=-O0 -arch=sm_90 -c k.cu", "--only", "ptxas.opt_level",
                       "--objective", "instructions", source=LOOP_KERNEL, budget=3)
    assert tomllib.loads((tmp_path / "k.acf.toml").read_text())["baseline"]["remove"] == ["-Xptxas=-O0"]
    note = ("# compileiq: remove from the kernel's compile command (compile_commands.json): -Xptxas=-O0 -- the ACF "
            "changes or turns off these shipped settings; appending its flags alone would keep them")
    for fmt in ("cmake", "bazel"):
        shown = run_cli(["flags", "k.acf.toml", "--format", fmt], cwd=tmp_path)
        assert shown.returncode == 0 and shown.stdout.splitlines()[0] == note, shown.describe()
    bazel = run_cli(["flags", "k.acf.toml", "--format", "bazel"], cwd=tmp_path).stdout
    assert bazel.splitlines()[1].startswith("# compileiq: kernel ") and "cuda_library(" in bazel, bazel


def test_json_names_the_source_from_where_flags_ran_as_its_include_folders(tmp_path: Path) -> None:
    """user55 finding 4: `source` was the ACF's own path (relative to the ACF's folder) beside `-I`
    folders named from where `flags` ran, so a build from the two keys failed: No such file. Both
    are from here now; the ACF's own path is `source_in_acf`."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "include").mkdir()
    (tmp_path / "src" / "include" / "scale.h").write_text("#define SCALE 2.0f\n")
    (tmp_path / "src" / "k.cu").write_text('#include "scale.h"\n'
                                          "__global__ void k(float *x) { x[threadIdx.x] *= SCALE; }\n")
    (tmp_path / "src" / "tune.toml").write_text('include_dirs = ["include"]\n')
    done = run_cli(["tune", "src/k.cu", "--budget", "1", "--workers", "local", "--db", "sqlite:///t.db",
                    "--out", "store/k.acf.toml"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()
    shown = run_cli(["flags", "store/k.acf.toml", "--format", "json"], cwd=tmp_path)
    assert shown.returncode == 0, shown.describe()
    document = json.loads(shown.stdout)
    assert document["source"] == "src/k.cu" and document["source_in_acf"] == "../src/k.cu"
    assert document["base"] == ["-Isrc/include"]
    built = subprocess.run(["nvcc", *document["flags"], *document["base"], "-c", document["source"],
                            "-o", "k.o"], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr


def _header_acf(folder: Path) -> Path:
    """An ACF of a kernel tuned in a header (`compileiq tune bp_kernels.cuh`, main.cu includes it)."""
    space = load_space("13.0")
    content = acf.AcfContent(
        kernel="bp_kernels", source_name="bp_kernels.cuh", source_path="bp_kernels.cuh", source_sha256="ab" * 32,
        arch="sm_90", nvcc_version="13.0", ptxas_version="13.0", toolchain_build="cuda_13.0", space=space,
        config=space.default_config().with_values({"ptxas.maxrregcount": 24}), fixed_defines=(),
        objective={"name": "registers"}, evidence={"best": {"spill_bytes": 0, "registers": 24}}, provenance={},
    )  # fmt: skip
    return acf.write(folder / "bp_kernels.acf.toml", content)


@pytest.mark.parametrize(("fmt", "says"), [
    ("cmake", "CMake never compiles a header: a source property on it gives these flags to nothing"),
    ("bazel", "rules_cuda never compiles a header"),
])
def test_a_build_file_for_a_kernel_in_a_header_is_refused_not_silently_untuned(
        tmp_path: Path, fmt: str, says: str) -> None:
    """userfix 1: for a kernel tuned in a .cuh, `flags --format cmake` set COMPILE_OPTIONS on the header,
    which CMake never compiles: main.cu, which includes it, built with none of the flags (30 registers,
    not the evidence's 24), and configure said nothing. The same for a cuda_library of the header alone."""
    made = _header_acf(tmp_path)
    done = run_cli(["flags", made.name, "--format", fmt], cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.describe()
    [line] = done.stderr_lines
    assert says in line and "bp_kernels.cuh is a header" in line, line
    assert "compileiq_apply(TARGET" in line if fmt == "cmake" else "the .cu that includes it" in line, line
    assert _flags(made, "--format", "args") == "-arch=sm_90 -Xptxas=--maxrregcount=24\n"  # flags for the includer


def test_compileiq_apply_refuses_a_header_source(tmp_path: Path) -> None:
    """userfix 1: `compileiq_apply(SOURCE bp_kernels.cuh ...)` appended the flags to the header's
    COMPILE_OPTIONS, which reach nothing: configure stops and says to use TARGET or the .cu."""
    made = _header_acf(tmp_path)
    script = tmp_path / "apply.cmake"
    script.write_text(f'include("{flag_formats.cmake_dir()}/compileiq-config.cmake")\n'
                      f'compileiq_apply(SOURCE main.cu bp_kernels.cuh ACF "{made.name}")\n')
    done = subprocess.run([cmake_command(), f"-DCOMPILEIQ_EXECUTABLE={compileiq_command()}", "-P", str(script)],
                          cwd=tmp_path, env=clean_env(), capture_output=True, text=True, check=False)
    said = " ".join(done.stderr.split())
    assert done.returncode != 0, done.stdout + done.stderr
    assert "SOURCE bp_kernels.cuh is a header, which CMake never compiles" in said, said
    assert "compileiq_apply(TARGET <target> ACF bp_kernels.acf.toml)" in said, said
