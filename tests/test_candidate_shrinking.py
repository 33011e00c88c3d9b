"""Shrinking the candidates to time is bounded by the budget (user53, fault 2): a budget-8 `static`
run that kept the shipped build (every trial that removed its `-Xptxas -maxrregcount=24` spills
lowered occupancy) built 40 more trials to shrink candidates no view offers as the choice. They
are shrunk with at most half the budget now, the summary says so, and a rerun builds nothing and
lists the same candidates (the ACF and the report alike). Real nvcc/ptxas, real SQLite."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from helpers import compile_commands_file, run_cli

# Origin: gtcasl/gpuocelot tests/parboil/benchmarks/stencil/src/cuda/kernels.cu
# @4aee34871649d9b730d90b2a829adfecb4432367 (UIUC Parboil), its common.h's Index3D inlined.
STENCIL = """\
#define Index3D(_nx,_ny,_i,_j,_k) ((_i)+_nx*((_j)+_ny*(_k)))
__global__ void block2D_hybrid_coarsen_x(float c0,float c1,float *A0,float *Anext, int nx, int ny, int nz)
{
    const int i = blockIdx.x*blockDim.x*2+threadIdx.x;
    const int i2= blockIdx.x*blockDim.x*2+threadIdx.x+blockDim.x;
    const int j = blockIdx.y*blockDim.y+threadIdx.y;
    const int sh_id=threadIdx.x + threadIdx.y*blockDim.x*2;
    const int sh_id2=threadIdx.x +blockDim.x+ threadIdx.y*blockDim.x*2;
    extern __shared__ float sh_A0[];
    sh_A0[sh_id]=0.0f;
    sh_A0[sh_id2]=0.0f;
    __syncthreads();
    const bool w_region =  i>0 && j>0 &&(i<nx-1) &&(j<ny-1) ;
    const bool w_region2 =  j>0 &&(i2<nx-1) &&(j<ny-1) ;
    const bool x_l_bound = (threadIdx.x==0);
    const bool x_h_bound = ((threadIdx.x+blockDim.x)==(blockDim.x*2-1));
    const bool y_l_bound = (threadIdx.y==0);
    const bool y_h_bound = (threadIdx.y==(blockDim.y-1));
    float bottom=0.0f,bottom2=0.0f,top=0.0f,top2=0.0f;
    if((i<nx) &&(j<ny)) {
        bottom=A0[Index3D (nx, ny, i, j, 0)];
        sh_A0[sh_id]=A0[Index3D (nx, ny, i, j, 1)];
    }
    if((i2<nx) &&(j<ny)) {
        bottom2=A0[Index3D (nx, ny, i2, j, 0)];
        sh_A0[sh_id2]=A0[Index3D (nx, ny, i2, j, 1)];
    }
    __syncthreads();
    for(int k=1;k<nz-1;k++) {
        float a_left_right,a_top,a_down;
        if((i<nx) &&(j<ny))
            top=A0[Index3D (nx, ny, i, j, k+1)];
        if(w_region) {
            a_left_right=x_l_bound?A0[Index3D (nx, ny, i-1, j, k )]:sh_A0[sh_id-1];
            a_down=y_l_bound?A0[Index3D (nx, ny, i, j-1, k )]:sh_A0[sh_id-2*blockDim.x];
            a_top=y_h_bound?A0[Index3D (nx, ny, i, j+1, k )]:sh_A0[sh_id+2*blockDim.x];
            Anext[Index3D (nx, ny, i, j, k)] = (a_left_right + sh_A0[sh_id+1] + a_top + a_down
                                              + top + bottom)*c1 - sh_A0[sh_id]*c0 ;
        }
        if((i2<nx) &&(j<ny))
            top2=A0[Index3D (nx, ny, i2, j, k+1)];
        if(w_region2) {
            a_left_right=x_h_bound?A0[Index3D (nx, ny, i2+1, j, k )]:sh_A0[sh_id2+1];
            a_down=y_l_bound?A0[Index3D (nx, ny, i2, j-1, k )]:sh_A0[sh_id2-2*blockDim.x];
            a_top=y_h_bound?A0[Index3D (nx, ny, i2, j+1, k )]:sh_A0[sh_id2+2*blockDim.x];
            Anext[Index3D (nx, ny, i2, j, k)] = (a_left_right + sh_A0[sh_id2-1] + a_top + a_down +  top2
                                                +bottom2)*c1 - sh_A0[sh_id2]*c0;
        }
        __syncthreads();
        bottom=sh_A0[sh_id];
        sh_A0[sh_id]=top;
        bottom2=sh_A0[sh_id2];
        sh_A0[sh_id2]=top2;
        __syncthreads();
    }
}
"""
SHIPPED = "nvcc -O3 -arch=sm_90 -Xptxas -dlcm=cg -Xptxas -maxrregcount=24 --use_fast_math -c kernels.cu -o kernels.o"
SUMMARY = re.compile(r"trials: (\d+) search trials \(budget 8\) \+ (\d+) for simplification/ablation"
                     r"(?: \((\d+) of those asked to shrink the candidates to time, at most half the budget\))?; (\d+) new")


def _tune(folder: Path) -> tuple[tuple[int, ...], str]:
    result = run_cli(["tune", "kernels.cu", "--compile-commands", "compile_commands.json", "--budget", "8",
                      "--workers", "local", "--db", f"sqlite:///{folder / 't.db'}", "--out", "k.acf.toml",
                      "--resume"], cwd=folder)
    assert result.returncode == 0, result.describe()
    found = SUMMARY.search(result.stdout)
    assert found, result.describe()
    return tuple(int(g or 0) for g in found.groups()), result.output


def _to_time(folder: Path) -> list[int]:
    return [entry["trial"] for entry in tomllib.loads((folder / "k.acf.toml").read_text())["evidence"]["to_time"]]


def test_a_kept_baseline_shrinks_its_candidates_to_time_within_half_the_budget(tmp_path: Path) -> None:
    (tmp_path / "kernels.cu").write_text(STENCIL)
    compile_commands_file(tmp_path, SHIPPED, file="kernels.cu")
    (searched, extra, shrunk, new), stdout = _tune(tmp_path)
    assert "chosen (#0)" in stdout, stdout  # the shipped build is kept: there is no winner to simplify
    listed = _to_time(tmp_path)
    assert listed, "the fixture needs candidates to time"
    assert searched == 8 and extra <= 4 and 0 < shrunk <= 4 and new == searched + extra, stdout
    assert "the candidates to time are shrunk with at most 4 builds (half the budget)" in stdout
    # one decision: the report lists the candidates the ACF lists, and a rerun builds nothing and lists them again
    report = run_cli(["report", "1", "--db", f"sqlite:///{tmp_path / 't.db'}", "--format", "md", "-o", "-"],
                     cwd=tmp_path)
    assert report.returncode == 0, report.describe()
    section = report.stdout.split("## Candidates to time on a GPU", 1)[1].split("\n## ", 1)[0]
    assert [int(n) for n in re.findall(r"^\| #(\d+) \|", section, re.MULTILINE)] == listed, section
    (_, extra_again, _, new_again), _ = _tune(tmp_path)
    assert (extra_again, new_again) == (extra, 0)
    assert _to_time(tmp_path) == listed
