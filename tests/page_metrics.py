"""How long each chapter is to read: its height on screen and the length of its sentences.

    .venv/bin/python tests/page_metrics.py                       # every chapter
    .venv/bin/python tests/page_metrics.py chapters/01_data_parallel_ddp.md 12
    .venv/bin/python tests/page_metrics.py --long 12             # and print the long sentences
    .venv/bin/python tests/page_metrics.py --repo /tmp/before    # another checkout (git worktree)

It builds the site (mkdocs build into a temporary folder), opens each chapter page in
Debian's Chromium through Playwright at 1400 px wide, as tests/test_site_browser.py does, and
prints per page: its height in px (collapsed blocks closed, first tabs open), the number of
sentences of its main text, their mean length in words, and how many have more than 40 words.

The main text is what a learner reads on the main line: the chapter's markdown without code
blocks (and the outputs they include), admonitions and collapsed blocks (`!!!`, `???`, `???+`
with their indented bodies), tables, headings and HTML. The aim (DEVELOPERS.md): a mean under
22 words, no sentence over 40, no page taller than 12,000 px.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
WIDTH = 1400
MAX_HEIGHT = 12_000
MAX_WORDS = 40
MEAN_WORDS = 22

FENCE = re.compile(r"^\s*(```|~~~)")
BLOCK = re.compile(r"^(\s*)(\?\?\?\+?|!!!)")  # an admonition or a collapsed block
TAB = re.compile(r'^\s*===\+?\s+"')
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s+")
# Abbreviations whose full stop ends no sentence.
ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|etc|cf|vs|approx|resp|Fig|No)\.", re.IGNORECASE)
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]*_]*\s+")


def main_text(markdown: str) -> list[str]:
    """The paragraphs (and list items) of the main text, each as one line of plain text."""
    paragraphs: list[str] = []
    current: list[str] = []
    fence: str | None = None
    block_indent: int | None = None  # inside an admonition whose marker had this indent

    def close() -> None:
        if current:
            paragraphs.append(" ".join(current))
            current.clear()

    markdown = re.sub(r"<!--.*?-->", "", markdown, flags=re.S)
    for line in markdown.splitlines():
        indent = len(line) - len(line.lstrip())
        if block_indent is not None:
            if not line.strip() or indent > block_indent:
                continue
            block_indent = None
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        if match := FENCE.match(line):
            close()
            fence = match.group(1)
            continue
        if match := BLOCK.match(line):
            close()
            block_indent = len(match.group(1))
            continue
        stripped = line.strip()
        if (not stripped or stripped.startswith(("#", "|", "<", "--8<--", "*[")) or TAB.match(line)
                or re.fullmatch(r"[-*_]{3,}", stripped)):
            close()
            continue
        if LIST_ITEM.match(line):
            close()
            stripped = LIST_ITEM.sub("", line).strip()
        current.append(stripped)
    close()
    return [plain(p) for p in paragraphs if plain(p)]


def plain(text: str) -> str:
    """Markdown inline markup to what a reader sees: link texts, code as one word."""
    text = re.sub(r"`[^`]*`", "CODE", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [text](url) and images
    text = re.sub(r"\[([^\]]*)\]\[[^\]]*\]", r"\1", text)
    text = re.sub(r"\{[#.][^}]*\}", "", text)  # attr_list
    return re.sub(r"\s+", " ", text).strip()


def sentences(paragraphs: list[str]) -> list[str]:
    found = []
    for paragraph in paragraphs:
        protected = ABBREVIATIONS.sub(lambda m: m.group(1) + "\0", paragraph)
        for sentence in SENTENCE_END.split(protected):
            sentence = sentence.replace("\0", ".").strip()
            if words(sentence):
                found.append(sentence)
    return found


def words(sentence: str) -> int:
    return sum(1 for token in sentence.split() if re.search(r"\w", token))


@dataclass
class Metrics:
    page: str
    height: int | None
    sentences: list[str]

    @property
    def mean(self) -> float:
        return sum(map(words, self.sentences)) / len(self.sentences) if self.sentences else 0.0

    @property
    def long(self) -> list[str]:
        return [s for s in self.sentences if words(s) > MAX_WORDS]


def text_metrics(chapter: Path) -> list[str]:
    return sentences(main_text(chapter.read_text()))


def build(repo: Path, out: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env.pop("DDP_REPO_URL", None)
    mkdocs = Path(sys.executable).parent / "mkdocs"
    result = subprocess.run([str(mkdocs), "build", "--quiet", "-d", str(out)], cwd=repo, env=env,
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        sys.exit(f"mkdocs build failed in {repo}:\n{result.stdout}{result.stderr}")


@contextmanager
def serve(site: Path) -> Iterator[str]:
    """The built site on 127.0.0.1: its address."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            functools.partial(Handler, directory=str(site)))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


def heights(url: str, paths: list[str], width: int = WIDTH) -> dict[str, int]:
    """Each page's height in px (document scroll height) at this width, in one browser."""
    from playwright.sync_api import sync_playwright

    found = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), timeout=30_000)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            for path in paths:
                page.goto(url + path, wait_until="load")
                found[path] = page.evaluate("() => document.documentElement.scrollHeight")
        finally:
            browser.close()
    return found


def chapters_named(repo: Path, names: list[str]) -> list[Path]:
    """Chapter files from paths, stems or number prefixes ('12', '01_data_parallel_ddp')."""
    every = sorted((repo / "chapters").glob("*.md"))
    if not names:
        return every
    chosen = []
    for name in names:
        stem = Path(name).stem
        matches = [c for c in every if c.stem == stem] or [c for c in every if c.stem.startswith(stem)]
        if not matches:
            sys.exit(f"no chapter {name!r} in {repo / 'chapters'}")
        chosen += [m for m in matches if m not in chosen]
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pages", nargs="*", help="chapter files, stems or numbers (default: all)")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to measure")
    parser.add_argument("--long", action="store_true", help="print each sentence over 40 words")
    parser.add_argument("--no-browser", action="store_true", help="sentences only, no height")
    args = parser.parse_args()
    repo = args.repo.resolve()
    chapters = chapters_named(repo, args.pages)

    found: dict[str, int] = {}
    if not args.no_browser:
        with tempfile.TemporaryDirectory() as tmp:
            site = Path(tmp) / "site"
            build(repo, site)
            with serve(site) as url:
                found = heights(url, [f"chapters/{c.stem}/" for c in chapters])
    rows = [Metrics(c.stem, found.get(f"chapters/{c.stem}/"), text_metrics(c)) for c in chapters]

    print(f"{'page':<32} {'height_px':>9} {'sentences':>9} {'mean_words':>10} {'over_40':>7}")
    for row in rows:
        height = f"{row.height:,}" if row.height is not None else "-"
        flag = " <" if (row.height or 0) > MAX_HEIGHT or row.mean >= MEAN_WORDS or row.long else ""
        print(f"{row.page:<32} {height:>9} {len(row.sentences):>9} {row.mean:>10.1f} "
              f"{len(row.long):>7}{flag}")
    every = [s for row in rows for s in row.sentences]
    print(f"{'all':<32} {'':>9} {len(every):>9} {sum(map(words, every)) / max(len(every), 1):>10.1f} "
          f"{sum(len(row.long) for row in rows):>7}")
    print(f"(< marks a page over {MAX_HEIGHT:,} px, a mean of {MEAN_WORDS}+ words, or a sentence over "
          f"{MAX_WORDS} words; main text: prose without code, outputs, admonitions, tables, headings)")
    if args.long:
        for row in rows:
            for sentence in row.long:
                print(f"\n{row.page} ({words(sentence)} words): {sentence}")


if __name__ == "__main__":
    main()
