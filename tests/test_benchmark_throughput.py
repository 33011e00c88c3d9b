"""benchmarks/throughput.py's reference methods on a tiny kernel: the two-stage script runs one
`nvcc -ptx` per distinct front end and one `ptxas` per variant, and the CPU pass measures both."""

from __future__ import annotations

from pathlib import Path

from compileiq.core.space import Config
from tests.helpers import TINY_KERNEL, load_benchmark

throughput = load_benchmark("throughput")


def test_the_two_stage_script_builds_each_front_end_once_and_each_variant(tmp_path: Path) -> None:
    (tmp_path / "scale.cu").write_text(TINY_KERNEL)
    (tmp_path / "tune.toml").write_text('arch = "sm_90"\nblock_size = 256\n\n[tune.defines]\nTILE = [32, 16]\n')
    plan = throughput.recipe(tmp_path / "scale.cu")
    base = plan.space.default_config().as_dict()
    configs = [Config.of({**base, "define.TILE": tile, "ptxas.maxrregcount": cap})
               for tile in (32, 16) for cap in ("default", 32, 64)]
    groups = plan.frontends(configs)
    assert sorted(len(members) for members in groups.values()) == [3, 3]  # two front ends, three variants each
    argv = plan.ptxas_argv(configs[1], Path("k.ptx"), Path("k.cubin"))
    assert argv[0] == plan.tools.ptxas and "--maxrregcount=32" in argv and "-v" in argv
    assert "-ptx" in plan.frontend_argv(configs[0], Path("k.ptx"))
    timed = throughput.two_stage(plan, configs, 2)
    assert timed.variants == 6 and timed.seconds > 0 and timed.notes == "nvcc -ptx 2, ptxas 6"
    frontend, ptxas = throughput.cpu_pass(plan, configs)
    assert frontend > 0 and ptxas > 0
