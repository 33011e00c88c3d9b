"""The two-stage compile against the real nvcc/ptxas 13.0."""

import shutil
import stat
import struct
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from compileiq.build.compile import (
    AssembleJob,
    BuildStatus,
    ExecutableJob,
    FrontendJob,
    assemble,
    build_executable,
    code_hash,
    emit_ptx,
    parse_resources,
)
from compileiq.build.cubin import CubinError, text_sections
from compileiq.core.processes import run_tool
from compileiq.core.space_files import load_space
from compileiq.core.toolchain import find_toolchain
from compileiq.evaluate.metrics import StaticEvaluator
from compileiq.source.harness import harness_include_dir
from compileiq.source.kernel import bundle_sources, load_spec
from tests.helpers import CAPPED_KERNEL

KERNEL = textwrap.dedent(
    """
    #include "scale.h"
    extern "C" __global__ void __launch_bounds__(256) axpy(float* y, const float* x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = SCALE * x[i] + y[i];
    }
    __global__ void sum(const float* x, float* out, int n) {
        __shared__ float tile[256];
        tile[threadIdx.x] = threadIdx.x < n ? x[threadIdx.x] : 0.0f;
        __syncthreads();
        if (threadIdx.x == 0) { float s = 0; for (int k = 0; k < 256; ++k) s += tile[k]; *out = s; }
    }
    """
)


@pytest.fixture(scope="module")
def ptx(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kernel")
    (folder / "k.cu").write_text(KERNEL)
    (folder / "scale.h").write_text("#define SCALE 2.0f\n")
    tools = find_toolchain()
    bundle = bundle_sources(load_spec(folder / "k.cu"))
    result = emit_ptx(FrontendJob(tools.nvcc, bundle, "sm_90", (), 60))
    assert result.status is BuildStatus.OK, result.message
    return result


def _assemble(ptx, *args):
    return assemble(AssembleJob(find_toolchain().ptxas, "sm_90", tuple(args), 60), ptx)


def test_ptxas_report_gives_resources_per_entry(ptx):
    build = _assemble(ptx)
    assert build.ok and build.code_hash
    by_name = {e.name: e for e in build.entries}
    assert set(by_name) == {"axpy", "_Z3sumPKfPfi"}
    assert by_name["_Z3sumPKfPfi"].shared_bytes == 1024
    assert by_name["_Z3sumPKfPfi"].barriers == 1
    assert all(e.registers > 0 and e.instructions > 0 for e in build.entries)
    assert set(text_sections(build.cubin)) == set(by_name)


def test_shared_memory_is_read_where_ptxas_reports_a_stack_frame_beside_it(tmp_path):
    """ptxas 13.0 puts "N bytes cumulative stack size" between the barriers and the shared memory
    of its resource line; the shared memory was read as 0 there, and the occupancy shown as 100%
    where 48,000 bytes of it allow 4 blocks of 256 threads (50%)."""
    (tmp_path / "k.cu").write_text(textwrap.dedent(
        """
        __global__ void k(float* o, int n) {
            __shared__ float sm[12000];
            float loc[64];
            for (int i = 0; i < 64; ++i) loc[(i * n) & 63] = o[i * n];
            sm[threadIdx.x] = loc[n & 63];
            __syncthreads();
            o[threadIdx.x] = sm[(threadIdx.x + n) % 12000];
        }
        """))
    tools = find_toolchain()
    front = emit_ptx(FrontendJob(tools.nvcc, bundle_sources(load_spec(tmp_path / "k.cu")), "sm_90", (), 60))
    build = _assemble(front)
    assert build.ok, build.message
    (entry,) = build.entries
    assert (entry.shared_bytes, entry.barriers) == (48000, 1)
    assert entry.stack_bytes > 0


def test_code_hash_ignores_debug_info_but_not_code(ptx):
    plain, lined, low = _assemble(ptx), _assemble(ptx, "-lineinfo"), _assemble(ptx, "-O0")
    assert plain.code_hash == lined.code_hash
    assert plain.code_hash != low.code_hash


def test_spills_are_parsed():
    report = textwrap.dedent(
        """\
        ptxas info    : Compiling entry function 'k' for 'sm_90'
        ptxas info    : Function properties for k
            312 bytes stack frame, 336 bytes spill stores, 340 bytes spill loads
        ptxas info    : Used 128 registers, used 1 barriers, 2048 bytes smem, 380 bytes cmem[0]
        """
    )
    (entry,) = parse_resources(report, {"k": 99})
    assert (entry.spill_store_bytes, entry.spill_load_bytes, entry.spill_bytes) == (336, 340, 676)
    assert (entry.stack_bytes, entry.registers, entry.shared_bytes, entry.instructions) == (312, 128, 2048, 99)


def test_a_compile_error_keeps_the_compiler_message(tmp_path):
    (tmp_path / "bad.cu").write_text("__global__ void k(float* x) { x[0] = undefined_name; }\n")
    bundle = bundle_sources(load_spec(tmp_path / "bad.cu"))
    result = emit_ptx(FrontendJob(find_toolchain().nvcc, bundle, "sm_90", (), 60))
    assert result.status is BuildStatus.COMPILE_ERROR
    assert "undefined_name" in result.message
    build = _assemble(result)
    assert build.status is BuildStatus.COMPILE_ERROR and "undefined_name" in build.message


def test_a_failed_variant_is_named_by_ptxas_fatal_line_not_a_warning_before_it(tmp_path):
    """ptxas warns about a register cap below 24 before it fails on an unresolved call: the trial's
    line showed the warning as the cause."""
    (tmp_path / "ext.cu").write_text("extern __device__ float f(float);\n"
                                     "__global__ void k(float* x) { x[threadIdx.x] = f(x[threadIdx.x]); }\n")
    spec = load_spec(tmp_path / "ext.cu")
    ptx = emit_ptx(FrontendJob(find_toolchain().nvcc, bundle_sources(spec), "sm_90", (), 60))
    build = _assemble(ptx, "--maxrregcount=16")
    assert build.status is BuildStatus.COMPILE_ERROR and "ptxas warning" in build.message
    evaluation = StaticEvaluator("spills", spec).evaluate(build, load_space(find_toolchain().nvcc_version).default_config())
    assert evaluation.reason is not None
    assert evaluation.reason.splitlines()[0] == "compile_error: ptxas fatal   : Unresolved extern function '_Z1ff'"


def test_a_hanging_compiler_is_killed_at_its_timeout(tmp_path):
    hang = tmp_path / "fake-ptxas"
    hang.write_text("#!/bin/sh\nsleep 30 &\nwait\n")  # a child keeps running: the group must die
    hang.chmod(hang.stat().st_mode | stat.S_IEXEC)
    run = run_tool([str(hang)], timeout_s=0.5)
    assert run.timed_out and run.seconds < 5


def test_ptxas_timeout_is_a_recorded_state(ptx, tmp_path):
    hang = tmp_path / "slow-ptxas"
    hang.write_text("#!/bin/sh\nsleep 30\n")
    hang.chmod(hang.stat().st_mode | stat.S_IEXEC)
    build = assemble(AssembleJob(str(hang), "sm_90", (), 0.5), ptx)
    assert build.status is BuildStatus.TIMEOUT and "0.5 s" in build.message


def test_not_a_cubin():
    with pytest.raises(CubinError):
        text_sections(b"not an elf file at all")


def test_two_stage_equals_one_step_nvcc(ptx, tmp_path):
    """The PTX-then-ptxas path must give the machine code a plain `nvcc -cubin` gives."""
    two_stage = _assemble(ptx, "--maxrregcount=32")
    source = tmp_path / "k.cu"
    source.write_text(KERNEL)
    (tmp_path / "scale.h").write_text("#define SCALE 2.0f\n")
    out = tmp_path / "k.cubin"
    tools = find_toolchain()
    run = run_tool([tools.nvcc, "-arch=sm_90", "-cubin", "-Xptxas=--maxrregcount=32", str(source), "-o", str(out)], 120)
    assert run.returncode == 0, run.output
    assert code_hash(text_sections(Path(out).read_bytes())) == two_stage.code_hash


def test_a_variants_ptxas_cap_under_nvccs_own_cap_builds_what_nvcc_builds(tmp_path):
    """nvcc hands ptxas its own -maxrregcount after any -Xptxas one, and ptxas keeps the last: the
    two-stage build put the base cap first, so a cap of 255 under nvcc's 32 built with 255 (a forged
    ACF's evidence passed the gate that way). The base cap comes last now, as nvcc hands it."""
    source = tmp_path / "heavy.cu"
    source.write_text(CAPPED_KERNEL)
    (tmp_path / "tune.toml").write_text('nvcc_flags = ["-maxrregcount=32"]\n')
    tools = find_toolchain()
    ptx = emit_ptx(FrontendJob(tools.nvcc, bundle_sources(load_spec(source)), "sm_90", (), 60))
    assert ptx.status is BuildStatus.OK and ptx.ptxas_base == ("--maxrregcount=32",), ptx.message
    two_stage = _assemble(ptx, "--maxrregcount=255")
    assert two_stage.code_hash != _assemble(replace(ptx, ptxas_base=()), "--maxrregcount=255").code_hash  # caps matter here
    out = tmp_path / "heavy.cubin"
    run = run_tool([tools.nvcc, "-arch=sm_90", "-cubin", "-maxrregcount=32", "-Xptxas=--maxrregcount=255",
                    str(source), "-o", str(out)], 120)
    assert run.returncode == 0, run.output
    assert code_hash(text_sections(Path(out).read_bytes())) == two_stage.code_hash


# -- review 51: the measuring program's device code is the recorded cubin's -------------------------

READS_HOST_LEVEL = """
__global__ void k(float* y) {
#if defined(__OPTIMIZE__) || !defined(__NO_INLINE__)
  y[threadIdx.x] = SCALE * 3.0f;
#else
  y[threadIdx.x] = SCALE * 5.0f;
#endif
}
int main() { return 0; }
"""
EM_CUDA = 190


def _embedded_cubins(executable: bytes) -> list[bytes]:
    """The CUDA ELF images an executable's fatbin holds (uncompressed, as nvcc 13.0 embeds small ones)."""
    found, at = [], 0
    while (at := executable.find(b"\x7fELF\x02\x01", at + 1)) != -1:
        if struct.unpack_from("<H", executable, at + 18)[0] == EM_CUDA:
            (sections_at,) = struct.unpack_from("<Q", executable, at + 0x28)
            entry_size, count = struct.unpack_from("<HH", executable, at + 0x3A)
            found.append(executable[at:at + sections_at + entry_size * count])
    return found


def test_the_measuring_build_times_the_device_code_the_static_build_records(tmp_path):
    """The measuring program is built with the host compiler at -O2 (its host code was seconds
    slower at -O0), and nvcc preprocesses the device pass with the host compiler's options: a
    kernel that reads __OPTIMIZE__ was timed as other code than the cubin its trial records."""
    source = tmp_path / "k.cu"
    source.write_text(READS_HOST_LEVEL)
    tools = find_toolchain()
    bundle = bundle_sources(load_spec(source))
    ptx = emit_ptx(FrontendJob(tools.nvcc, bundle, "sm_90", ("-DSCALE=2.0f",), 60))
    recorded = _assemble(ptx, "--maxrregcount=32")
    assert recorded.ok, recorded.message
    built = build_executable(ExecutableJob(tools.nvcc, bundle, "sm_90", ("-DSCALE=2.0f",), ("--maxrregcount=32",), 240))
    assert built.ok, built.message
    timed = {code_hash(sections) for sections in map(text_sections, _embedded_cubins(built.executable)) if sections}
    assert timed == {recorded.code_hash}


def test_a_host_level_among_the_base_flags_keeps_its_macros_in_the_measuring_build(tmp_path):
    """A shipped -O3 applied because the kernel reads __OPTIMIZE__ (`host_check`): the static builds
    compile the device code with it, so the measuring build must not pre-include the header that
    undoes it, or the timed code would be the one the shipped build never makes."""
    source = tmp_path / "k.cu"
    source.write_text(READS_HOST_LEVEL)
    (tmp_path / "tune.toml").write_text('nvcc_flags = ["-O3"]\n')
    tools = find_toolchain()
    bundle = bundle_sources(load_spec(source))
    recorded = _assemble(emit_ptx(FrontendJob(tools.nvcc, bundle, "sm_90", ("-DSCALE=2.0f",), 60)))
    assert recorded.ok, recorded.message
    built = build_executable(ExecutableJob(tools.nvcc, bundle, "sm_90", ("-DSCALE=2.0f",), (), 240))
    assert built.ok, built.message
    timed = {code_hash(sections) for sections in map(text_sections, _embedded_cubins(built.executable)) if sections}
    assert timed == {recorded.code_hash}
    (tmp_path / "tune.toml").unlink()  # without it: the other branch, so the comparison above means something
    plain = _assemble(emit_ptx(FrontendJob(tools.nvcc, bundle_sources(load_spec(source)), "sm_90", ("-DSCALE=2.0f",), 60)))
    assert plain.ok and plain.code_hash != recorded.code_hash, plain.message


def test_the_measuring_build_pre_includes_compileiqs_own_header_not_a_kernels_file_of_that_name(tmp_path):
    """rev51: the measuring build pre-included `compileiq/host_optimisation.h` by its relative name, and
    GCC looks for that in the working directory first, where the kernel's bundle is written: a kernel
    holding a file of that name had it pre-included in place of compileiq's."""
    (tmp_path / "compileiq").mkdir()
    (tmp_path / "compileiq" / "host_optimisation.h").write_text(
        "#ifndef KERNEL_INCLUDES_IT\n#error the kernel's own compileiq/host_optimisation.h was pre-included\n#endif\n")
    source = tmp_path / "k.cu"
    source.write_text('#define KERNEL_INCLUDES_IT 1\n#include "compileiq/host_optimisation.h"\n' + READS_HOST_LEVEL)
    tools = find_toolchain()
    bundle = bundle_sources(load_spec(source))
    assert "compileiq/host_optimisation.h" in dict(bundle.files), bundle.files
    built = build_executable(ExecutableJob(tools.nvcc, bundle, "sm_90", ("-DSCALE=2.0f",), (), 240))
    assert built.ok, built.message
    # the absolute path goes through nvcc's shell: a folder with a space is one word still
    spaced = tmp_path / "with space" / "include"
    shutil.copytree(harness_include_dir(), spaced)
    built = build_executable(ExecutableJob(tools.nvcc, bundle, "sm_90", ("-DSCALE=2.0f",), (), 240, str(spaced)))
    assert built.ok, built.message


READS_CUDA_ARCH = """
__global__ void k(float* y) {
#if __CUDA_ARCH__ >= 860
  y[threadIdx.x] = 3.0f;
#else
  y[threadIdx.x] = 5.0f;
#endif
}
int main() { return 0; }
"""


def test_the_measuring_build_makes_sm_86_code_from_the_older_ptx_the_trials_do(tmp_path):
    """A shipped -arch=compute_80 -code=sm_86 (rev51 #1): the trials compile compute_80 PTX, then ptxas
    for sm_86; the timed executable embeds that code alone, not sm_86 code from compute_86 PTX."""
    source = tmp_path / "k.cu"
    source.write_text(READS_CUDA_ARCH)
    tools = find_toolchain()
    bundle = bundle_sources(load_spec(source))
    ptx = emit_ptx(FrontendJob(tools.nvcc, bundle, "compute_80", (), 60))
    recorded = assemble(AssembleJob(tools.ptxas, "sm_86", (), 60), ptx)
    assert recorded.ok, recorded.message
    built = build_executable(ExecutableJob(tools.nvcc, bundle, "sm_86", (), (), 240, ptx_arch="compute_80"))
    assert built.ok, built.message
    timed = {code_hash(sections) for sections in map(text_sections, _embedded_cubins(built.executable)) if sections}
    assert timed == {recorded.code_hash}
