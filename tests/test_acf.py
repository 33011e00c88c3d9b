"""The advanced-control file: written by a tune, read back validated, never trusted as text."""

import tomllib
from pathlib import Path

import pytest
import tomli_w

from compileiq.core.space_files import load_space
from compileiq.results import acf


def _content(space, config, defines=("-DN=4096",)):
    return acf.AcfContent(
        kernel="k", source_name="k.cu", source_path="kernels/k/k.cu", source_sha256="ab" * 32, arch="sm_90",
        nvcc_version="13.0", ptxas_version="13.0", toolchain_build="cuda_13.0", space=space, config=config,
        fixed_defines=defines, objective={"name": "spills", "kind": "static estimate"},
        evidence={"best": {"spill_bytes": 0}}, provenance={"study": "s"},
    )


@pytest.fixture()
def tuned_space():
    # two tuned macros listed in non-alphabetical order, as a tune.toml may list them
    return load_space("13.0").with_defines({"TT": [16, 32], "BK": [8, 16]})


def _written(tmp_path: Path, space, values) -> Path:
    config = space.default_config().with_values(values)
    return acf.write(tmp_path / "k.acf.toml", _content(space, config))


def test_round_trip_keeps_controls_and_flags(tmp_path, tuned_space):
    path = _written(tmp_path, tuned_space, {"ptxas.maxrregcount": 64, "define.BK": 16})
    read = acf.read(path)
    assert read.controls == {"ptxas.maxrregcount": 64, "define.TT": 16, "define.BK": 16}
    assert read.flags() == ("-arch=sm_90", "-DTT=16", "-DBK=16", "-Xptxas=--maxrregcount=64", "-DN=4096")
    assert read.flags("ptxas") == ("-arch=sm_90", "--maxrregcount=64")  # ptxas's default arch is older
    assert read.flags("ptxas", with_arch=False) == ("--maxrregcount=64",)
    assert read.source_path == "kernels/k/k.cu"


def test_writing_is_atomic_and_leaves_no_temporary(tmp_path, tuned_space):
    path = _written(tmp_path, tuned_space, {})
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def _tamper(path: Path, edit) -> Path:
    data = tomllib.loads(path.read_text())
    edit(data)
    path.write_text(tomli_w.dumps(data))
    return path


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda d: d["args"]["argv"].append("-Xcompiler=-fPIC"), "-Xcompiler=-fPIC"),
        (lambda d: d["args"]["argv"].append("--compiler-bindir=/tmp"), "--compiler-bindir"),
        (lambda d: d["args"]["argv"].extend(["-o", "x"]), "'-o'"),
        (lambda d: d["args"]["defines"].append("-DX=$(rm -rf ~)"), "not an allowed define"),
        (lambda d: d["controls"].update({"ptxas.maxrregcount": 7}), "maxrregcount"),
        (lambda d: d["controls"].update({"nvcc.run": True}), "nvcc.run"),
        (lambda d: d["args"]["argv"].remove("-Xptxas=--maxrregcount=64"), "does not match its controls"),
        (lambda d: d.update({"format": 99}), "unsupported ACF format 99 (this compileiq reads 1)"),
        # "unsupported ACF format '1' (this compileiq reads 1)" read as self-contradictory (red team 49)
        (lambda d: d.update({"format": "1"}), "unsupported ACF format '1': format must be the integer 1, not a string"),
        (lambda d: d.update({"format": 1.0}), "format must be the integer 1, not a float"),
        (lambda d: d.update({"format": True}), "format must be the integer 1, not a boolean"),
        (lambda d: d.pop("args"), "missing or malformed"),
    ],
)
def test_a_tampered_acf_is_refused(tmp_path, tuned_space, edit, says):
    path = _tamper(_written(tmp_path, tuned_space, {"ptxas.maxrregcount": 64}), edit)
    with pytest.raises(acf.AcfError) as error:
        acf.read(path)
    assert says in str(error.value)
    assert "\n" not in str(error.value)


def test_garbage_is_refused(tmp_path):
    path = tmp_path / "g.acf.toml"
    path.write_bytes(b"\x00\xffnot toml [[[")
    with pytest.raises(acf.AcfError, match="not a readable ACF"):
        acf.read(path)
    with pytest.raises(acf.AcfError, match="not found"):
        acf.read(tmp_path / "missing.acf.toml")


def _built_for(tmp_path: Path, space, arch: str, baseline: dict | None = None) -> Path:
    """An ACF for sm_90 whose evidence records the arch it was built for, as `tune` writes it."""
    content = _content(space, space.default_config())
    evidence = {"best": {"spill_bytes": 0, "arch": arch}, "baseline": {"spill_bytes": 0, "arch": arch}}
    from dataclasses import replace

    return acf.write(tmp_path / "k.acf.toml", replace(content, evidence=evidence, baseline=baseline))


def test_an_acf_whose_kernel_arch_was_edited_away_from_its_evidence_is_refused(tmp_path, tuned_space):
    """A hand-edited kernel.arch made `flags` print -arch=sm_80 for settings chosen, and evidence
    recorded, on sm_90 (the gate only warned that the code changed): now bad input, one line."""
    path = _built_for(tmp_path, tuned_space, "sm_90")
    assert acf.read(path).arch == "sm_90"  # as written: valid
    _tamper(path, lambda d: d["kernel"].update({"arch": "sm_80"}))
    with pytest.raises(acf.AcfError) as error:
        acf.read(path)
    assert "kernel.arch = 'sm_80', but evidence.best was built for 'sm_90'" in str(error.value)
    assert "\n" not in str(error.value)


def test_an_acf_whose_kernel_arch_is_a_left_out_arch_of_its_compile_command_is_refused(tmp_path, tuned_space):
    """A multi-arch compile command tuned for sm_90 records its sm_80 flag as left out: an ACF
    whose kernel.arch says sm_80 contradicts it (an older ACF records no evidence arch)."""
    flag = "-gencode arch=compute_80,code=sm_80"
    baseline = {"source": "compile_commands", "database": "compile_commands.json", "shipped_flags": [flag],
                "searched": [], "remove": [],
                "fixed": [{"flag": flag, "applied": False, "why": "builds for sm_80, not tuned"}]}
    path = _built_for(tmp_path, tuned_space, "sm_90", baseline)
    assert acf.read(path).shipped is not None
    _tamper(path, lambda d: (d["kernel"].update({"arch": "sm_80"}), d["evidence"]["best"].pop("arch"),
                             d["evidence"]["baseline"].pop("arch")))
    with pytest.raises(acf.AcfError, match=r"kernel.arch = 'sm_80', but baseline.fixed records '-gencode "
                                           r"arch=compute_80,code=sm_80' as left out"):
        acf.read(path)


def test_write_says_whether_the_file_held_this_choice_already(tmp_path, tuned_space):
    # `tune` reports "unchanged" from this one answer (it used to compare the file's bytes itself)
    config = tuned_space.default_config().with_values({"ptxas.maxrregcount": 64})
    path = tmp_path / "k.acf.toml"
    assert not acf.write_or_keep(path, _content(tuned_space, config))
    held = path.read_bytes()
    assert acf.write_or_keep(path, _content(tuned_space, config)) and path.read_bytes() == held
    other = _content(tuned_space, config.with_values({"ptxas.maxrregcount": 32}))
    assert not acf.write_or_keep(path, other) and path.read_bytes() != held
