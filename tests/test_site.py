"""The site builds strictly, includes its code from the scripts, and shows real output."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
from captured_outputs import OUTPUTS, differences, exit_codes, last_digit, read, run_command, tolerance_for
from conftest import REPO, captured_run
from gpu_outputs import split_gpu_statements


def test_mkdocs_build_strict(built_site):
    """mkdocs build --strict passes (conftest's built_site: one build per session, shared with
    the browser tests), and the pages hold the code and the outputs they include."""
    html = (built_site / "chapters" / "01_data_parallel_ddp" / "index.html").read_text()
    text = re.sub(r"<[^>]+>", "", html)  # what a reader sees, without the highlighting markup
    assert "--8&lt;--" not in text, "a snippet line was left on the page, not included"
    assert "DistributedSampler(dataset, num_replicas=ctx.world_size" in text  # from the script
    assert "samples per rank per epoch: [2048, 2048]" in text  # from docs/outputs


def test_every_script_folder_has_its_chapter_in_the_nav():
    nav = (REPO / "mkdocs.yml").read_text()
    for folder in sorted((REPO / "scripts").glob("[0-9][0-9]_*/")):
        assert (REPO / "chapters" / f"{folder.name}.md").exists(), folder.name
        assert f"chapters/{folder.name}.md" in nav, folder.name


def test_chapters_type_no_long_python_blocks_by_hand():
    """Python shown on a page comes from the scripts (snippets), never typed into it."""
    for page in (REPO / "chapters").glob("*.md"):
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S):
            lines = [ln for ln in block.splitlines() if ln.strip()]
            assert len(lines) <= 3 or all("--8<--" in ln for ln in lines), (page.name, block)


@pytest.mark.parametrize("path", sorted(OUTPUTS.glob("*.txt")), ids=lambda p: p.name)
def test_captured_output_matches_a_fresh_run(path):
    """Same exit code, same text, same numbers (wall clock masked; the hardware-dependent
    ones of captured_outputs.TOLERANCES within their tolerance)."""
    command, captured = read(path)
    assert captured.strip(), f"{path.name} holds no output: run `make outputs`"
    assert path.name in exit_codes(), f"{path.name} has no recorded exit code: run `make outputs`"
    fresh = captured_run(path.name)  # shared with the chapter's tests that assert on this run
    assert fresh.returncode == exit_codes()[path.name], (
        f"`{command}` exited {fresh.returncode}, captured {exit_codes()[path.name]}:\n{fresh.output}")
    found = differences(path.name, captured, fresh.output)
    assert not found, (f"{path.name} no longer matches what `{command}` prints (run `make outputs` "
                       "if the change is meant):\n" + "\n".join(found) + f"\n--- now:\n{fresh.output}")


# Numbers a page states that are not measurements: versions, ports, sizes of the set-up.
NOT_MEASURED = {"0.18", "2.9", "2.13", "2.14", "128", "256", "1000", "2000", "16384", "29400",
                "29500", "65504", "1048576", "6.1e-05", "5.96e-08",
                "22.05", "23.02", "23.11"}  # Slurm's releases
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d+(?:e-?\d+)?|\d{3,}(?:,\d{3})*)(?![\w])")


def _decimals(number: str) -> int:
    return len(number.split(".")[1]) if "." in number and "e" not in number else 0


def _shown_by(outputs: dict[str, str], number: str) -> list[tuple[str, str, str]]:
    """(file, line, token) of every output number that is `number`, or rounds to it at its
    decimals."""
    value, decimals = float(number.replace(",", "")), _decimals(number)
    found = []
    for name, output in outputs.items():
        for line in output.splitlines():
            for token in NUMBER.findall(line):
                shown = float(token.replace(",", ""))
                if shown == value or ("e" not in number and _decimals(token) >= decimals
                                      and round(shown, decimals) == value):
                    found.append((name, line, token))
    return found


def _holds(number: str, name: str, line: str, token: str) -> bool:
    """Whether `number`, as typed, claims no more precision than file `name`'s `token` has on
    every machine: exact files always; a number under a tolerance only when rounding to the
    typed digits hides the tolerance (0.18 for a loss of 0.1783 +- 1%, not 0.178)."""
    tolerance = tolerance_for(name)
    if tolerance is None or not tolerance.covers(line):
        return True
    return 0.5 * last_digit(number) >= tolerance.margin(token)


def _claim_or_nothing(code: re.Match) -> str:
    """A code block or span is not a claim, but a number alone in inline code is one."""
    span = code.group(1) or ""
    return f" {span} " if re.fullmatch(r"[-+]?[\d.,]+(e-?\d+)?%?", span) else " "


def _outputs_in(text: str) -> dict[str, str]:
    return {Path(path).name: read(REPO / path)[1]
            for path in re.findall(r'--8<-- "(docs/outputs/(?!gpu/)[^"]+)"', text)}  # GPU: test_gpu_outputs


@pytest.mark.parametrize("page", sorted((REPO / "chapters").glob("*.md")), ids=lambda p: p.stem)
def test_numbers_on_a_page_come_from_its_captured_outputs(page):
    """A measured number in a chapter's prose is one that an output the reader has seen by
    then shows (rounded or not): one included in the same `##` section or above it (the
    whole page's, for a section before the first output). And it is no more precise than it
    holds on another machine. A number alone in inline code (`0.1783`) is a claim too; code
    is not."""
    text = page.read_text()
    unshown, too_precise, offset = [], [], 0
    for section in re.split(r"(?m)^(?=## )", text):
        offset += len(section)
        seen = _outputs_in(text[:offset]) or _outputs_in(text)
        not_gpu = split_gpu_statements(section)[1]  # GPU statements: tests/test_gpu_outputs.py
        prose = re.sub(r"```.*?```|`([^`\n]*)`", _claim_or_nothing, not_gpu, flags=re.S)
        for number in (n.lstrip("+") for n in NUMBER.findall(prose)):
            if number in NOT_MEASURED:
                continue
            sources = _shown_by(seen, number)
            if not sources:
                unshown.append(number)
            elif not any(_holds(number, *source) for source in sources):
                too_precise.append(number)
    assert not unshown, (f"{page.name} states {unshown}, which no captured output included in "
                         "the same section or above it shows")
    assert not too_precise, (f"{page.name} states {too_precise} more precisely than they hold on "
                             "another CPU (see captured_outputs.TOLERANCES): round them")


# A CPU without AVX-512: ATen's vectorized kernels at their baseline, oneDNN (bf16 matmuls) and
# MKL (fp32 matmuls) at AVX2, as on an older or a smaller cloud machine.
OTHER_CPU = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "AVX2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


@pytest.mark.parametrize("name", [
    "06_amp_bf16.txt",         # bf16 arithmetic: within its tolerance
    "07_batchnorm_good.txt",   # fp32 differences of 1e-7 against a reference: exact
    "11_bypass_bad.txt",       # fp32 checksums to 10 decimals after diverging training: exact
    "16_bf16_keep_gathered.txt",  # FSDP2 in bf16: within its tolerance
])
def test_captures_hold_on_a_cpu_with_another_instruction_set(name):
    command, captured = read(OUTPUTS / name)
    code, fresh = run_command(command, env_extra=OTHER_CPU)
    assert code == exit_codes()[name]
    found = differences(name, captured, fresh)
    assert not found, "\n".join(found)


# The first paragraph of every chapter page and of every other page that includes code or
# outputs: a reader of the raw markdown (which shows the includes as `--8<--` lines) learns
# where the code and the outputs are, and where to read the page whole.
HEADER = re.compile(r"\*Reading the raw file\? Its code and outputs are included from (?P<names>.+) "
                    r"when the site is built: read it rendered \(`make serve`, or the site\)\.\*")
INCLUDE = re.compile(r'--8<-- "([^":]+)')


def _pages_with_includes() -> list[Path]:
    docs = [page for page in sorted((REPO / "docs").glob("*.md")) if "--8<--" in page.read_text()]
    return sorted((REPO / "chapters").glob("*.md")) + docs


@pytest.mark.parametrize("page", _pages_with_includes(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_page_says_where_its_code_and_outputs_come_from(page):
    """Its first paragraph, right under the title, names where its includes come from. A
    chapter: its own script folder (scripts/NN_topic/; 12b's are chapter 12's) and
    docs/outputs/NN_*.txt. Another page: every file it includes, by name, folder or pattern."""
    text = page.read_text()
    title, _, rest = text.partition("\n")
    first = rest.strip().split("\n\n")[0]
    assert title.startswith("# ") and (line := HEADER.fullmatch(first)), (
        f"{page.name}: the first paragraph under the title must be the line that says where to read "
        f"it rendered (see the brief's form in CONTRIBUTING.md), not: {first[:120]!r}")
    names = re.findall(r"`([^`]+)`", line["names"])
    included = INCLUDE.findall(text)
    if page.parent.name == "chapters":
        nn = page.stem.split("_")[0]
        folders = {path.split("/")[1] for path in included if re.match(r"scripts/[^/]+/", path)}
        # its own folder, or (12b) the folder of its chapter number that it includes from
        own = page.stem if (REPO / "scripts" / page.stem).is_dir() else min(
            f for f in folders if f[:2] == nn[:2])
        assert names == [f"scripts/{own}/", f"docs/outputs/{nn}_*.txt"], names
    else:
        unnamed = [path for path in included
                   if not any(path.startswith(name) if name.endswith("/") else fnmatch.fnmatch(path, name)
                              for name in names)]
        assert not unnamed, f"{page.name} includes {unnamed}, which its first line does not name ({names})"
