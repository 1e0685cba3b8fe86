"""The rules that compare a captured output with a fresh run (tests/captured_outputs.py):
exact where a number repeats on any machine, masked for wall clock, within a stated
tolerance where the CPU's arithmetic decides. (test_site.py reruns captures on another
instruction set.)"""

from __future__ import annotations

import pytest
from captured_outputs import OUTPUTS, TOLERANCES, differences, exit_codes

FP32 = """epoch 1/4  loss 1.281950  time 0.209 s  samples 2048
gradient vs one batch: max |difference| 0.0000000112 (tolerance 1e-06): equal
summary: work=2.00x epoch_time=0.199s throughput=10303 samples/s losses=1.281950,0.820391"""
BF16 = """epoch 1/3  loss 1.0784  zero gradients 0.1% (last step)
epoch 3/3  loss 0.1783  zero gradients 0.2% (last step)"""


def test_wall_clock_is_masked_and_nothing_else_differs():
    fresh = FP32.replace("0.209 s", "0.632 s").replace("0.199s", "0.162s").replace("10303", "12610")
    assert differences("04_good.txt", FP32, fresh) == []
    # a difference of two readings changes sign with the noise: "DDP extra 0.0736 s" / "-0.1034 s"
    assert differences("12b_x.txt", "extra    0.0736 s  1.2 s", "extra   -0.1034 s  1.2 s") == []
    assert differences("12b_x.txt", "--timeout 5 s", "--timeout 9 s") == []
    assert differences("12b_x.txt", "losses -0.5", "losses -0.7")  # no seconds: not masked


def test_ratios_of_wall_clock_are_masked_and_the_text_around_them_is_not():
    timed = "summary: data_wait_share=18.2% weak_efficiency=1.00,0.93 speedup=1.71 losses=1.2819"
    fresh = timed.replace("18.2%", "3.4%").replace("0.93", "0.71").replace("1.71", "1.02")
    assert differences("12_x.txt", timed, fresh) == []
    assert differences("12_x.txt", timed, fresh.replace("1.2819", "1.2900"))  # a loss is no ratio
    assert differences("12_x.txt", timed, fresh.replace("weak_efficiency", "weak_eff"))


def test_weight_checksums_are_masked_and_the_line_around_them_is_not():
    """weights_crc of chapter 14 on the machine that captured it and on one with AMX: the
    same run, the same losses to the last printed digit, another checksum."""
    line = "summary: variant=good world_size=2 steps=48/48 weights_crc=ac892451"
    assert differences("14_x.txt", line, line.replace("ac892451", "a8ab7d3c")) == []
    assert differences("14_x.txt", line, line.replace("48/48", "47/48").replace("ac892451", "a8ab7d3c"))


def test_fp32_drift_of_another_cpu_passes():
    """What another instruction set did to these numbers (seen with AVX-512 switched off)."""
    drift = (FP32.replace("1.281950", "1.281951")           # one unit in the last digit
             .replace("0.0000000112", "0.0000000143"))     # noise between two equal computations
    assert differences("04_good.txt", FP32, drift) == []
    checksum = "step 7  -0.0920946633  0.0863550943  DIFFER"
    assert differences("11.txt", checksum, "step 7  -0.0920942209  0.0863550962  DIFFER") == []


@pytest.mark.parametrize("old, new", [
    ("0.0000000112", "0.0000112000"),  # a gradient difference 1000x larger (the old 2-decimal mask missed it)
    ("1.281950", "1.281990"),           # an fp32 loss 40 units off in its last printed digit
    ("0.820391", "0.820491"),           # ... or by 1e-4
    ("2.00x", "2.02x"),
    ("1e-06", "1e-05"),
    ("2048", "2049"),                   # a count
])
def test_any_change_of_a_deterministic_number_is_caught(old, new):
    found = differences("04_good.txt", FP32, FP32.replace(old, new))
    assert len(found) == FP32.count(old), found
    assert all(f"{old.rstrip('x')} captured, {new.rstrip('x')} now" in line for line in found), found


def test_a_zero_stays_a_zero():
    identical = "replicas: largest parameter difference between ranks 0.000000: identical"
    assert differences("08.txt", identical, identical.replace("0.000000", "0.000001"))


def test_changed_text_and_missing_lines_are_caught():
    assert "text differs" in differences("04_good.txt", FP32, FP32.replace("equal", "DIFFERENT"))[0]
    assert "3 lines captured, 2 now" in differences("04_good.txt", FP32, FP32.rsplit("\n", 1)[0])[0]


def test_bf16_numbers_move_within_their_tolerance_and_no_further():
    drifted = BF16.replace("0.1783", "0.1786").replace("0.1%", "0.0%").replace("0.2%", "0.1%")
    assert differences("06_amp_bf16.txt", BF16, drifted) == []
    assert differences("06_amp_bf16.txt", BF16, BF16.replace("0.1783", "0.1900"))  # a 7% loss change
    assert differences("06_amp_bf16.txt", BF16, BF16.replace("0.2%", "1.0%"))  # 5x the zeros
    # The same drift in a file without a tolerance is a difference ...
    assert differences("06_amp_good.txt", BF16, drifted)
    # ... and so is one on a line the tolerance does not cover (its `lines`).
    step = "step 1: largest gradient of the logits 2.57e-08"
    assert differences("06_amp_bf16.txt", step, step.replace("2.57", "2.59"))
    assert differences("06_amp_good.txt", step, step.replace("2.57e-08", "2.57e-07"))  # 10x


def test_every_tolerance_has_a_reason_and_a_file():
    for tolerance in TOLERANCES:
        assert len(tolerance.why) > 40, tolerance
        assert list(OUTPUTS.glob(tolerance.files)), f"{tolerance.files} matches no captured output"


def test_every_captured_command_has_its_exit_code():
    names = {path.name for path in OUTPUTS.glob("*.txt")}
    assert set(exit_codes()) == names, "run `make outputs`"
