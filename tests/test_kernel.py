"""Kernel specs (tune.toml or defaults) and source bundles; the compile checks use the real nvcc."""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from compileiq.source import arch
from compileiq.source.harness import harness_include_dir
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.source.spec import KernelError, KernelSpec

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not installed")

SOURCE = """\
extern "C" __global__ void __launch_bounds__(128) scale(float* x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
__global__ void other(float* x) { x[0] = 1.0f; }
"""

FULL_TOML = """\
arch = "sm_80"
entries = ["scale", "_Z5otherPf"]
block_size = "BLOCK"
dynamic_smem = 4096
include_dirs = ["include"]
compile_timeout_s = 12.5
allow_numerics = true
allow_semantics = true
[defines]
N = 4096
MODE = "fast"
[tune.defines]
BLOCK = [128, 256, 512]
UNROLL = [1, 4]
"""


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arch, "detect_arch", lambda: None)


def write_kernel(folder: Path, toml: str | None = None, source: str = SOURCE) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cu = folder / "k.cu"
    cu.write_text(source)
    if toml is not None:
        (folder / "tune.toml").write_text(toml)
    return cu


def nvcc_ptx(spec: KernelSpec, directory: Path, define_args: tuple[str, ...] = ()) -> str:
    """Write the spec's bundle into a fresh directory and compile it there to PTX."""
    bundle = bundle_sources(spec)
    bundle.write_to(directory)
    harness = f"-I{harness_include_dir()}"  # the harness is the installation's, never bundled
    cmd = [str(NVCC), f"-arch={spec.arch}", "-ptx", *bundle.include_args, harness, *define_args]
    cmd += [bundle.main, "-o", "out.ptx"]
    proc = subprocess.run(  # from the bundle's root, as a worker runs it (include args are relative to it)
        cmd, check=False, cwd=directory, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return (directory / "out.ptx").read_text()


def test_defaults_without_tune_toml(tmp_path: Path) -> None:
    spec = load_spec(write_kernel(tmp_path / "k"))
    assert spec.name == "k" and spec.source == (tmp_path / "k" / "k.cu").resolve()
    assert spec.arch == "sm_90" and spec.entries == () and spec.block_size == 128
    assert spec.dynamic_smem == 0 and spec.defines == () and spec.tuned_defines == ()
    assert spec.include_dirs == () and spec.compile_timeout_s == 60.0
    assert not spec.allow_numerics and not spec.allow_semantics
    assert spec.block_size_for({}) == 128 and spec.fixed_define_args() == ()


def test_default_block_size_without_launch_bounds(tmp_path: Path) -> None:
    cu = write_kernel(tmp_path, source="__global__ void f(float* x) { x[0] = 1.0f; }\n")
    assert load_spec(cu).block_size == 256


def test_launch_bounds_macro_resolves_through_source_define(tmp_path: Path) -> None:
    source = "#define THREADS 64\n__global__ void __launch_bounds__(THREADS) f(float* x) {}\n"
    assert load_spec(write_kernel(tmp_path, source=source)).block_size == 64


def test_launch_bounds_naming_a_tuned_define(tmp_path: Path) -> None:
    source = "__global__ void __launch_bounds__(BLOCK) f(float* x) {}\n"
    spec = load_spec(write_kernel(tmp_path, "[tune.defines]\nBLOCK = [64, 128]\n", source))
    assert spec.block_size == "BLOCK" and spec.block_size_for({"define.BLOCK": 128}) == 128


def test_arch_from_gpu_and_from_argument(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arch, "detect_arch", lambda: "sm_89")
    cu = write_kernel(tmp_path)
    assert load_spec(cu).arch == "sm_89"
    assert load_spec(cu, arch="sm_100a").arch == "sm_100a"


def test_full_tune_toml(tmp_path: Path) -> None:
    (tmp_path / "include").mkdir()
    spec = load_spec(write_kernel(tmp_path, FULL_TOML))
    assert spec.arch == "sm_80" and spec.entries == ("scale", "_Z5otherPf")
    assert spec.block_size == "BLOCK" and spec.dynamic_smem == 4096
    assert spec.include_dirs == ((tmp_path / "include").resolve(),)
    assert spec.compile_timeout_s == 12.5 and spec.allow_numerics and spec.allow_semantics
    assert spec.defines == (("MODE", "fast"), ("N", "4096"))
    assert spec.fixed_define_args() == ("-DMODE=fast", "-DN=4096")
    assert spec.tuned_defines == (("BLOCK", (128, 256, 512)), ("UNROLL", (1, 4)))
    assert spec.block_size_for({"define.BLOCK": 512, "define.UNROLL": 4}) == 512
    assert spec.block_size_for({}) == 128  # a tuned define's default is its first value
    assert spec.default_values() == {"define.BLOCK": 128, "define.UNROLL": 1}
    assert load_spec(tmp_path / "k.cu", arch="sm_90").arch == "sm_90"


BAD_TOML = [
    ("colour = 1", "colour"),
    ("arch = 90", "arch"),
    ('arch = "gfx90a"', "arch"),
    ('entries = "sgemm"', "entries"),
    ("entries = []", "entries"),
    ('entries = [""]', "entries"),
    ('block_size = "BLOCK"', "block_size"),
    ('block_size = "N"\n[defines]\nN = 128', "block_size"),
    ('block_size = "V"\n[tune.defines]\nV = ["a", "b"]', "block_size"),
    ("block_size = true", "block_size"),
    ("block_size = 0", "block_size"),
    ("block_size = 2048", "block_size"),
    ("block_size = 1.5", "block_size"),
    ("dynamic_smem = -1", "dynamic_smem"),
    ('dynamic_smem = "0"', "dynamic_smem"),
    ("include_dirs = []", "include_dirs"),
    ('include_dirs = ["missing"]', "include_dirs"),
    ("include_dirs = [1]", "include_dirs"),
    ("compile_timeout_s = 0", "compile_timeout_s"),
    ('compile_timeout_s = "60"', "compile_timeout_s"),
    ('allow_numerics = "yes"', "allow_numerics"),
    ("allow_semantics = 1", "allow_semantics"),
    ("defines = 3", "defines"),
    ("[defines]\nN = [1, 2]", "defines.N"),
    ("[defines]\nN = true", "defines.N"),
    ('[defines]\n"BAD-NAME" = 1', "defines.BAD-NAME"),
    ("tune = 3", "tune"),
    ("[tune]\nflags = 1", "tune.flags"),
    ("[tune.defines]\nB = []", "tune.defines.B"),
    ("[tune.defines]\nB = 128", "tune.defines.B"),
    ("[tune.defines]\nB = [1.5]", "tune.defines.B"),
    ("[tune.defines]\nB = [true]", "tune.defines.B"),
    ("[tune.defines]\nB = [128, 128]", "tune.defines.B"),
    ("[defines]\nB = 1\n[tune.defines]\nB = [1, 2]", "tune.defines.B"),
]


@pytest.mark.parametrize(("toml", "key"), BAD_TOML, ids=[key for _, key in BAD_TOML])
def test_bad_tune_toml_is_a_one_line_error(tmp_path: Path, toml: str, key: str) -> None:
    with pytest.raises(KernelError) as info:
        load_spec(write_kernel(tmp_path, toml + "\n"))
    message = str(info.value)
    assert "\n" not in message and "tune.toml" in message and f": {key}:" in message


def test_malformed_toml_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match="tune.toml: malformed TOML") as info:
        load_spec(write_kernel(tmp_path, 'arch = "sm_90\nentries = [\n'))
    assert "\n" not in str(info.value)


def test_bad_arch_argument(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match="not an arch"):
        load_spec(write_kernel(tmp_path), arch="90")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match="^kernel file not found: .*nope.cu$"):
        load_spec(tmp_path / "nope.cu")


def test_not_a_cuda_source(tmp_path: Path) -> None:
    (tmp_path / "k.py").write_text("__global__ = 1\n")
    with pytest.raises(KernelError, match="is not a CUDA source: expected a .cu or .cuh file$"):
        load_spec(tmp_path / "k.py")


def test_a_cu_without_global_text_loads(tmp_path: Path) -> None:
    """Whether a file holds a kernel is the compiled module's to say (tune checks it)."""
    (tmp_path / "main.cu").write_text('#include "kernel.cu"\n')
    assert load_spec(tmp_path / "main.cu").name == "main"


def test_cuh_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "k.cuh").write_text(SOURCE)
    assert load_spec(tmp_path / "k.cuh").name == "k"


def test_detect_arch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    monkeypatch.setenv("PATH", str(tmp_path))
    assert arch.detect_arch() is None
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 9.0\necho 8.6\n")
    smi.chmod(0o755)
    assert arch.detect_arch() == "sm_90"
    smi.write_text("#!/bin/sh\nexit 9\n")
    assert arch.detect_arch() is None


def kernel_with_headers(tmp_path: Path) -> Path:
    """k.cu includes a local header (which includes a nested one) and two include-dir headers."""
    root = tmp_path / "proj"
    (root / "detail").mkdir(parents=True)
    (root / "include").mkdir()
    (tmp_path / "shared" / "sub").mkdir(parents=True)
    (root / "local.h").write_text('#pragma once\n#include "detail/nested.h"\n')
    (root / "detail" / "nested.h").write_text("#pragma once\n#define NESTED 2.0f\n")
    (root / "include" / "inner.h").write_text("#pragma once\n#define INNER 3.0f\n")
    (tmp_path / "shared" / "outer.h").write_text('#pragma once\n#include "sub/deep.h"\n')
    (tmp_path / "shared" / "sub" / "deep.h").write_text("#pragma once\n#define DEEP 4.0f\n")
    source = (
        '#include "local.h"\n#include "inner.h"\n#include "outer.h"\n#include "cuda_fp16.h"\n'
        'extern "C" __global__ void k(float* x) { x[0] = NESTED * INNER * DEEP; }\n'
    )
    toml = 'include_dirs = ["include", "../shared"]\n'
    return write_kernel(root, toml, source)


def test_bundle_follows_quoted_includes(tmp_path: Path) -> None:
    # include_dirs reach ../shared: the bundle mirrors the folder above both, keeping their places
    bundle = bundle_sources(load_spec(kernel_with_headers(tmp_path)))
    paths = [rel for rel, _ in bundle.files]
    assert bundle.main == "proj/k.cu" and paths[0] == "proj/k.cu"
    assert sorted(paths[1:]) == [
        "proj/detail/nested.h",
        "proj/include/inner.h",
        "proj/local.h",
        "shared/outer.h",
        "shared/sub/deep.h",
    ]
    assert bundle.include_args == ("-Iproj/include", "-Ishared")
    assert all(isinstance(content, bytes) for _, content in bundle.files)
    main = bundle.write_to(tmp_path / "fresh")
    assert main == tmp_path / "fresh" / "proj" / "k.cu"
    assert (tmp_path / "fresh" / "shared" / "sub" / "deep.h").read_text().endswith("4.0f\n")


def test_bundle_hash_follows_header_content(tmp_path: Path) -> None:
    spec = load_spec(kernel_with_headers(tmp_path))
    before = bundle_sources(spec).sha256
    assert bundle_sources(spec).sha256 == before
    (tmp_path / "shared" / "sub" / "deep.h").write_text("#pragma once\n#define DEEP 5.0f\n")
    assert bundle_sources(spec).sha256 != before


@needs_nvcc
def test_a_quoted_include_above_the_kernel_folder_is_bundled_in_its_place(tmp_path: Path) -> None:
    """user F1 (PolyBench's `#include "../../common/polybench.h"`, Rodinia's `../common`): nvcc
    builds it with no -I, but the bundle stopped with "reaches outside the kernel folder"."""
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "common.h").write_text('#include "util/more.h"\n#define X MORE\n')
    (tmp_path / "common" / "util").mkdir()
    (tmp_path / "common" / "util" / "more.h").write_text("#define MORE 2.0f\n")
    source = '#include "../../common/common.h"\n' + SOURCE.replace("*= 2.0f", "*= X")
    spec = load_spec(write_kernel(tmp_path / "CUDA" / "k", source=source))
    bundle = bundle_sources(spec)
    assert bundle.main == "CUDA/k/k.cu" and bundle.include_args == ()
    assert [rel for rel, _ in bundle.files] == ["CUDA/k/k.cu", "common/common.h", "common/util/more.h"]
    assert ".entry scale(" in nvcc_ptx(spec, tmp_path / "worker")  # a worker finds it where the source says


def test_a_project_under_a_system_folder_keeps_its_quoted_include_above_the_kernel(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """review F10: a project under /opt or /usr (a Docker image's /opt/app) lost its quoted
    `#include "../../common/x.h"` without a word (taken for a system header), so every build failed
    with "No such file" although nvcc builds it. Here the system folder is a tmp folder standing in
    for /opt; the system's own headers (/usr/include/stdint.h) stay out."""
    from compileiq.source import kernel

    system = tmp_path / "opt"
    monkeypatch.setattr(kernel, "SYSTEM_DIRS", (*kernel.SYSTEM_DIRS, system))
    (system / "common").mkdir(parents=True)
    (system / "common" / "x.h").write_text('#include "more.h"\n#define X MORE\n')
    (system / "common" / "more.h").write_text("#define MORE 2.0f\n")
    source = '#include "../../common/x.h"\n#include <stdint.h>\n' + SOURCE.replace("*= 2.0f", "*= X")
    (system / "bench" / "k").mkdir(parents=True)
    cu = write_kernel(system / "bench" / "k", source=source)
    spec = load_spec(cu)
    bundle = bundle_sources(spec)
    assert bundle.main == "bench/k/k.cu", bundle.main
    assert [rel for rel, _ in bundle.files] == ["bench/k/k.cu", "common/x.h", "common/more.h"], bundle.files
    assert ".entry scale(" in nvcc_ptx(spec, tmp_path / "worker")  # a worker finds it where the source says

def test_an_include_by_absolute_path_outside_the_kernel_folder_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "common.h").write_text("#define X 1\n")
    source = f'#include "{tmp_path}/common.h"\n' + SOURCE
    spec = load_spec(write_kernel(tmp_path / "k", source=source))
    with pytest.raises(KernelError, match=r"common.h lies outside the kernel's folder and its include_dirs, and no "
                                          r"#include \"...\" reaches it by a relative path"):
        bundle_sources(spec)


@needs_nvcc
def test_bundle_compiles_in_a_fresh_directory(tmp_path: Path) -> None:
    spec = load_spec(kernel_with_headers(tmp_path))
    ptx = nvcc_ptx(spec, tmp_path / "worker")
    assert ".entry k(" in ptx


def bundled_kernels() -> list[Path]:
    return sorted(KERNELS.glob("*/*.cu"))


def test_bundled_kernels_are_present() -> None:
    names = {cu.stem for cu in bundled_kernels()}
    assert {"reduction", "spill_heavy", "sgemm", "transpose", "softmax", "stencil"} <= names
    for cu in bundled_kernels():
        assert cu.parent.name == cu.stem and (cu.parent / "tune.toml").is_file()
        assert cu.read_text().startswith("//"), f"{cu.name} lacks its comment block"


@needs_nvcc
def test_bundled_kernels_compile_to_ptx_with_default_defines(tmp_path: Path) -> None:
    def compile_one(cu: Path) -> tuple[KernelSpec, str]:
        spec = load_spec(cu)
        defaults = tuple(f"-D{key[7:]}={value}" for key, value in spec.default_values().items())
        return spec, nvcc_ptx(spec, tmp_path / spec.name, spec.fixed_define_args() + defaults)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(compile_one, bundled_kernels()))
    for spec, ptx in results:
        assert spec.arch == "sm_90" and spec.entries, spec.name
        assert spec.block_size_for({}) in (64, 128, 256, 512, 1024), spec.name
        for entry in spec.entries:
            assert f".entry {entry}(" in ptx or f"{len(entry)}{entry}" in ptx, (spec.name, entry)


def test_measuring_keys_default_and_parse(tmp_path: Path) -> None:
    spec = load_spec(write_kernel(tmp_path / "a"), arch="sm_90")
    assert (spec.rtol, spec.atol, spec.mode, spec.metric_regex, spec.run_args) == (1e-5, 1e-6, "harness", None, ())
    toml = 'rtol = 1e-3\natol = 0\nmode = "program"\nmetric_regex = "took ([0-9.]+) ms"\nrun_args = ["--set", "n=64"]\n'
    spec = load_spec(write_kernel(tmp_path / "b", toml), arch="sm_90")
    assert (spec.rtol, spec.atol, spec.mode) == (1e-3, 0.0, "program")
    assert spec.metric_regex == "took ([0-9.]+) ms" and spec.run_args == ("--set", "n=64")


@pytest.mark.parametrize(("toml", "key"), [
    ("rtol = -1\n", "rtol"), ('atol = "x"\n', "atol"), ('mode = "bench"\n', "mode"),
    ('metric_regex = "no group"\n', "metric_regex"), ('metric_regex = "(("\n', "metric_regex"),
])
def test_bad_measuring_keys_name_the_key(tmp_path: Path, toml: str, key: str) -> None:
    with pytest.raises(KernelError, match=f"tune.toml: {key}:"):
        load_spec(write_kernel(tmp_path, toml), arch="sm_90")


def test_the_bundle_mirrors_the_project_never_the_system_or_the_filesystem_root() -> None:
    # the folder above the kernel's and its project include folders, so that "../x.h" resolves;
    # never one that holds /usr, /opt or the toolchain (their folders go to inc<N>/), nor "/":
    # a bundle, and so the study identity, never depends on where the project lies
    from compileiq.source.kernel import _bundle_top

    toolchain = (Path("/usr/local/cuda-13.0"), Path("/x/compileiq/include"), Path("/usr"), Path("/opt"))
    root = Path("/work/proj/examples/block")
    assert _bundle_top(root, (Path("/work/proj/test"),), toolchain) == Path("/work/proj")
    assert _bundle_top(root, (Path("/work/proj/examples/block/include"),), toolchain) == root
    assert _bundle_top(root, (Path("/usr/include/eigen3"), Path("/opt/lib/include")), toolchain) == root
    assert _bundle_top(root, (Path("/home/u/lib"),), toolchain) == root


@pytest.mark.parametrize(("entry", "name"), [
    ("_Z14calculate_tempiPfS_S_iiiiffffff", "calculate_temp"),  # Rodinia's hotspot
    ("_ZN3ops4tileILi8EEEvPf", "ops::tile<8>"),
    ("_Z4tileILin2EEvPf", "tile<-2>"),
    ("_ZN12_GLOBAL__N_15scaleEPf", "scale"),  # an anonymous namespace
    ("_Z7reduce6IfLj256ELb1EEvPT_S1_j", "reduce6<float, 256, true>"),  # cuda-samples' reduction
    ("_Z3fooI6MyTypeEvPT_", "foo"),  # a class argument: the template's name (every instance)
    ("_Z20BlockPrefixSumKernelIiLi128ELN3cub17CUB_300001_SM_90018BlockScanAlgorithmE2EEvPKT_PS3_",
     "BlockPrefixSumKernel<int, 128, (cub::CUB_300001_SM_900::BlockScanAlgorithm)2>"),  # an enumerator, as nvcc 13 mangles it
    ("_Z4scanILN2ns4ModeEn1EEvv", "scan<(ns::Mode)-1>"),
    ("saxpy", "saxpy"),  # extern "C"
])
def test_an_error_names_each_compiled_kernel_as_tune_toml_can_give_it(entry: str, name: str) -> None:
    from compileiq.source.entry_names import entry_matches, readable

    assert readable(entry) == name and entry_matches(entry, name)


def test_a_checkouts_copy_of_the_harness_is_not_part_of_the_kernel(tmp_path: Path) -> None:
    """The bundled kernels reach the harness through include_dirs into the checkout: with compileiq
    installed elsewhere that copy was bundled and hashed, so the study id and the gate's
    stale-source verdict depended on where compileiq was installed, and on the copy's version."""
    checkout = tmp_path / "checkout" / "compileiq" / "include" / "compileiq"
    checkout.mkdir(parents=True)
    harness = checkout / "harness.cuh"
    harness.write_bytes((harness_include_dir() / "compileiq" / "harness.cuh").read_bytes())
    kernel = tmp_path / "k" / "k.cu"
    kernel.parent.mkdir()
    kernel.write_text("#include <compileiq/harness.cuh>\n__global__ void k(float* x) { x[0] = 1; }\n")
    (kernel.parent / "tune.toml").write_text('include_dirs = ["../checkout/compileiq/include"]\n')
    first = bundle_sources(load_spec(kernel))
    harness.write_bytes(harness.read_bytes() + b"// another version of the checkout\n")
    second = bundle_sources(load_spec(kernel))
    assert not any(rel.endswith("harness.cuh") for rel, _ in first.files), [rel for rel, _ in first.files]
    assert first.sha256 == second.sha256
    elsewhere = tmp_path / "a" / "b" / "compileiq" / "include" / "compileiq"  # another checkout, deeper
    elsewhere.mkdir(parents=True)
    (elsewhere / "harness.cuh").write_bytes(harness.read_bytes())
    (kernel.parent / "tune.toml").write_text('include_dirs = ["../a/b/compileiq/include"]\n')
    assert bundle_sources(load_spec(kernel)).sha256 == first.sha256  # the same study wherever it lies


CUB_SCAN = """
#include <cub/block/block_scan.cuh>
template <typename T, int BLOCK_THREADS, cub::BlockScanAlgorithm ALGORITHM>
__global__ void BlockPrefixSumKernel(const T* in, T* out) {
    using BlockScanT = cub::BlockScan<T, BLOCK_THREADS, ALGORITHM>;
    __shared__ typename BlockScanT::TempStorage temp;
    T v = in[blockIdx.x * BLOCK_THREADS + threadIdx.x];
    BlockScanT(temp).ExclusiveSum(v, v);
    out[blockIdx.x * BLOCK_THREADS + threadIdx.x] = v;
}
template __global__ void BlockPrefixSumKernel<int, 128, cub::BLOCK_SCAN_RAKING>(const int*, int*);
template __global__ void BlockPrefixSumKernel<int, 128, cub::BLOCK_SCAN_WARP_SCANS>(const int*, int*);
"""


def test_a_cub_instance_with_an_enumerator_argument_can_be_named_in_tune_toml(tmp_path: Path) -> None:
    """CUB's BlockScan kernels take a cub::BlockScanAlgorithm: only built-in literal arguments were
    decoded, so neither `entries` nor [launch.NAME] could name one instance ("found:
    BlockPrefixSumKernel" twice). An enumerator is named by its enum and value, as a demangler
    prints it, CUB's versioned inline namespace left out (real nvcc, real CUB)."""
    import tomllib

    from tests.helpers import run_cli

    (tmp_path / "k.cu").write_text(CUB_SCAN)
    warp_scans = "BlockPrefixSumKernel<int, 128, (cub::BlockScanAlgorithm)2>"  # BLOCK_SCAN_WARP_SCANS
    (tmp_path / "tune.toml").write_text(f'entries = ["{warp_scans}"]\n[launch."{warp_scans}"]\nblock_size = 128\n')
    tuned = run_cli(["tune", "k.cu", "--workers", "local", "--budget", "1", "--db", f"sqlite:///{tmp_path / 't.db'}",
                     "--out", "k.acf.toml", "--only", "ptxas.opt_level"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    launch = tomllib.loads((tmp_path / "k.acf.toml").read_text())["evidence"]["best"]["launch_by_kernel"]
    [(named, facts)] = launch.items()  # that instance alone, at its launch (named with CUB's versioned namespace)
    assert named.startswith("BlockPrefixSumKernel<int, 128, (cub::") and named.endswith("::BlockScanAlgorithm)2>"), named
    assert facts["block_size"] == 128, launch
    # by the enumerator's name, as the source spells it: looked up in the CUB headers the build reads
    raking = "BlockPrefixSumKernel<int, 128, cub::BLOCK_SCAN_RAKING>"
    (tmp_path / "tune.toml").write_text(f'entries = ["{raking}"]\n[launch."{raking}"]\nblock_size = 64\n')
    tuned = run_cli(["tune", "k.cu", "--workers", "local", "--budget", "1", "--db", f"sqlite:///{tmp_path / 't.db'}",
                     "--out", "k.acf.toml", "--only", "ptxas.opt_level", "--force"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    launch = tomllib.loads((tmp_path / "k.acf.toml").read_text())["evidence"]["best"]["launch_by_kernel"]
    [(named, facts)] = launch.items()
    assert named.endswith("::BlockScanAlgorithm)0>") and facts["block_size"] == 64, launch
    (tmp_path / "tune.toml").write_text('entries = ["BlockPrefixSumKernel<int, 128, (cub::BlockScanAlgorithm)1>"]\n')
    missing = run_cli(["tune", "k.cu", "--workers", "local", "--budget", "1", "--db", f"sqlite:///{tmp_path / 't.db'}",
                       "--out", "k.acf.toml", "--only", "ptxas.opt_level"], cwd=tmp_path)
    assert missing.returncode != 0 and "Traceback" not in missing.output, missing.describe()
    assert "found: BlockPrefixSumKernel<int, 128, (cub::CUB_" in missing.stderr, missing.describe()


def test_an_enum_of_the_kernels_own_namespace_is_read_through_its_back_reference(tmp_path: Path) -> None:
    """A user's `ns::k<128, ns::SLOW>`, its enum beside the kernel: nvcc mangles the enum by a
    back-reference to the namespace (`LNS_4AlgoE1E`), which was not decoded ("no entry matches
    ['ns::k<128, (ns::Algo)1>']; found: ns::k"). Real nvcc; by the enumerator and by its value."""
    import tomllib

    from tests.helpers import run_cli

    (tmp_path / "k.cu").write_text("namespace ns {\nenum Algo { FAST, SLOW };\ntemplate <int B, Algo A>\n"
                                   "__global__ void k(float* y) { y[threadIdx.x] = A == FAST ? B : 2 * B; }\n"
                                   "template __global__ void k<128, SLOW>(float*);\n"
                                   "template __global__ void k<128, FAST>(float*);\n}\n")
    for named, value in (("ns::k<128, ns::SLOW>", 1), ("ns::k<128, (ns::Algo)0>", 0)):
        (tmp_path / "tune.toml").write_text(f'entries = ["{named}"]\n[launch."{named}"]\nblock_size = 64\n')
        tuned = run_cli(["tune", "k.cu", "--workers", "local", "--budget", "1", "--db", f"sqlite:///{tmp_path / 't.db'}",
                         "--out", "k.acf.toml", "--only", "ptxas.opt_level", "--force"], cwd=tmp_path)
        assert tuned.returncode == 0, tuned.describe()
        launch = tomllib.loads((tmp_path / "k.acf.toml").read_text())["evidence"]["best"]["launch_by_kernel"]
        assert launch == {f"ns::k<128, (ns::Algo){value}>": {"block_size": 64, "dynamic_smem": 0}}, launch


def test_enumerator_values_are_read_as_the_compiler_counts_them(tmp_path: Path) -> None:
    """Implicit values count on from the previous one; an explicit integer (hex, octal) or an
    earlier enumerator sets it; a scoped enumerator is named through its enum; one after a value
    only the compiler can work out stays unresolved."""
    from compileiq.source.enumerators import resolve, wanted

    header = tmp_path / "modes.h"
    header.write_text("namespace ns {\n// enum Decoy { A = 7 };\nenum Mode : int { A, B = 0x10, C, D = 010 /* 8 */, E = B,\n"
                      "  F = sizeof(int), G };\nenum class Kind { Fast = -2, Slow };\n}\n")
    names = wanted(["k<ns::A, ns::C, ns::D, ns::E, ns::G, ns::Kind::Slow, Slow, float, true>"])
    assert names == {"ns::A", "ns::C", "ns::D", "ns::E", "ns::G", "ns::Kind::Slow", "Slow"}
    assert dict(resolve(names, [header])) == {"ns::A": "(ns::Mode)0", "ns::C": "(ns::Mode)17", "ns::D": "(ns::Mode)8",
                                              "ns::E": "(ns::Mode)16", "ns::Kind::Slow": "(ns::Kind)-1"}


@pytest.mark.parametrize(("alias", "entry"), [  # as nvcc 13 mangles k<ALIAS> on Linux x86_64 (c++filt: k<short>, ...)
    ("int8_t", "_Z1kIaEvPT_"), ("uint8_t", "_Z1kIhEvPT_"), ("int16_t", "_Z1kIsEvPT_"), ("uint16_t", "_Z1kItEvPT_"),
    ("int32_t", "_Z1kIiEvPT_"), ("uint32_t", "_Z1kIjEvPT_"), ("int64_t", "_Z1kIlEvPT_"), ("uint64_t", "_Z1kImEvPT_"),
    ("std::size_t", "_Z1kImEvPT_"), ("std::int16_t", "_Z1kIsEvPT_"),
])
def test_a_fixed_width_alias_names_the_instance_of_the_type_it_is(alias: str, entry: str) -> None:
    from compileiq.source.entry_names import entry_matches

    others = {"_Z1kIaEvPT_", "_Z1kIhEvPT_", "_Z1kIsEvPT_", "_Z1kItEvPT_", "_Z1kIiEvPT_", "_Z1kIjEvPT_", "_Z1kIlEvPT_",
              "_Z1kImEvPT_", "_Z1kIcEvPT_", "_Z1kIxEvPT_", "_Z1kIyEvPT_"} - {entry}
    assert entry_matches(entry, f"k<{alias}>") and not any(entry_matches(o, f"k<{alias}>") for o in others)


@needs_nvcc
def test_entries_may_name_a_template_instance_by_its_fixed_width_type(tmp_path: Path) -> None:
    """HeCBench's convolution1D instantiates its kernels for int16_t and int: `entries =
    ["conv1d<int16_t>"]` stopped the run ("no entry matches ...; found: conv1d<int>, conv1d<short>"),
    the mangled name holding the type int16_t is (short), never its alias."""
    import tomllib

    from tests.helpers import run_cli

    (tmp_path / "k.cu").write_text("#include <cstdint>\ntemplate <typename T> __global__ void conv1d(T* x) "
                                   "{ x[threadIdx.x] = x[threadIdx.x] * 2 + 1; }\n"
                                   "template __global__ void conv1d<int16_t>(int16_t*);\n"
                                   "template __global__ void conv1d<int>(int*);\n")
    (tmp_path / "tune.toml").write_text('entries = ["conv1d<int16_t>"]\n[launch."conv1d<int16_t>"]\nblock_size = 64\n')
    tuned = run_cli(["tune", "k.cu", "--workers", "local", "--budget", "1", "--db", f"sqlite:///{tmp_path / 't.db'}",
                     "--out", "k.acf.toml", "--only", "ptxas.opt_level"], cwd=tmp_path)
    assert tuned.returncode == 0, tuned.describe()
    launch = tomllib.loads((tmp_path / "k.acf.toml").read_text())["evidence"]["best"]["launch_by_kernel"]
    assert launch == {"conv1d<short>": {"block_size": 64, "dynamic_smem": 0}}, launch
