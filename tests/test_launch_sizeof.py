"""userfix 4: `sizeof(unsigned int)` in a launch expression failed "is not an arithmetic expression"
while `sizeof(unsigned)` worked: C's type names of several words are read too."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import LOOP_KERNEL, run_cli

from compileiq.source.launch import ExpressionError, evaluate


@pytest.mark.parametrize(("text", "value"), [
    ("sizeof(unsigned int)", 4), ("2*BLOCK*sizeof( unsigned  int )", 1024), ("sizeof(long long)", 8),
    ("sizeof(unsigned long long)", 8), ("sizeof(unsigned char)", 1), ("sizeof(signed char)", 1),
    ("sizeof(short)", 2), ("sizeof(unsigned short)", 2), ("sizeof(short int)", 2), ("sizeof(long int)", 8),
    ("sizeof(unsigned long)", 8), ("sizeof(long long int)", 8), ("sizeof(signed)", 4), ("sizeof(signed int)", 4),
])
def test_c_type_names_of_several_words(text: str, value: int) -> None:
    assert evaluate(text, {"BLOCK": 128}) == value


def test_an_unknown_type_says_which_sizeof_takes() -> None:
    with pytest.raises(ExpressionError, match=r"sizeof takes a scalar type \(char, .*unsigned int, long long"):
        evaluate("sizeof(my_struct)", {})
    with pytest.raises(ExpressionError):  # no such C type
        evaluate("sizeof(unsigned float)", {})


def test_a_tune_toml_launch_fact_with_unsigned_int(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(LOOP_KERNEL)
    (tmp_path / "tune.toml").write_text('[launch.k]\nblock_size = 128\ndynamic_smem = "128*sizeof(unsigned int)"\n')
    done = run_cli(["space", "k.cu"], cwd=tmp_path)
    assert done.returncode == 0, done.describe()


def test_the_docs_list_every_type_sizeof_takes() -> None:
    from compileiq.source import launch

    docs = (Path(__file__).resolve().parents[1] / "docs" / "file-formats.md").read_text()
    flat = " ".join(docs.split())
    for name in (*launch.TYPE_NAMES, *launch._WORD_TYPES):
        assert f"`{name}`" in flat, name
