"""What the pages point at exists: chapters in the site's nav, and torch's functions in torch.

1. A page that mentions "chapter 14", or links to `14_...md`, before chapter 14 is in
   mkdocs.yml's nav sends the reader nowhere (or to a page that will say something else).
2. A statement about PyTorch's internals names where it comes from, as
   "(torch 2.14: `DistributedDataParallel._sync_buffers`)". Every name in such a citation
   must exist in the installed torch, so that a reader (and a reviewer) can look it up, and
   so that a torch upgrade that renames or removes it makes this test fail and the page
   gets checked again. (Claims shown by a captured output need no citation.)
"""

from __future__ import annotations

import functools
import importlib.util
import mmap
import re
from pathlib import Path

import pytest
from conftest import REPO

PAGES = sorted([*(REPO / "chapters").glob("*.md"), *(REPO / "docs").glob("*.md"), REPO / "README.md"])

# "chapter 14", "Chapters 06 and 10", "chapters [01](...) and [03](...)": every NN of the phrase.
CHAPTER_PHRASE = re.compile(
    r"\bchapters?\s+\[?\d{2}\]?(?:\([^)]*\))?"
    r"(?:\s*(?:,|and|or|to|-)\s*\[?\d{2}\]?(?:\([^)]*\))?)*",
    re.IGNORECASE,
)
# A markdown link to a chapter file: (14_x.md), (../chapters/14_x.md#anchor), ...
CHAPTER_LINK = re.compile(r"\]\((?:[^)#\s]*/)?(\d{2}[a-z]?_[\w-]+\.md)")  # 12b_x.md: chapter 12's second page


def nav_chapters() -> set[str]:
    """The chapter files in mkdocs.yml's nav: {'01_data_parallel_ddp.md', ...}."""
    return set(re.findall(r"^\s*-\s*[^:\n]+:\s*chapters/(\d{2}[a-z]?_[\w-]+\.md)\s*$",
                          (REPO / "mkdocs.yml").read_text(), flags=re.M))


def chapter_references(text: str) -> list[tuple[int, str, str]]:
    """(line, what was written, chapter it needs): numbers for mentions, file names for links."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for phrase in CHAPTER_PHRASE.finditer(line):
            written = re.sub(r"\]?\([^)]*\)|\[|\]", "", phrase.group())  # without the links
            for nn in re.findall(r"\b\d{2}\b", written):
                found.append((number, written, nn))
        for link in CHAPTER_LINK.finditer(line):
            found.append((number, link.group(), link.group(1)))
    return found


def unknown_chapters(text: str, nav: set[str]) -> list[tuple[int, str]]:
    numbers = {name[:2] for name in nav}
    return [(line, written) for line, written, needs in chapter_references(text)
            if (needs not in nav if needs.endswith(".md") else needs not in numbers)]


def test_the_reference_finder_catches_every_form():
    nav = {"01_data_parallel_ddp.md", "03_distributed_sampler.md"}
    text = ("See chapter 14.\nChapters 01 and 16 agree.\nchapters [01](01_data_parallel_ddp.md) and "
            "[03](03_distributed_sampler.md).\n[Chapter 15](15_torch_compile.md#top)\n"
            "[here](../chapters/17_zero.md)\nchapter 03, chapter 01; scripts/14_x/ and 2014.\n")
    assert unknown_chapters(text, nav) == [
        (1, "chapter 14"), (2, "Chapters 01 and 16"), (4, "Chapter 15"),
        (4, "](15_torch_compile.md"), (5, "](../chapters/17_zero.md")]


def test_nav_lists_the_chapters():
    nav = nav_chapters()
    assert "01_data_parallel_ddp.md" in nav and len(nav) == len(list((REPO / "chapters").glob("*.md")))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_pages_refer_only_to_chapters_in_the_nav(page):
    unknown = unknown_chapters(page.read_text(), nav_chapters())
    assert not unknown, (
        f"{page.relative_to(REPO)} refers to chapters that are not in mkdocs.yml's nav (yet): "
        + "; ".join(f"line {line}: {written!r}" for line, written in unknown)
        + ". Let the text stand on its own; link the chapter when it lands.")


def test_the_pages_do_refer_to_chapters():
    """The finder is not blind: the pages hold many references, all of them found."""
    assert sum(len(chapter_references(page.read_text())) for page in PAGES) > 50


# --------------------------------------------------------------------------- citations
TORCH = Path(importlib.util.find_spec("torch").origin).parent  # found, not imported: fast
TORCH_VERSION = re.search(r"__version__ = '([^']+)'", (TORCH / "version.py").read_text()).group(1)
# Where DDP's Python code, its C++ headers and the bindings' stubs live.
SOURCE_DIRS = ["distributed", "nn", "amp", "optim", "profiler", "utils/data", "_C",
               "include/torch/csrc/distributed"]
CITATION_START = re.compile(r"\(torch\s+(\d+\.\d+):\s")
IDENTIFIER_PATH = re.compile(r"^[A-Za-z_]\w*(?:(?:\.|::)[A-Za-z_]\w*)*(?:\(\))?$")


# A name defined (def, class, struct), assigned, declared as a parameter, or called/declared.
DEFINITIONS = (re.compile(r"\b(?:def|class|struct)\s+(?:\w+\s+)?(\w+)"), re.compile(r"\b(\w+)\s*[:=(]"))


@functools.cache
def torch_sources() -> dict[Path, str]:
    files = {}
    for folder in SOURCE_DIRS:
        for path in (TORCH / folder).rglob("*"):
            if path.suffix in {".py", ".pyi", ".h", ".hpp"} and path.is_file():
                files[path] = path.read_text(errors="replace")
    return files


@functools.cache
def torch_index() -> tuple[dict[str, set[Path]], dict[Path, set[str]]]:
    """Which files define a name (def, class, an assignment, a parameter, a C++ declaration),
    and which words each file holds."""
    defined: dict[str, set[Path]] = {}
    words = {}
    for path, text in torch_sources().items():
        for pattern in DEFINITIONS:
            for name in pattern.findall(text):
                defined.setdefault(name, set()).add(path)
        words[path] = set(re.findall(r"\w+", text))
    return defined, words


def _in_shared_library(name: str) -> bool:
    """C++ names that only the compiled library holds (e.g. a profiler event's name)."""
    for library in (TORCH / "lib").glob("libtorch_cpu.*"):
        with library.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if data.find(name.encode()) >= 0:
                return True
    return False


def resolves(token: str) -> bool:
    """Whether a backticked name of a citation exists in the installed torch."""
    sources = torch_sources()
    if token.startswith("torch/") and token.endswith(".py"):  # a file of the installed torch
        return (TORCH.parent / token).is_file()
    if not IDENTIFIER_PATH.match(token):  # quoted code: it must appear as written
        return any(token in text for text in sources.values())
    parts = re.split(r"\.|::", token.removesuffix("()"))
    if "::" in token:
        return any(token in text for text in sources.values()) or _in_shared_library(token)
    if parts[0] == "torch":  # a module path, then names inside that module
        for cut in range(len(parts), 1, -1):
            module = TORCH.joinpath(*parts[1:cut])
            for path in (module.with_suffix(".py"), module / "__init__.py"):
                if path.is_file():
                    text = path.read_text()
                    return all(re.search(rf"\b{re.escape(p)}\b", text) for p in parts[cut:])
        return False
    defined, words = torch_index()
    if len(parts) == 1:
        return parts[0] in defined
    # Owner.member...: a file that defines the owner (a class, or a module by its file name)
    # and names every member.
    owners = defined.get(parts[0], set()) | {path for path in sources if path.stem == parts[0]}
    if any(set(parts[1:]) <= words[path] for path in owners):
        return True
    return any(token in text for text in sources.values())  # e.g. `self.training`


def _up_to_closing_parenthesis(text: str, start: int) -> str:
    """The text from `start` to the parenthesis that closes the one opened before it
    (parentheses inside `code` and inside links do not count)."""
    depth, in_code = 1, False
    for index in range(start, len(text)):
        char = text[index]
        if char == "`":
            in_code = not in_code
        elif not in_code and char in "()":
            depth += 1 if char == "(" else -1
            if depth == 0:
                return text[start:index]
    return text[start:]


def citations(text: str) -> list[tuple[int, str, str]]:
    """(line, torch version, backticked name) of every "(torch X.Y: ...)" in a page."""
    found = []
    for match in CITATION_START.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        for name in re.findall(r"`([^`]+)`", _up_to_closing_parenthesis(text, match.end())):
            found.append((line, match.group(1), name))
    return found


def test_the_citation_checker_rejects_what_torch_lacks():
    assert resolves("DistributedDataParallel._sync_buffers")
    assert resolves("torch.distributed.run.run") and resolves("default_hooks._compress_hook")
    assert not resolves("DistributedDataParallel._sync_buffers_twice")
    assert not resolves("Join.notify_join_contexts") and not resolves("torch.distributed.runner.run")
    assert resolves("torch/distributed/algorithms/join.py") and not resolves("torch/distributed/joins.py")
    assert citations("x (torch 2.14: `A.b`, `c(x)`, [y](z.md)).\n(torch 2.14:\n`d`) `e`)") == [
        (1, "2.14", "A.b"), (1, "2.14", "c(x)"), (2, "2.14", "d")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_torch_citations_name_what_the_installed_torch_has(page):
    installed = ".".join(TORCH_VERSION.split(".")[:2])
    missing = [(line, version, name) for line, version, name in citations(page.read_text())
               if not resolves(name)]
    assert not missing, (
        f"{page.relative_to(REPO)} cites names the installed torch {TORCH_VERSION} does not have: "
        + "; ".join(f"line {line}: `{name}` (cited for torch {version})" for line, version, name in missing)
        + (f". The page was checked against another torch than {installed}: check the claims "
           "again in the installed source and update them and their citations."
           if any(version != installed for _, version, _ in missing) else ""))


def test_the_pages_cite_torch():
    """The checker is not blind: the chapters hold many citations, all of them found."""
    assert sum(len(citations(page.read_text())) for page in PAGES) > 30
