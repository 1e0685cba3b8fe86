"""The rules that compare a captured output with a fresh run (tests/captured_outputs.py):
exact where a number repeats on any machine, masked for wall clock, within a stated
tolerance where the CPU's arithmetic decides; and a rerun on another instruction set."""

from __future__ import annotations

import pytest
from captured_outputs import OUTPUTS, TOLERANCES, differences, exit_codes, read, run_command

FP32 = """epoch 1/4  loss 1.281950  time 0.209 s
gradient vs one batch: max |difference| 0.0000000112 (tolerance 1e-06): equal
summary: work=2.00x epoch_time=0.199s throughput=10303 samples/s losses=1.281950,0.820391"""
BF16 = """epoch 1/3  loss 1.0784  zero gradients 0.1% (last step)
epoch 3/3  loss 0.1783  zero gradients 0.2% (last step)"""


def test_wall_clock_is_masked_and_nothing_else_differs():
    fresh = FP32.replace("0.209 s", "0.632 s").replace("0.199s", "0.162s").replace("10303", "12610")
    assert differences("04_good.txt", FP32, fresh) == []


@pytest.mark.parametrize("old, new", [
    ("0.0000000112", "0.0000112000"),  # a gradient difference 1000x larger (the old 2-decimal mask missed it)
    ("1.281950", "1.281951"),           # an fp32 loss in its last printed digit
    ("2.00x", "2.01x"),
    ("1e-06", "1e-05"),
])
def test_any_change_of_a_deterministic_number_is_caught(old, new):
    found = differences("04_good.txt", FP32, FP32.replace(old, new))
    assert len(found) == FP32.count(old), found
    assert all(f"{old.rstrip('x')} captured, {new.rstrip('x')} now" in line for line in found), found


def test_changed_text_and_missing_lines_are_caught():
    assert "text differs" in differences("04_good.txt", FP32, FP32.replace("equal", "DIFFERENT"))[0]
    assert "3 lines captured, 2 now" in differences("04_good.txt", FP32, FP32.rsplit("\n", 1)[0])[0]


def test_bf16_numbers_move_within_their_tolerance_and_no_further():
    drifted = BF16.replace("0.1783", "0.1786").replace("0.1%", "0.0%").replace("0.2%", "0.1%")
    assert differences("06_amp_bf16.txt", BF16, drifted) == []
    assert differences("06_amp_bf16.txt", BF16, BF16.replace("0.1783", "0.1900"))  # a 7% loss change
    assert differences("06_amp_bf16.txt", BF16, BF16.replace("0.2%", "1.0%"))  # 5x the zeros
    # The same drift in a file without a tolerance is a difference.
    assert differences("06_amp_good.txt", BF16, drifted)


def test_every_tolerance_has_a_reason_and_a_file():
    for tolerance in TOLERANCES:
        assert len(tolerance.why) > 40, tolerance
        assert list(OUTPUTS.glob(tolerance.files)), f"{tolerance.files} matches no captured output"


def test_every_captured_command_has_its_exit_code():
    names = {path.name for path in OUTPUTS.glob("*.txt")}
    assert set(exit_codes()) == names, "run `make outputs`"


# A CPU without AVX-512: ATen's vectorized kernels at their baseline, oneDNN (bf16 matmuls) and
# MKL (fp32 matmuls) at AVX2, as on an older or a smaller cloud machine.
OTHER_CPU = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


@pytest.mark.parametrize("name", [
    "06_amp_bf16.txt",         # bf16 arithmetic: within its tolerance
    "07_batchnorm_good.txt",   # fp32 differences of 1e-7 against a reference: exact
    "11_bypass_bad.txt",       # fp32 checksums to 10 decimals after diverging training: exact
])
def test_captures_hold_on_a_cpu_with_another_instruction_set(name):
    command, captured = read(OUTPUTS / name)
    code, fresh = run_command(command, env_extra=OTHER_CPU)
    assert code == exit_codes()[name]
    found = differences(name, captured, fresh)
    assert not found, "\n".join(found)
