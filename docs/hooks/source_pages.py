"""mkdocs hook: the site carries the source of every script, and chapters link to it.

The repository has no public address yet, so the site cannot link to a code host. Instead
every file under scripts/ and utils/ gets a page of its own in the site (`source/<path>/`),
made at build time from the file itself (a snippet include, so it cannot drift), and the
"Scripts in `scripts/NN_topic/`: ..." line of every chapter links each file it names to that
page. These links work offline and show exactly the version the site was built from.

When the site is built with a repository address (`DDP_REPO_URL`, read by `repo_url` in
mkdocs.yml), Material shows it in the header of every page and the home page's clone
command uses it; without one the clone command says to start from your copy.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page

REPO = Path(__file__).resolve().parents[2]
LANGUAGES = {".py": "python", ".sh": "bash"}
PREFIX = "source"  # the site's folder of source pages


def sources() -> list[str]:
    """Every script and library file, relative to the repository root."""
    paths = [*REPO.glob("scripts/**/*"), *REPO.glob("utils/*")]
    return sorted(p.relative_to(REPO).as_posix() for p in paths
                  if p.is_file() and p.suffix in LANGUAGES and p.name != "__init__.py"
                  and "__pycache__" not in p.parts)


def source_page(path: str) -> str:
    """The page of one file: its whole text, highlighted, wide (no table of contents); kept
    out of the search index."""
    return (f"---\nsearch:\n  exclude: true\nhide:\n  - toc\n---\n\n"
            f"# `{path}`\n\n"
            f"```{LANGUAGES[Path(path).suffix]}\n--8<-- \"{path}\"\n```\n")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path in sources():
        files.append(File.generated(config, f"{PREFIX}/{path}.md", content=source_page(path),
                                    inclusion=InclusionLevel.NOT_IN_NAV))  # reached by links
    return files


SCRIPTS_LINE = re.compile(r"^Scripts in `(scripts/[^`]+)/`:.*?(?=\n\n|\Z)", re.M | re.S)
CODE_SPAN = re.compile(r"`([\w./-]+)`")


def link_scripts_line(markdown: str, page_dir: str) -> str:
    """Link every file that a chapter's "Scripts in `scripts/NN_topic/`: ..." paragraph names
    (bare names are in that folder; names with a slash are relative to the repository)."""
    known = set(sources())

    def linked(paragraph: re.Match[str]) -> str:
        folder = paragraph.group(1)

        def link(span: re.Match[str]) -> str:
            name = span.group(1)
            path = name if "/" in name else f"{folder}/{name}"
            if path not in known:  # the folder itself, or a name that is not a file
                return span.group(0)
            up = "../" * (page_dir.count("/") + 1) if page_dir else ""
            return f"[`{name}`]({up}{PREFIX}/{path}.md)"

        return CODE_SPAN.sub(link, paragraph.group(0))

    return SCRIPTS_LINE.sub(linked, markdown)


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri.startswith("chapters/"):
        return link_scripts_line(markdown, page_dir=page.file.src_uri.rpartition("/")[0])
    if page.file.src_uri == "index.md":
        if config.repo_url:
            return markdown.replace("git clone <repository>", f"git clone {config.repo_url}")
        return markdown.replace("git clone <repository> ddp-tutorial && cd ddp-tutorial",
                                "cd ddp-tutorial   # your copy of the repository")
    return markdown
