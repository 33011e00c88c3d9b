"""What a command's arch flags build, read as nvcc 13.0 reads them (checked with nvcc --dryrun):
an embedded set, whatever the order the flags name it in, and -arch=sm_90a's extra compute_90 PTX."""

from __future__ import annotations

import subprocess
from pathlib import Path

from compileiq.source import arch_model
from tests.helpers import LOOP_KERNEL, run_cli, tuned_from_command


def _images(flags: list[str], folder: Path) -> set[str]:
    """The fatbinary images `nvcc --dryrun` builds for `flags`: {"elf sm_90", "ptx sm_90", ...}."""
    (folder / "k.cu").write_text(LOOP_KERNEL)
    dry = subprocess.run(["nvcc", "--dryrun", *flags, "-c", "k.cu", "-o", "k.o"], check=True, cwd=folder,
                         capture_output=True, text=True)
    found = set()
    for word in dry.stderr.split():
        if "--image3=kind=" in word:
            fields = dict(item.split("=", 1) for item in word.strip('"').removeprefix("--image3=").split(","))
            found.add(f"{fields['kind']} sm_{fields['sm']}")
    return found


def test_appended_arch_words_that_build_the_same_set_say_nothing_changes(tmp_path: Path) -> None:
    """red5 #3: `flags` for a command with -gencode sm_80 then sm_90 said `-arch=sm_90 ... makes it
    build sm_90, sm_80 where it builds sm_80, sm_90: ; keep the command's arch flags ...`: the same
    set in another order, with an empty change list."""
    arch = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]
    assert _images([*arch, "-O3"], tmp_path) == _images([*arch, "-O3", "-arch=compute_90", "-code=sm_90"],
                                                         tmp_path)
    tuned_from_command(tmp_path, f"nvcc {' '.join(arch)} -O3 -c k.cu -o k.o", source=LOOP_KERNEL)
    printed = run_cli(["flags", "k.acf.toml"], cwd=tmp_path)
    assert printed.returncode == 0, printed.describe()
    assert "where it builds" not in printed.stderr and ": ;" not in printed.stderr, printed.describe()
    assert "keep the command's arch flags" not in printed.stderr, printed.describe()


def _as_images(built: tuple[tuple[str, str], ...]) -> set[str]:
    return {f"{'ptx' if made.startswith('compute_') else 'elf'} sm_{made.partition('_')[2]}" for made, _ in built}


def test_an_arch_specific_arch_also_embeds_its_plain_ptx(tmp_path: Path) -> None:
    """red5 #4: -arch=sm_90a embeds sm_90a machine code, compute_90a PTX and compute_90 PTX (nvcc
    --dryrun); the model listed only the first two."""
    for flags in (["-arch=sm_90a"], ["-arch=compute_90a"], ["-arch=sm_100f"], ["-arch=compute_90a", "-code=sm_90a"],
                  ["-arch=sm_90"]):
        assert _as_images(arch_model.read(flags).built()) == _images(flags, tmp_path), flags
