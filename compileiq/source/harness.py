"""Where the measuring harness lies: a header shipped inside the package (`compileiq/harness.cuh`)."""

from pathlib import Path


def harness_include_dir() -> Path:
    """The folder to pass as -I for `#include <compileiq/harness.cuh>` (shipped in the package)."""
    return Path(__file__).parent.with_name("include")
