"""The built site, read in a real browser: Chromium (Debian's package, .ci/install-chromium)
driven by Playwright at 1400x900 and on a phone (390 px wide), served from 127.0.0.1 by a
thread of this process.

One visit of every page per width (of the generated source pages, the two widest: pages_of)
serves every assertion: no local request answered with an error, no console error, no request
outside the site (offline readers, clusters), every image drawn, every code block as wide
as its column at most, every tab set opening on its first tab (Bad) and switching when
clicked, no chapter taller than 12,000 px at 1400 px; and at both widths nothing cut off (no
sideways overflow of the page, nothing clipped: a wide table or code block scrolls inside its
own box) and no copy button over code text; on the phone, no diff line wraps (each keeps its
indentation) and no code in a table breaks inside a name. Search and a real click carried to the next page
are tried once each. Without Chromium or Playwright the browser tests skip, and fail under CI.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from html import unescape
from pathlib import Path

import pytest
from conftest import REPO

CHROMIUM = Path("/usr/bin/chromium")
VIEWPORT = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}
MAX_HEIGHT = 12_000  # px, a chapter at 1400 px wide (DEVELOPERS.md): split a longer one
WAIT_MS = 15_000  # the longest any single browser step may take


def _missing(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def site(built_site: Path) -> Path:
    """The site as `make docs` builds it (no repository address: DDP_REPO_URL unset), the one
    build of the session (conftest's built_site, shared with test_site's strict build)."""
    return built_site


@dataclass
class Server:
    url: str
    errors: list[str] = field(default_factory=list)  # "404 /path" for every failed request


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[Server]:
    """The built site on 127.0.0.1, recording every request it answers with an error."""
    record = Server(url="")

    class Handler(http.server.SimpleHTTPRequestHandler):
        timeout = 10  # a stalled connection cannot hold a thread forever

        def log_request(self, code="-", size="-") -> None:
            if isinstance(code, int) and code >= 400:
                record.errors.append(f"{int(code)} {self.path}")

        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            functools.partial(Handler, directory=str(site)))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    record.url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    yield record
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed: `make test` installs requirements-dev.txt")
    if not CHROMIUM.exists():
        _missing(f"{CHROMIUM} is missing: .ci/install-chromium installs Debian's chromium")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), timeout=WAIT_MS * 2)
        yield chromium
        chromium.close()


def pages_of(site: Path) -> list[str]:
    """The pages to read, as paths below the site's root ('' for the home page): every page
    but the source pages, and of those (one template, one page per file of scripts/ and
    utils/, docs/hooks/source_pages.py) the widest Python file's and the widest shell file's:
    the other fifty differ only in their text."""
    pages = sorted("" if p.parent == site else f"{p.parent.relative_to(site).as_posix()}/"
                   for p in site.rglob("index.html") if p.parent.name != "search")
    widest = {}
    for path in (p for p in pages if p.startswith("source/")):
        suffix = Path(path.rstrip("/")).suffix
        width = max(map(len, (REPO / path.removeprefix("source/").rstrip("/")).read_text().splitlines()))
        widest[suffix] = max(widest.get(suffix, (0, "")), (width, path))
    assert set(widest) == {".py", ".sh"}, f"no source pages in the site: {sorted(widest)}"
    return [p for p in pages if not p.startswith("source/")] + [path for _, path in widest.values()]


# Run in each page, in one round trip: its images; every tab set's state as loaded, then after
# a click on its second tab; then, with every tab panel and collapsed block shown, every code
# block wider than its column.
INSPECT = """() => {
    const tabSets = () => [...document.querySelectorAll('.tabbed-set')].map(set => ({
        labels: [...set.querySelectorAll(':scope > .tabbed-labels > label')].map(l => l.innerText.trim()),
        nested: set.parentElement.closest('.tabbed-set, details') !== null,  // CPU/GPU inside Bad
        checked: [...set.querySelectorAll(':scope > input')].findIndex(i => i.checked),
        visible: [...set.querySelectorAll(':scope > .tabbed-content > .tabbed-block')]
            .map(b => b.offsetParent !== null),
    }));
    const brokenImages = [...document.images]
        .filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src);
    const tabsAsLoaded = tabSets();
    document.querySelectorAll('.tabbed-set > .tabbed-labels > label:nth-child(2)').forEach(l => l.click());
    const tabsAfterClick = tabSets();
    document.querySelectorAll('details').forEach(d => d.open = true);
    const style = document.createElement('style');
    style.textContent = '.tabbed-set > .tabbed-content > .tabbed-block { display: block !important }';
    document.head.append(style);
    const wideCode = [...document.querySelectorAll('pre > code')]
        .filter(c => c.scrollWidth > c.clientWidth)
        .map(c => `${c.scrollWidth} px in a ${c.clientWidth} px column: `
                  + c.innerText.split('\\n').reduce((a, l) => l.length > a.length ? l : a, ''));
    return {brokenImages, tabsAsLoaded, tabsAfterClick, wideCode};
}"""


# Run in each page as loaded (and again with every tab panel and collapsed block shown):
# what a reader of this width cannot see. Its height; the page wider than the window; any
# element clipped by its own box (text cut with an ellipsis) or running past the window's
# right edge outside a box that scrolls (a table or code block may scroll in its own box, if
# that box fits); every copy button that lies over a character of its code block's text.
LAYOUT = """() => {
    const width = document.documentElement.clientWidth;
    const shown = e => {
        const r = e.getBoundingClientRect();
        return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== 'hidden';
    };
    const inScrollingBox = e => {  // a box that scrolls sideways and itself fits the window
        for (let a = e.parentElement; a && a !== document.body; a = a.parentElement)
            if (['auto', 'scroll'].includes(getComputedStyle(a).overflowX)
                && a.getBoundingClientRect().right <= width + 1) return true;
        return false;
    };
    const name = e => `<${e.tagName.toLowerCase()} class="${e.className}"> `
        + JSON.stringify((e.innerText || '').trim().slice(0, 60));
    const cut = [];
    if (document.documentElement.scrollWidth > width)
        cut.push(`the page is ${document.documentElement.scrollWidth} px wide in a ${width} px window`);
    for (const e of document.querySelectorAll('.md-header *, .md-content *')) {
        if (e.closest('.md-search') || !shown(e)) continue;
        const style = getComputedStyle(e);
        if (['hidden', 'clip'].includes(style.overflowX) && e.scrollWidth > e.clientWidth + 1)
            cut.push(`${name(e)} clipped: ${e.scrollWidth} px of content in ${e.clientWidth} px`);
        const right = e.getBoundingClientRect().right;
        if (right > width + 1 && !inScrollingBox(e))
            cut.push(`${name(e)} runs to ${Math.round(right)} px, past the ${width} px window`);
    }
    const covered = [];
    const range = document.createRange();
    for (const button of document.querySelectorAll('.md-code__button')) {
        if (!shown(button)) continue;
        const b = button.getBoundingClientRect();
        const code = button.closest('pre').querySelector('code');
        const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
        const over = c => c.right > b.left && c.left < b.right && c.bottom > b.top && c.top < b.bottom;
        let hit = null;
        for (let node = walker.nextNode(); node && !hit; node = walker.nextNode()) {
            range.selectNodeContents(node);
            const rects = [...range.getClientRects()];
            if (rects.length && rects[0].top >= b.bottom) break;  // lines below the button
            if (!rects.some(over)) continue;
            for (let i = 0; i < node.length && !hit; i++) {  // which character: not a space
                if (!node.data[i].trim()) continue;
                range.setStart(node, i);
                range.setEnd(node, i + 1);
                if ([...range.getClientRects()].some(over)) hit = node.data;
            }
        }
        if (hit) covered.push(`over ${JSON.stringify(hit.trim())} in: ` + code.innerText.split('\\n')[0]);
    }
    return {height: document.documentElement.scrollHeight, cut, covered};
}"""

# Run on a phone with every block shown: what makes code hard to read there. A diff line that
# wraps (its continuation starts at the left edge, and Python's indentation is lost), and code
# in a table that breaks inside a name (`torch.cuda.s` / `et_device`): two characters of a
# name (letters, digits, _ and .) on two lines.
PHONE_READING = """() => {
    const wrappedDiff = [];
    for (const code of document.querySelectorAll('.language-diff pre > code')) {
        const line = parseFloat(getComputedStyle(code).lineHeight);
        for (const span of code.querySelectorAll(':scope > span'))
            if (span.getBoundingClientRect().height > 1.5 * line)
                wrappedDiff.push(span.innerText.trim().slice(0, 60));
    }
    const brokenNames = [];
    const range = document.createRange();
    const top = (node, i) => {
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        return range.getBoundingClientRect().top;
    };
    for (const code of document.querySelectorAll('.md-typeset table code')) {
        if (code.getClientRects().length < 2) continue;  // on one line
        const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode())
            for (let i = 1; i < node.length; i++)
                if (/[\\w.]/.test(node.data[i - 1]) && /[\\w.]/.test(node.data[i])
                    && top(node, i) > top(node, i - 1) + 1)
                    brokenNames.push(`${node.data.slice(0, i)} / ${node.data.slice(i)}`);
    }
    return {wrappedDiff, brokenNames};
}"""

# Every tab panel and collapsed block shown, for LAYOUT's second look.
SHOW_ALL = """() => {
    document.querySelectorAll('details').forEach(d => d.open = true);
    const style = document.createElement('style');
    style.textContent = '.tabbed-set > .tabbed-content > .tabbed-block { display: block !important }';
    document.head.append(style);
}"""


@dataclass
class Visit:
    """What one page showed."""

    console_errors: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)  # requests to anywhere but the site
    broken_images: list[str] = field(default_factory=list)
    wide_code: list[str] = field(default_factory=list)
    tab_sets: list[dict] = field(default_factory=list)  # as loaded
    tabs_after_click: list[dict] = field(default_factory=list)  # second tab clicked
    height: int = 0  # px, as loaded
    cut: list[str] = field(default_factory=list)  # what a reader of this width cannot see
    covered: list[str] = field(default_factory=list)  # code text under a copy button
    wrapped_diff: list[str] = field(default_factory=list)  # diff lines that wrap (on a phone)
    broken_names: list[str] = field(default_factory=list)  # code in a table split mid-name (phone)


def load(page, url: str) -> None:
    """Open a page and wait for the site's script to have added its copy buttons."""
    page.goto(url, wait_until="load")
    page.wait_for_function("() => !document.querySelector('pre > code') "
                           "|| document.querySelector('.md-code__button')")


def look(page, visit: Visit, then_show_all: str | None = SHOW_ALL) -> None:
    """LAYOUT as loaded, and again once `then_show_all` has shown every hidden block."""
    seen = page.evaluate(LAYOUT)
    visit.height, visit.cut, visit.covered = seen["height"], seen["cut"], seen["covered"]
    if then_show_all:
        page.evaluate(then_show_all)
        seen = page.evaluate(LAYOUT)
        visit.cut += [c for c in seen["cut"] if c not in visit.cut]
        visit.covered += [c for c in seen["covered"] if c not in visit.covered]


@pytest.fixture(scope="module")
def visits(site: Path, server: Server, browser) -> dict[str, Visit]:
    """Every page, loaded once in one browser context (so state carried from page to page,
    like a remembered tab, shows), with its tab sets clicked and its code blocks measured."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(WAIT_MS)
    results: dict[str, Visit] = {}
    current = Visit()

    def request(request) -> None:  # offline, as on a cluster: nothing outside may be needed
        if not request.url.startswith((server.url, "data:", "blob:")):
            current.outside.append(request.url)

    context.on("request", request)
    page = context.new_page()
    page.on("console", lambda m: m.type == "error" and current.console_errors.append(m.text))
    page.on("pageerror", lambda e: current.console_errors.append(str(e)))
    try:
        for path in pages_of(site):
            current = results[path] = Visit()
            load(page, server.url + path)
            look(page, current, then_show_all=None)
            seen = page.evaluate(INSPECT)  # shows every hidden block, for LAYOUT's second look
            more = page.evaluate(LAYOUT)
            current.cut += [c for c in more["cut"] if c not in current.cut]
            current.covered += [c for c in more["covered"] if c not in current.covered]
            current.broken_images = seen["brokenImages"]
            current.tab_sets, current.tabs_after_click = seen["tabsAsLoaded"], seen["tabsAfterClick"]
            current.wide_code = seen["wideCode"]
    finally:
        context.close()
    return results


@pytest.fixture(scope="module")
def phone_visits(site: Path, server: Server, browser) -> dict[str, Visit]:
    """Every page once more, on a phone's screen: what LAYOUT finds, as loaded and all shown."""
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    context.set_default_timeout(WAIT_MS)
    results: dict[str, Visit] = {}
    try:
        page = context.new_page()
        for path in pages_of(site):
            results[path] = Visit()
            load(page, server.url + path)
            look(page, results[path])  # ends with every block shown
            seen = page.evaluate(PHONE_READING)
            results[path].wrapped_diff, results[path].broken_names = seen["wrappedDiff"], seen["brokenNames"]
    finally:
        context.close()
    return results


def _layout_problems(visits: dict[str, Visit]) -> list[str]:
    return [f"{path or '/'}: {problem}" for path, v in visits.items() for problem in v.cut] + [
        f"{path or '/'}: a copy button lies {problem}" for path, v in visits.items() for problem in v.covered]


def test_nothing_is_cut_off_or_under_a_copy_button_at_1400_px(visits):
    problems = _layout_problems(visits)
    assert not problems, "\n".join(problems)


def test_nothing_is_cut_off_or_under_a_copy_button_on_a_phone(phone_visits):
    assert len(phone_visits) > 15, sorted(phone_visits)
    problems = _layout_problems(phone_visits)
    assert not problems, "at 390 px:\n" + "\n".join(problems)


def test_on_a_phone_diffs_keep_their_indentation_and_table_code_breaks_between_names(phone_visits):
    """At 390 px a diff line never wraps (the block scrolls, each line keeps its indentation),
    and code in a table breaks at a space, never inside a name."""
    wrapped = [f"{path or '/'}: {line!r}" for path, v in phone_visits.items() for line in v.wrapped_diff]
    assert not wrapped, "diff lines that wrap at 390 px:\n" + "\n".join(wrapped)
    broken = [f"{path or '/'}: {name!r}" for path, v in phone_visits.items() for name in v.broken_names]
    assert not broken, "code in a table broken inside a name at 390 px:\n" + "\n".join(broken)


def test_no_chapter_is_taller_than_12000_px(visits):
    heights = {path: v.height for path, v in visits.items() if path.startswith("chapters/")}
    assert len(heights) >= 17 and all(heights.values()), heights
    tall = {path: height for path, height in heights.items() if height > MAX_HEIGHT}
    assert not tall, (f"chapters taller than {MAX_HEIGHT:,} px at 1400 px wide (split them, or move "
                      f"detail into collapsed blocks): {tall}")


def test_every_page_loads_everything_it_needs_from_the_site(visits, server):
    assert len(visits) > 15, sorted(visits)
    problems = [f"local request failed: {error}" for error in server.errors]
    for path, visit in visits.items():
        problems += [f"{path or '/'}: loads from outside the site (offline it breaks): {url}"
                     for url in visit.outside]
        problems += [f"{path or '/'}: console error: {text}" for text in visit.console_errors]
        problems += [f"{path or '/'}: image did not load: {src}" for src in visit.broken_images]
    assert not problems, "\n".join(problems)


def test_no_code_block_is_cut_off_at_1400_px(visits):
    wide = {path: v.wide_code for path, v in visits.items() if v.wide_code}
    assert not wide, "code blocks wider than their column:\n" + "\n".join(
        f"{path}: {block}" for path, blocks in wide.items() for block in blocks)


def test_tabs_open_on_bad_and_switch_when_clicked(visits):
    sets = [(path, before, after) for path, v in visits.items()
            for before, after in zip(v.tab_sets, v.tabs_after_click, strict=True)]
    assert len(sets) > 20, "the chapters' Bad/Good tab sets are missing"
    for path, before, after in sets:
        where = f"{path}: tabs {before['labels']}"
        if before["nested"]:  # inside another tab or a collapsed block: shown only with it
            assert before["checked"] == 0 and after["checked"] == 1, f"{where}: tab {before['checked']}"
            continue
        assert before["checked"] == 0 and before["visible"][0], f"{where} open on tab {before['checked']}"
        assert not any(before["visible"][1:]), f"{where}: more than one panel shown"
        assert after["checked"] == 1 and after["visible"][1] and not after["visible"][0], (
            f"{where}: clicking the second tab did not show its panel")
        names = [re.match(r"(\w+)", label).group(1) for label in before["labels"]]
        if {"Bad", "Good"} & {n.capitalize() for n in names}:
            assert all(n not in ("bad", "good") for n in names), f"{where}: labels are 'Bad'/'Good'"
            assert names[0] == "Bad" or "Bad" not in names, f"{where}: Bad is not the first tab"


def test_search_finds_a_chapter(site, server, browser):
    word = "SyncBatchNorm"
    assert word in (site / "chapters/07_batchnorm_and_buffers/index.html").read_text()
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(WAIT_MS)
    try:
        page = context.new_page()
        page.goto(server.url, wait_until="load")
        # The search worker loads the index first; a query typed before that finds nothing.
        meta = page.locator(".md-search-result__meta")
        page.wait_for_function("m => !/Initializing/.test(m.textContent)", arg=meta.element_handle(),
                               timeout=WAIT_MS * 2)
        page.locator("input.md-search__input").click()
        page.keyboard.type(word)
        results = page.locator(".md-search-result__item a")
        try:
            results.first.wait_for(state="attached")
        except Exception as error:
            raise AssertionError(f"searching {word!r} found nothing: {meta.text_content()!r}") from error
        # The list re-renders as each typed key arrives: wait for a result that leads to the
        # chapter, then read every link at once (one by one, the list can change in between).
        chapter = "chapters/07_batchnorm_and_buffers"
        from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
        with contextlib.suppress(PlaywrightTimeoutError):  # not found: the assert below shows what was
            page.wait_for_function("([selector, chapter]) => [...document.querySelectorAll(selector)]"
                                   ".some(link => (link.getAttribute('href') || '').includes(chapter))",
                                   arg=[".md-search-result__item a", chapter])
        hrefs = results.evaluate_all("links => links.map(link => link.getAttribute('href'))")
    finally:
        context.close()
    assert any(chapter in href for href in hrefs), hrefs


def test_each_chapter_links_its_scripts_to_their_source_pages(site):
    """The "Scripts in `scripts/NN_topic/`" line links every file of the folder to a page of
    the site that shows that file (docs/hooks/source_pages.py). A folder with two pages
    (12 and 12b) shares its files between their Scripts lines."""
    linked: dict[str, set[str]] = {}
    for chapter in sorted((REPO / "chapters").glob("*.md")):
        html = (site / "chapters" / chapter.stem / "index.html").read_text()
        line = re.search(r"<p>Scripts in (.*?)</p>", html, re.S)
        assert line, f"{chapter.name} has no 'Scripts in `scripts/{chapter.stem}/`' line"
        named = re.search(r"scripts/(\d{2}_[\w-]+)/", line.group(1))
        folder_name = named.group(1) if named else chapter.stem
        links = re.findall(r'href="\.\./\.\./source/([^"]+)/"', line.group(1))
        linked.setdefault(folder_name, set()).update(links)
    for folder_name, paths in linked.items():
        folder = REPO / "scripts" / folder_name
        for script in sorted(folder.glob("*.py")) + sorted(folder.glob("*.sh")):
            path = script.relative_to(REPO).as_posix()
            assert path in paths, f"{script.name} is not linked from a Scripts line of its chapters"
            shown = (site / "source" / path / "index.html").read_text()
            first = next(line for line in script.read_text().splitlines() if line.strip())
            assert first in html_text(shown), f"{path}: its page does not show the file"


def test_home_page_shows_no_placeholder(site):
    text = html_text((site / "index.html").read_text())
    assert "<repository>" not in text and "cd ddp-tutorial" in text, "the clone line of docs/index.md"


def html_text(html: str) -> str:
    """What a reader sees of a page's HTML, without the markup."""
    return unescape(re.sub(r"<[^>]+>", "", html))


def test_a_clicked_tab_stays_on_its_page(server, browser):
    """A reader who clicks Good (a real click) still finds the next chapter open on Bad."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(WAIT_MS)
    try:
        page = context.new_page()
        page.goto(server.url + "chapters/01_data_parallel_ddp/", wait_until="load")
        outputs = page.locator(".tabbed-set").filter(has=page.get_by_text("Good", exact=True)).first
        outputs.locator(":scope > .tabbed-labels > label").get_by_text("Good", exact=True).click()
        assert outputs.locator(":scope > .tabbed-content > .tabbed-block").nth(1).is_visible()
        page.goto(server.url + "chapters/02_collectives/", wait_until="load")
        outputs = page.locator(".tabbed-set").filter(has=page.get_by_text("Good", exact=True)).first
        assert outputs.locator(":scope > .tabbed-labels > label").first.inner_text() == "Bad"
        assert outputs.locator(":scope > .tabbed-content > .tabbed-block").first.is_visible(), (
            "chapter 02 opened on the tab clicked in chapter 01 (content.tabs.link?)")
    finally:
        context.close()
