"""Chapter 06: fp16 gradients underflow without a GradScaler; compressed all-reduce halves the bytes."""

from __future__ import annotations

import re

from conftest import captured_run, mpiexec, python, script_help

AMP = "06_mixed_precision/amp_grad_scaler.py"
COMPRESS = "06_mixed_precision/compressed_gradients.py"


def percent(value: str) -> float:
    assert value.endswith("%"), value
    return float(value[:-1])


def assert_underflows(bad_run) -> None:
    """bad: every gradient element is exactly zero, so the weights never change and the
    loss of the last epoch equals the first, digit for digit."""
    bad = bad_run.clean_summary()
    assert bad["world_size"] == "2" and bad["launcher"] == "torchrun", bad
    assert bad["zero_grads"] == "100.0%", bad
    assert bad["final_loss"] == bad["first_loss"], bad
    assert bad["scale"] == "1"  # the factor backward() saw on the loss: no scaling
    assert "WARNING: 100.0% of the gradient elements were exactly zero" in bad_run.output
    assert "dtypes: parameters fp32, logits fp16, loss fp32, gradients fp32" in bad_run.output
    assert "step 1: largest gradient of the logits 0 (" in bad_run.output


def test_bad_fp16_without_grad_scaler_underflows_to_zero():
    """The pitfall alone, one launch (the page's bad run): `make test-quick`'s test of this chapter."""
    assert_underflows(captured_run("06_amp_bad.txt"))


def test_pitfall_fp16_without_grad_scaler_underflows_and_stalls():
    bad_run = captured_run("06_amp_bad.txt")  # fp16, the default: the runs the page shows
    assert_underflows(bad_run)
    good_run = captured_run("06_amp_good.txt")
    good = good_run.clean_summary()
    assert good["world_size"] == "2" and good["launcher"] == "torchrun", good
    # good: the scaled backward pass keeps the gradients, and the model learns.
    assert percent(good["zero_grads"]) < 1.0, good
    assert float(good["final_loss"]) < float(good["first_loss"]) - 0.5, good
    assert good["scale"] == "65536" and good["skipped_steps"] == "0", good
    assert "WARNING" not in good_run.output
    assert "largest gradient of the logits 0 (" not in good_run.output


def test_grad_scaler_and_bf16_train_like_fp32():
    """The same run in fp32, in fp16 with a scaler, and in bf16 with no scaler at all
    (--variant bad: plain backward) ends at the same loss."""
    fp32_result = python(AMP, "--precision", "fp32")
    fp32 = fp32_result.clean_summary()
    fp16_scaled = python(AMP, "--precision", "fp16", "--variant", "good").clean_summary()
    bf16_result = python(AMP, "--precision", "bf16", "--variant", "bad")
    bf16 = bf16_result.clean_summary()
    assert float(fp32["final_loss"]) < float(fp32["first_loss"]) - 0.3, fp32
    assert percent(fp32["zero_grads"]) == 0.0
    for summary in (fp16_scaled, bf16):
        assert abs(float(summary["final_loss"]) - float(fp32["final_loss"])) < 0.01, (summary, fp32)
        assert percent(summary["zero_grads"]) < 1.0, summary
    assert bf16["scale"] == "1" and "WARNING" not in bf16_result.output
    assert "logits bf16" in bf16_result.output
    # In fp32 the gradients are below fp16's smallest number: that is why fp16 loses them.
    largest = re.search(r"largest gradient of the logits (\S+) ", fp32_result.output)
    assert largest and 0 < float(largest.group(1)) < 2.0**-24, fp32_result.output


def test_large_gradients_survive_fp16_without_a_scaler():
    """The cause is the size of the gradients: at --loss-weight 1 plain fp16 learns."""
    summary = python(AMP, "--precision", "fp16", "--variant", "bad", "--loss-weight", "1").clean_summary()
    assert percent(summary["zero_grads"]) < 1.0, summary
    assert float(summary["final_loss"]) < float(summary["first_loss"]) - 0.3, summary


def test_amp_under_open_mpi():
    summary = mpiexec("openmpi", 2, AMP, "--variant", "bad", "--epochs", "2").clean_summary()
    assert summary["launcher"] == "openmpi" and summary["world_size"] == "2"
    assert summary["zero_grads"] == "100.0%" and summary["final_loss"] == summary["first_loss"]


def assert_bytes_halved(summary: dict[str, str]) -> None:
    """fp16 and bf16 hooks all-reduce exactly half the bytes of fp32: 2 bytes per element."""
    params = int(summary["params"])
    assert int(summary["none_bytes"]) == 4 * params, summary
    assert int(summary["fp16_bytes"]) == 2 * params, summary
    assert int(summary["bf16_bytes"]) == 2 * params, summary
    assert summary["fp16_ratio"] == summary["bf16_ratio"] == "0.50"


def test_compression_hooks_halve_the_bytes_all_reduced_and_sent():
    result = captured_run("06_compress.txt")  # the page's run (the same command): one launch
    summary = result.clean_summary()
    assert summary["world_size"] == "2"
    assert_bytes_halved(summary)
    # What the processes really wrote to their sockets (gloo, Linux): with two ranks the
    # ring sends each byte all-reduced about once (2(N-1)/N), plus a little framing ...
    for hook in ("none", "fp16", "bf16"):
        assert 0.95 <= float(summary[f"{hook}_wire_per_byte"]) < 1.1, summary
    # ... so it halves too.
    for hook in ("fp16", "bf16"):
        assert 0.45 < float(summary[f"{hook}_wire_ratio"]) < 0.55, summary
        # ... and training is unchanged: gradients of ordinary size survive the cast.
        assert abs(float(summary[f"{hook}_loss"]) - float(summary["none_loss"])) < 0.01, summary
        assert percent(summary[f"{hook}_zero_grads"]) < 5.0, summary


def test_fp16_compression_loses_tiny_gradients_bf16_keeps_them():
    summary = captured_run("06_compress_tiny_grads.txt").clean_summary()  # the page's run
    assert summary["world_size"] == "2" and summary["launcher"] == "torchrun"
    assert_bytes_halved(summary)
    assert summary["fp16_zero_grads"] == "100.0%", summary
    assert percent(summary["bf16_zero_grads"]) < 5.0, summary
    assert percent(summary["none_zero_grads"]) < 5.0, summary


def test_compression_as_one_process_has_nothing_on_the_wire():
    summary = python(COMPRESS, "--hooks", "none", "bf16").clean_summary()
    assert summary["launcher"] == "none"
    assert int(summary["bf16_bytes"]) * 2 == int(summary["none_bytes"]) == 4 * int(summary["params"])
    assert summary["bf16_wire_ratio"] == "n/a"  # a world of one sends nothing
    assert summary["none_wire_per_byte"] == summary["bf16_wire_per_byte"] == "0.00"


def test_help_shows_the_launch_commands():
    for path, own_flags in ((AMP, ("--variant", "--precision")), (COMPRESS, ("--hooks", "--width"))):
        result = script_help(path)
        assert result.returncode == 0, result.output
        assert "torchrun --standalone --nproc_per_node=2" in result.output
        for flag in ("--epochs", "--batch-size", "--lr", "--seed", "--backend", "--timeout",
                     "--loss-weight", *own_flags):
            assert flag in result.output, (path, flag)
