"""Write docs/end-to-end.md from a real run: tune a bundled kernel, look at the study, build with the
ACF's flags, and gate on it, each command's output as it printed (long outputs shortened in the
middle). The page names this script's sha256, and tests/test_docs.py fails when the script changes
without the page being generated again.

    python scripts/end_to_end.py [--out docs/end-to-end.md]   (about a minute on 2 CPUs)
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KERNEL = "kernels/spill_heavy/spill_heavy.cu"
ACF = "store/spill_heavy.spills.acf.toml"
COMMANDS = [
    f"compileiq tune {KERNEL} --objective spills --budget 40",
    "compileiq show",
    "compileiq show {study} --why",
    f"compileiq flags {ACF}",
    f"nvcc $(compileiq flags {ACF} --all) -cubin -o /tmp/k.cubin -Xptxas -v {KERNEL}",
    f"compileiq gate {ACF}",
]
KEEP = (14, 16)  # lines kept at the start and the end of a long output

PROSE = """\
On a terminal the trial lines scroll above a progress bar (trials done / budget, best so far, rate,
time left); in a pipe or a CI log each trial is a plain line, as here.

What happens:

1. The kernel spec is read (`tune.toml` beside the `.cu`, or defaults; `--compile-commands` adds
   the file's real compile command), every setting is checked against the allow-lists, the
   header set is taken from `nvcc -M` (exactly what the compiler reads, toolchain headers
   excluded), the search space for the installed compiler is loaded, and the study is found or
   created in the database (identity: the sources and headers, every `tune.toml` setting that
   changes a build or a score, search-space id and hash, toolchain build, arch, evaluator,
   objective).
2. The baseline (every setting at the compiler's default) is evaluated first. Then, in batches,
   the searcher proposes configurations; each is **claimed** by inserting a row under
   `UNIQUE(study, config)`; the build cache is consulted; the rest compile on the workers:
   **PTX once per front-end setting, then only ptxas per variant** (nvcc's front end is ~5x a
   ptxas run). Each result is recorded the moment it arrives and told to the searcher.
3. The winner is **simplified**: each non-default setting is reset to its default (a tuned macro to
   the first value tune.toml lists) and recompiled; settings that change neither the machine code
   nor the objective are dropped. Its path from the defaults is then ablated to credit each
   setting (`show --why`). Those trials are recorded with their purpose (`[simplify]`) and never
   count toward `--budget`.
4. The ACF is written atomically (temporary file + rename). `compileiq flags` prints its settings
   for a build; `compileiq gate` rebuilds the kernel with them and checks the result against the
   ACF's evidence (without a GPU: the static metrics, exactly).

The spills go only when a register cap and `--override-directive-values` are set together (the
kernel's `__launch_bounds__` wins otherwise). ptxas says both: its first line reads as if the cap were
lost (the launch bounds' 128 registers per thread replace 255), its second that the override puts 255
back, and the build uses 214 registers with no spill, as the ACF records. `--all` adds the base flags
the build needs (here the harness's `-I`); without it `compileiq flags` says so on stderr. The `spills` objective trades occupancy for them when
asked; whether that is faster only `--objective time` on a GPU can say.

Failures (compile error, compiler timeout or crash, a garbage or missing cubin) are data:
recorded with the compiler's first error line (its full output is in `show --json`) and told to
the searcher as a finite penalty; timeouts and crashes are tried once more and never cached. The
baseline is compiled alone first: a kernel that does not build with the *default* settings stops
the run with a one-line error before any variant compiles (the failed trial stays in the database
to say why). Ctrl-C, a closed pipe or a failed run hand their unfinished trials back at once; no
ACF is written without a finished baseline and best trial, and an existing ACF is replaced only by
one that reads back valid.
"""


def _run(command: str, work: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-c", command], cwd=work, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=900, check=False)  # in the order printed
    text = done.stdout.replace(str(work) + "/", "").replace(str(work), ".").replace(str(REPO), "<repo>")
    if done.returncode:
        text += f"(exit status {done.returncode})\n"
    return text


def _shorten(text: str) -> str:
    lines = text.rstrip("\n").splitlines()
    head, tail = KEEP
    if len(lines) <= head + tail + 1:
        return "\n".join(lines)
    return "\n".join([*lines[:head], f"… ({len(lines) - head - tail} lines)", *lines[-tail:]])


def _nvcc_release(env: dict[str, str]) -> str:
    text = subprocess.run(["nvcc", "--version"], env=env, capture_output=True, text=True, check=False).stdout
    found = re.search(r"release (\S+),", text)
    return found.group(1) if found else "?"


def transcript() -> tuple[str, str]:
    """(the transcript of every command, the nvcc release) from a run in a fresh folder."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "NO_COLOR": "1", "TERM": "dumb",
           "COLUMNS": "110"}
    env.pop("COMPILEIQ_DB", None)
    with tempfile.TemporaryDirectory(prefix="compileiq-e2e-") as folder:
        work = Path(folder)
        shutil.copytree(REPO / Path(KERNEL).parent, work / Path(KERNEL).parent)
        # the bundled kernels' tune.toml finds the harness at ../../compileiq/include, as in a checkout
        shutil.copytree(REPO / "compileiq" / "include", work / "compileiq" / "include")
        parts, study = [], ""
        for template in COMMANDS:
            command = template.format(study=study)
            output = _run(command, work, env)
            if not study:
                found = re.search(r"^study (\S+) ", output, re.MULTILINE)
                study = found.group(1) if found else "STUDY"
            if command.startswith("nvcc"):  # every line but the compile time, which differs each run
                output = "\n".join(line for line in output.splitlines() if "Compile time" not in line)
            parts.append(f"$ {command}\n{_shorten(output)}")
        return "\n\n".join(parts), _nvcc_release(env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "end-to-end.md")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from compileiq import __version__

    text, nvcc = transcript()
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    today = dt.date.today().isoformat()
    page = (f"# A run, end to end\n\nA real run of a bundled kernel without a GPU: tune, show, build with the ACF, gate.\n"
            f"Generated by scripts/end_to_end.py, sha256 {digest}, on {today} ({os.cpu_count()} CPUs, "
            f"compileiq {__version__}, nvcc {nvcc}); run the script again after a change to what these "
            f"commands print.\n\n```\n{text}\n```\n\n{PROSE}")
    args.out.write_text(page)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
