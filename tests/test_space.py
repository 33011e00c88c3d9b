"""Search space: loading, selection, rendering and its inverse, and the real compiler."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from compileiq.core.space import Config, SearchSpace, SpaceError
from compileiq.core.space_files import available_versions, load_space

SPACES = Path(__file__).resolve().parent.parent / "search_spaces"


@pytest.fixture(scope="module")
def space() -> SearchSpace:
    return load_space("13.0")


def random_config(space: SearchSpace, rng: random.Random) -> Config:
    return Config.of({p.name: rng.choice(p.values) for p in space.parameters})


def test_loads_both_stages_with_compiler_defaults(space: SearchSpace) -> None:
    assert space.id == "nvcc-13.0+ptxas-13.0"
    assert space.compiler_version == "13.0"
    assert available_versions() == ["13.0"]
    stages = {p.stage for p in space.parameters}
    assert stages == {"frontend", "ptxas"}
    default = space.default_config()
    space.validate(default)
    assert space.nvcc_args(default) == () == space.ptxas_args(default)
    assert space.parameter("ptxas.opt_level").values == (0, 1, 2, 3)
    assert space.parameter("ptxas.register_usage_level").default == 5


def test_version_fallback_and_unknown_version() -> None:
    assert load_space("13.0.88").compiler_version == "13.0"
    with pytest.raises(SpaceError, match=r"no search space for nvcc 12\.4; available: 13\.0"):
        load_space("12.4")


def test_select_excludes_risky_parameters_by_default(space: SearchSpace) -> None:
    safe = space.select()
    assert {p.risk for p in safe.parameters} == {"safe"}
    assert "nvcc.use_fast_math" not in {p.name for p in safe.parameters}
    assert {p.risk for p in space.select(allow_numerics=True).parameters} == {"safe", "numerics"}
    assert "nvcc.restrict" in {p.name for p in space.select(allow_semantics=True).parameters}
    only = space.select(only=["ptxas.opt_level", "ptxas.maxrregcount"])
    assert [p.name for p in only.parameters] == ["ptxas.opt_level", "ptxas.maxrregcount"]
    assert only.size() == 4 * 11
    assert "ptxas.opt_level" not in {
        p.name for p in safe.select(exclude=["ptxas.opt_level"]).parameters
    }
    assert len({space.sha256, safe.sha256, only.sha256}) == 3
    with pytest.raises(SpaceError, match="nope"):
        space.select(only=["nope"])


def test_render_inverse_round_trip(space: SearchSpace) -> None:
    full = space.with_defines({"BLOCK": [128, 256, 512], "VARIANT": ["a", "b"]})
    rng = random.Random(7)
    for _ in range(300):
        config = random_config(full, rng)
        args = full.nvcc_args(config)
        assert full.config_from_nvcc_args(args) == config
        assert all(" " not in a for a in args + full.ptxas_args(config))


def test_nvcc_args_spelling(space: SearchSpace) -> None:
    config = space.default_config().with_values(
        {"nvcc.fmad": False, "nvcc.prec_div": False, "ptxas.opt_level": 2}
    )
    assert space.nvcc_args(config) == ("--prec-div=false", "--fmad=false", "-Xptxas=-O2")
    # nvcc forwards --fmad to ptxas itself, so a direct ptxas call needs it too
    assert space.ptxas_args(config) == ("--fmad=false", "-O2")
    assert space.frontend_args(config) == ("--prec-div=false", "--fmad=false")
    parsed = space.config_from_nvcc_args(["-Xptxas", "-O1,--maxrregcount=32"])
    assert parsed["ptxas.opt_level"] == 1 and parsed["ptxas.maxrregcount"] == 32


@pytest.mark.parametrize(
    "args",
    [
        ["-Xcompiler", "-O3"],
        ["--compiler-bindir=/x"],
        ["-o", "out"],
        ["--run"],
        ["--no-such-flag"],
        ["-Xptxas=-O2,--output-file=x"],
        ["-Xptxas=--maxrregcount=default"],
        ["-Xptxas=-O2", "-Xptxas=-O1"],
    ],
)
def test_config_from_nvcc_args_rejects(space: SearchSpace, args: list[str]) -> None:
    with pytest.raises(SpaceError) as info:
        space.config_from_nvcc_args(args)
    assert "\n" not in str(info.value)


def test_config_values_are_plain_and_checked(space: SearchSpace) -> None:
    np = pytest.importorskip("numpy")
    config = Config.of({"b": np.int64(3), "a": np.bool_(True), "c": np.str_("x")})
    assert config.items == (("a", True), ("b", 3), ("c", "x"))
    assert [type(v) for _, v in config.items] == [bool, int, str]
    assert config.key == '{"a":true,"b":3,"c":"x"}'
    bad = space.default_config().with_values({"ptxas.opt_level": True})
    with pytest.raises(SpaceError, match="ptxas.opt_level"):
        space.validate(bad)
    with pytest.raises(SpaceError, match="lacks"):
        space.validate(Config.of({"ptxas.opt_level": 3}))
    with pytest.raises(SpaceError):
        space.with_defines({"BAD NAME": [1]})


def test_defines_render_always(space: SearchSpace) -> None:
    full = space.with_defines({"BLOCK": [256, 128]})
    assert full.nvcc_args(full.default_config()) == ("-DBLOCK=256",)
    assert full.parameter("define.BLOCK").stage == "frontend"
    assert full.sha256 != space.sha256


def _copy_spaces(tmp_path: Path) -> Path:
    for name in ("nvcc-13.0.toml", "ptxas-13.0.toml"):
        shutil.copy(SPACES / name, tmp_path / name)
    return tmp_path


@pytest.mark.parametrize(
    ("old", "new", "expect"),
    [
        ('kind = "flag"', 'kind = "flag', "malformed TOML"),
        ('render = "--use_fast_math"\n', "", "nvcc.use_fast_math.*render"),
        ('kind = "flag"', 'kind = "switch"', "nvcc.use_fast_math.*kind"),
        ("default = 101", "default = 102", "nvcc.jump_table_density.*default"),
        ('name = "nvcc.ftz"', 'name = "nvcc.use_fast_math"', "duplicate.*nvcc.use_fast_math"),
        ('version = "13.0"', 'version = "12.0"', "header"),
        ('risk = "numerics"', 'risk = "maybe"', "nvcc.use_fast_math.*risk"),
    ],
)
def test_malformed_space_files(tmp_path: Path, old: str, new: str, expect: str) -> None:
    path = _copy_spaces(tmp_path) / "nvcc-13.0.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(SpaceError, match=expect) as info:
        load_space("13.0", tmp_path)
    assert "\n" not in str(info.value)
    assert "nvcc-13.0.toml" in str(info.value)


KERNEL = r"""
__global__ void mix(const float* x, float* y, const int* op, int n, int iters, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = y[i];
    for (int k = 0; k < iters; ++k) {
        float v = x[(i + k) % n];
        switch (op[k & 7]) {
            case 0: acc = acc * a + v; break;
            case 1: acc += v / (acc + 1.0f); break;
            case 2: acc += sqrtf(fabsf(v)); break;
            case 3: acc -= __expf(-v); break;
            case 4: acc = fmaxf(acc, v); break;
            default: acc *= 0.5f;
        }
    }
    atomicAdd(&y[(i * 7) % n], acc);
}
"""


def _run(argv: Sequence[str], cwd: Path) -> tuple[str, int, str]:
    done = subprocess.run(
        list(argv), check=False, cwd=cwd, capture_output=True, text=True, timeout=120
    )
    return " ".join(argv), done.returncode, done.stderr[-500:]


def _variants(space: SearchSpace, stage: str) -> list[Config]:
    default = space.default_config()
    return [
        default.with_values({p.name: v})
        for p in space.parameters
        if p.stage == stage
        for v in p.values
        if (type(v), v) != (type(p.default), p.default)
    ]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("ptxas") is None, reason="no CUDA")
def test_every_value_compiles_with_the_real_compiler(space: SearchSpace, tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(KERNEL)
    front = [space.default_config(), *_variants(space, "frontend")]
    nvcc = [["nvcc", "-arch=sm_90", "-ptx", *space.frontend_args(c), "-o", f"f{i}.ptx", "k.cu"]
            for i, c in enumerate(front)]  # fmt: skip
    one_step = random_config(space, random.Random(3))
    nvcc.append(
        ["nvcc", "-arch=sm_90", "-cubin", *space.nvcc_args(one_step), "-o", "o.cubin", "k.cu"]
    )
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda a: _run(a, tmp_path), nvcc))
        assert [r for r in results if r[1] != 0] == []
        ptxas = [["ptxas", "-arch=sm_90", *space.ptxas_args(c), f"f{i}.ptx", "-o", f"f{i}.cubin"]
                 for i, c in enumerate(front)]  # fmt: skip
        ptxas += [["ptxas", "-arch=sm_90", *space.ptxas_args(c), "f0.ptx", "-o", f"p{i}.cubin"]
                  for i, c in enumerate(_variants(space, "ptxas"))]  # fmt: skip
        results = list(pool.map(lambda a: _run(a, tmp_path), ptxas))
    assert [r for r in results if r[1] != 0] == []
    assert len(results) > 50


@pytest.mark.parametrize(
    ("name", "render", "says"),
    [  # the red team's: each loaded, was searched, and the gate passed its ACF
        ("ptxas.level", "--opt-level={value}", "only the parameter ptxas.opt_level may"),
        ("ptxas.quick", "-O{value}", "only the parameter ptxas.opt_level may"),
        ("ptxas.expensive", "-allow-expensive-optimizations={value}", "ptxas.allow_expensive_optimizations may"),
        ("ptxas.debug", "-g", "not a code-generation option"),
        ("ptxas.lines", "--generate-line-info", "not a code-generation option"),
        ("ptxas.fast", "--Ofast-compile={value}", "not a code-generation option"),
        ("nvcc.debug", "-G", "not a code-generation option"),
        ("nvcc.libdevice", "--libdevice-directory=/tmp/x{value}", "not a code-generation option"),
        ("nvcc.archiver", "-arbin=/tmp/ar{value}", "not a code-generation option"),
        ("nvcc.xptxas", "-Xptxas=-O{value}", "not a code-generation option"),
    ],
)
def test_a_space_file_renders_only_code_generation_options(tmp_path: Path, name: str, render: str, says: str) -> None:
    """A space folder is data: an extra parameter that rendered --opt-level=1 under another name
    got past the rule that no static objective lowers -O (it is known by parameter name), and
    -g, -G, --libdevice-directory and -arbin loaded too."""
    stage = name.split(".")[0]
    path = _copy_spaces(tmp_path) / f"{stage}-13.0.toml"
    path.write_text(path.read_text() + f'\n[[parameter]]\nname = "{name}"\nkind = "int"\nlow = 0\nhigh = 3\n'
                    f'default = 3\nrender = "{render}"\nrisk = "safe"\nhelp = "x"\n')
    with pytest.raises(SpaceError, match=f"{name}.*{re.escape(says)}"):
        load_space("13.0", tmp_path)


def test_the_optimisation_level_may_use_its_long_spelling(tmp_path: Path) -> None:
    path = _copy_spaces(tmp_path) / "ptxas-13.0.toml"
    text = path.read_text()
    path.write_text(text.replace('render = "-O{value}"', 'render = "--opt-level={value}"', 1))
    space = load_space("13.0", tmp_path)
    assert space.parameter("ptxas.opt_level").argv(1) == ("--opt-level=1",)


def test_every_owner_of_a_lowering_option_is_a_lowering_rule() -> None:
    from compileiq.core.space_files import LOWERING_OWNERS, LOWERING_SHAPES
    from compileiq.evaluate.eligibility import LOWERING

    assert set(LOWERING_OWNERS.values()) == set(LOWERING) == set(LOWERING_SHAPES)


@pytest.mark.parametrize(("name", "old", "new"), [
    ("ptxas.allow_expensive_optimizations", 'values = ["default", true, false]', 'values = ["default", "true", "false"]'),
    ("ptxas.disable_optimizer_constants", 'kind = "flag"\ndefault = false', 'kind = "choice"\nvalues = ["no", "yes"]\ndefault = "no"'),
])
def test_a_lowering_parameter_has_the_values_the_no_harm_rules_read(tmp_path: Path, name: str, old: str, new: str) -> None:
    """A space that gave --allow-expensive-optimizations the strings "true"/"false" rendered the same
    flags, but the no-harm rules, which read False, let "false" through (a reviewer's)."""
    path = _copy_spaces(tmp_path) / "ptxas-13.0.toml"
    text = path.read_text()
    block = text[text.index(f'name = "{name}"'):]
    assert old in block
    path.write_text(text.replace(block, block.replace(old, new, 1), 1))
    with pytest.raises(SpaceError, match=f"{name}.*no-harm rules read its values"):
        load_space("13.0", tmp_path)


def test_space_refuses_a_launch_fact_at_the_defaults_as_tune_does(tmp_path: Path) -> None:
    """`[launch.kern] block_size = "A*0"`: tune refused it before any build, `space` listed the
    space with rc 0 (red team round 49). Both now run the one check and say the same line."""
    from tests.helpers import run_cli

    (tmp_path / "k.cu").write_text("__global__ void kern(float* x) { x[threadIdx.x] = A; }\n")
    (tmp_path / "tune.toml").write_text('[tune.defines]\nA = [1, 2]\n[launch.kern]\nblock_size = "A*0"\n')
    said = "launch.kern.block_size: 'A*0' is 0 with the defaults: it must be from 1 to 1024"
    listed = run_cli(["space", "k.cu"], tmp_path, timeout=300)
    tuned = run_cli(["tune", "k.cu", "--workers", "local", "--budget", "2", "--db", f"sqlite:///{tmp_path / 't.db'}"],
                    tmp_path, timeout=300)
    for run in (listed, tuned):
        assert run.returncode == 2 and said in run.stderr and "Traceback" not in run.stderr, run.describe()
    assert listed.stderr.strip().splitlines()[-1] == tuned.stderr.strip().splitlines()[-1]
