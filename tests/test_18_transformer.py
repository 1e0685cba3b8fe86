"""Chapter 18: a small GPT under DDP (the loss of uneven sequences, bad versus good) and FSDP2."""

from __future__ import annotations

import math
import re

import pytest
from conftest import captured_run, mpiexec, parse_summary, python, torchrun

DDP_SCRIPT = "18_transformer/gpt_ddp.py"
FSDP_SCRIPT = "18_transformer/gpt_fsdp.py"
FP32_ROUNDING = 1e-5  # a relative gradient difference at or below this is fp32 rounding
VISIBLY_DIFFERENT = 1e-3  # ... and at or above this, a different gradient
HELD_OUT_BOUND = 2.0  # the held-out loss after the chapter's 150 steps (uniform guess: ln(32) = 3.47)


def runs(result) -> list[tuple[str, dict[str, str]]]:
    """Each run's output and summary, for a capture of several runs (split at 'corpus:')."""
    assert result.returncode == 0, result.output
    parts = re.split(r"^(?=corpus: )", result.output, flags=re.M)[1:]
    assert parts, result.output
    return [(part, parse_summary(part)) for part in parts]


def tokens_per_rank(output: str) -> list[list[int]]:
    line = re.search(r"^step 1: tokens per rank (.*) \(global (\d+)\)$", output, flags=re.M)
    assert line, output
    counts = [[int(x) for x in rank.split()] for rank in line.group(1).split(" | ")]
    assert sum(map(sum, counts)) == int(line.group(2))
    return counts


def held_out_losses(output: str) -> list[tuple[int, float, float]]:
    return [(int(s), float(t), float(h)) for s, t, h in
            re.findall(r"^step +(\d+): train loss (\S+) held-out loss (\S+) time=", output, flags=re.M)]


@pytest.fixture(scope="module")
def bad():
    return runs(captured_run("18_uneven_bad.txt"))[0]


@pytest.fixture(scope="module")
def good():
    return runs(captured_run("18_uneven_good.txt"))[0]


# --------------------------------------------------------------------------- the pitfall
def test_pitfall_per_rank_mean_is_not_one_process_gradient_global_count_is(bad, good):
    """Ranks with different token counts: the per-rank mean gives another gradient than one
    process on the same global batch; the sum over the global token count gives the same."""
    for output, summary in (bad, good):
        assert summary["world_size"] == "2" and summary["launcher"] == "torchrun"
        counts = tokens_per_rank(output)
        assert len(counts) == 2 and counts[0] != counts[1]  # uneven: the pitfall's condition
    assert float(bad[1]["grad_diff"]) >= VISIBLY_DIFFERENT, bad[0]
    assert float(good[1]["grad_diff"]) <= FP32_ROUNDING, good[0]
    assert bad[1]["variant"] == "bad" and good[1]["variant"] == "good"


def test_accumulation_over_micro_batches_of_different_lengths():
    """4 micro-batches per rank, each of its own length: a mean per micro-batch (divided by 4)
    is not one process's gradient; the global token count is."""
    (bad_out, bad_sum), (good_out, good_sum) = runs(captured_run("18_accumulation.txt"))
    for output, summary in ((bad_out, bad_sum), (good_out, good_sum)):
        counts = tokens_per_rank(output)
        assert summary["accumulation_steps"] == "4" and len(counts) == 2
        assert all(len(rank) == 4 for rank in counts) and len({c for rank in counts for c in rank}) > 1
    assert float(bad_sum["grad_diff"]) >= VISIBLY_DIFFERENT, bad_out
    assert float(good_sum["grad_diff"]) <= FP32_ROUNDING, good_out


def test_good_under_open_mpi_with_accumulation_matches_one_process():
    result = mpiexec("openmpi", 2, DDP_SCRIPT, "--accumulation-steps", "2", "--steps", "3",
                     "--eval-every", "3", "--ceiling-steps", "2")
    summary = result.clean_summary()
    assert summary["launcher"] == "openmpi" and summary["world_size"] == "2"
    assert float(summary["grad_diff"]) <= FP32_ROUNDING, result.output
    assert int(summary["throughput"]) > 0 and summary["ceiling_share"].endswith("%")


# --------------------------------------------------------------------------- training and speed
def test_held_out_loss_falls_well_below_the_uniform_guess_and_summary_reports_speed(good):
    output, summary = good
    uniform = float(summary["uniform_loss"])
    assert uniform == pytest.approx(math.log(32), abs=1e-4)
    assert float(summary["first_loss"]) > uniform - 0.2  # it starts near the uniform guess
    losses = held_out_losses(output)
    assert [s for s, _, _ in losses] == [25, 50, 75, 100, 125, 150]
    assert losses[-1][2] < HELD_OUT_BOUND < losses[0][2] + 0.5 and losses[-1][2] < losses[0][2]
    assert float(summary["held_out_loss"]) < HELD_OUT_BOUND
    # Tokens per second, its ceiling and the share, measured (their values are not asserted).
    assert re.search(r"throughput=\d+ tokens/s per_rank=\d+ tokens/s ceiling=\d+ tokens/s "
                     r"ceiling_share=\d+\.\d%", output), output
    assert summary["mfu"] == "n/a" and "MFU: not computed on a CPU" in output


def test_one_process_and_two_ranks_reach_the_target_with_the_same_losses(good):
    """The good variant on 2 ranks computes what one process computes: the same losses up to
    fp32 rounding, the target reached at the same step (the time is measured, not asserted)."""
    single_output, single = runs(captured_run("18_single.txt"))[0]
    assert single["world_size"] == "1"
    assert single["reached_at_step"] == good[1]["reached_at_step"] != "none"
    assert "time_to_target" in single and "time_to_target" in good[1]
    for (s1, t1, h1), (s2, t2, h2) in zip(held_out_losses(single_output), held_out_losses(good[0]),
                                          strict=True):
        assert s1 == s2 and abs(t1 - t2) < 1e-3 and abs(h1 - h2) < 1e-3


# --------------------------------------------------------------------------- FSDP2
def test_fsdp2_matches_ddp_resumes_exactly_and_activation_checkpointing_saves_memory():
    result = captured_run("18_fsdp.txt")
    summary = result.clean_summary()
    rows = re.findall(r"^ +(\d+)  (\S+)   (\S+)    (\S+)(?: +(\S+.*))?$", result.output, flags=re.M)
    assert len(rows) == 12, result.output
    ddp, fsdp = [float(r[1]) for r in rows], [float(r[2]) for r in rows]
    assert fsdp[-1] < fsdp[0] - 0.5  # it trains
    assert max(abs(a - b) for a, b in zip(ddp, fsdp, strict=True)) <= 1e-5
    assert summary["losses_match"] == "yes" and float(summary["tolerance"]) == 1e-5
    # The resume from the DCP checkpoint of step 6: the same losses, the same weights.
    assert rows[5][4] == "(saved here)"
    assert [r[4] for r in rows[6:]] == [r[2] for r in rows[6:]]
    checksums = re.search(r"^checksums: ddp (\S+) fsdp2 (\S+) resumed from step 6 (\S+)$", result.output,
                          flags=re.M)
    assert checksums and checksums.group(2) == checksums.group(3), result.output
    assert summary["resume_equal"] == "yes" and summary["activation_checkpointing"] == "yes"
    # Activation checkpointing keeps far fewer bytes for backward (measured, not estimated).
    plain, checkpointed = int(summary["saved_bytes_plain"]), int(summary["saved_bytes_checkpointed"])
    assert 0 < checkpointed < plain / 3


def test_fsdp2_bf16_within_its_tolerance_and_resumes(tmp_path):
    result = torchrun(2, FSDP_SCRIPT, "--precision", "bf16", "--steps", "6", "--save-at", "3",
                      "--checkpoint-dir", str(tmp_path))
    summary = result.clean_summary()
    assert summary["precision"] == "bf16" and float(summary["tolerance"]) == 0.02
    assert float(summary["max_loss_diff"]) <= 0.02 and summary["losses_match"] == "yes"
    assert float(summary["max_loss_diff"]) > 0  # bf16 does change the numbers
    assert summary["resume_equal"] == "yes"
    assert sorted(p.name for p in (tmp_path / "step_3").iterdir()) == [".metadata", "__0_0.distcp",
                                                                       "__1_0.distcp"]


# --------------------------------------------------------------------------- any text, bad input
def test_text_file_trains_on_that_text_and_bad_input_gets_a_message(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(f"Paragraph {i}: to be, or not to be{'!' * (i % 7)}" for i in range(200)))
    result = python(DDP_SCRIPT, "--text-file", str(text), "--steps", "2", "--eval-every", "2",
                    "--ceiling-steps", "1")
    assert result.clean_summary()["world_size"] == "1"
    assert f"corpus: {text}," in result.output
    vocab = len(set(text.read_text()))
    assert f"vocab {vocab} (+ pad)" in result.output
    result = python(DDP_SCRIPT, "--dim", "30", "--heads", "4")
    assert result.returncode == 2 and "--dim 30 does not divide by --heads 4" in result.output
    assert "Traceback" not in result.output
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("one line\n")
    result = python(DDP_SCRIPT, "--text-file", str(tiny))
    assert result.returncode == 2 and "give a longer text" in result.output
    assert "Traceback" not in result.output


def test_help_shows_the_launch_commands():
    for path in (DDP_SCRIPT, FSDP_SCRIPT):
        result = python(path, "--help")
        assert result.returncode == 0, result.output
        assert f"torchrun --standalone --nproc_per_node=2 scripts/{path}" in result.output
