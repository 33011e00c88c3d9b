"""Occupancy and static objectives, against values worked out from the CUDA occupancy rules."""

import pytest

from compileiq.core.errors import UsageError
from compileiq.evaluate.metrics import StaticMetrics, objective_value, occupancy


@pytest.mark.parametrize(
    ("arch", "threads", "registers", "smem", "expected"),
    [
        ("sm_90", 256, 32, 0, 1.0),  # 8 blocks x 8 warps = 64 warps
        ("sm_90", 256, 48, 0, 40 / 64),  # 5 blocks by registers
        ("sm_90", 256, 128, 0, 16 / 64),  # 2 blocks by registers
        ("sm_90", 256, 255, 0, 8 / 64),
        ("sm_90", 128, 16, 48 * 1024, 16 / 64),  # 4 blocks by shared memory (49 KiB each)
        ("sm_90", 32, 16, 0, 32 / 64),  # block limit 32
        ("sm_86", 256, 32, 0, 1.0),  # 6 blocks x 8 warps = 48 warps
        ("sm_80", 1024, 64, 0, 0.5),  # 64 regs x 1024 threads fill the register file exactly
        ("sm_80", 1024, 72, 0, 0.0),  # 72 regs x 1024 threads exceed it
        ("sm_90", 2048, 16, 0, 0.0),  # too many threads per block
        ("sm_90", 256, 32, 300 * 1024, 0.0),  # more shared memory than a block may have
    ],
)
def test_occupancy_matches_the_occupancy_rules(arch, threads, registers, smem, expected):
    assert occupancy(arch, threads, registers, smem) == pytest.approx(expected)


def test_unknown_arch_is_a_usage_error():
    with pytest.raises(UsageError, match="sm_70"):
        occupancy("sm_70", 256, 32, 0)


def test_static_composite_orders_spills_then_occupancy_and_ignores_instructions():
    no_spill_low_occ = StaticMetrics(0, 200, 0.125, 5000, 0)
    no_spill_full_occ_long = StaticMetrics(0, 32, 1.0, 900_000, 0)
    no_spill_full_occ_short = StaticMetrics(0, 32, 1.0, 10, 0)
    spill_short = StaticMetrics(4, 32, 1.0, 10, 16)
    assert objective_value("static", no_spill_full_occ_long) < objective_value("static", no_spill_low_occ)
    assert objective_value("static", no_spill_low_occ) < objective_value("static", spill_short)
    assert objective_value("static", no_spill_full_occ_short) == objective_value("static", no_spill_full_occ_long)


@pytest.mark.parametrize(
    ("objective", "expected"),
    [("spills", 24.0), ("registers", 96.0), ("occupancy", 0.5), ("instructions", 1234.0)],
)
def test_single_objectives(objective, expected):
    metrics = StaticMetrics(spill_bytes=24, registers=96, occupancy=0.5, instructions=1234, stack_bytes=8)
    assert objective_value(objective, metrics) == expected


def test_unknown_objective_names_the_choices():
    with pytest.raises(UsageError, match="spills"):
        objective_value("speed", StaticMetrics(0, 0, 0.0, 0, 0))
