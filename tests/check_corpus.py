"""Measure check_ddp.py on a corpus of real DDP training scripts that were not used to build it.

The scripts stay outside this repository. tests/check_corpus.tsv lists each one (repository,
commit, path) and labels what the checker should say about it, one row per line and code:
`true` a pitfall of a rule the file really has, `false` a false alarm some version gave,
`note` a caveat that is right as a note but no pitfall (a resume checkpoint's 'module.' keys
loaded back into the wrapper), each with its reason; `clean` a file with nothing to say. Its
columns `before`, `alone` and `after` record what three versions of the checker said at that
line (error, warning, note, or - for nothing): the first version, the version of commit
e674dd7 (the file alone), and this one (the file in its repository: the modules it imports
from there are read too). The table on docs/check.md and its precision and recall come from
the file (`--table`), and a run on the corpus shows where the checker now says something else.

    python tests/check_corpus.py CORPUS_DIR                  # the files: CORPUS_DIR/owner__name/path
    python tests/check_corpus.py CORPUS_DIR --set heldout    # the files kept aside (dev, heldout, all)
    python tests/check_corpus.py CORPUS_DIR --select DDP04   # the rules whose codes start so
    python tests/check_corpus.py CORPUS_DIR --record after   # write what the checker says now into the file
    python tests/check_corpus.py CORPUS_DIR --record alone --alone --checker e674dd7_check_ddp.py
    python tests/check_corpus.py --table > tests/check_corpus.md   # the table docs/check.md includes
    python tests/check_corpus.py --fetch-list                # what to fetch, and where

Fetch each file at its commit (git show COMMIT:PATH in a clone of the repository) into
CORPUS_DIR/<owner>__<name>/<path>, and beside it, at their own paths, the modules of its
repository that it imports, as tests/check_corpus_modules.tsv lists them (two imports deep, as
the checker follows them): --fetch-list prints both. Each file is checked in the folder of its
repository (--alone: by itself). Without the folder the script says so and exits 0: the test
suite does not need the corpus. Findings no row labels are added by --record as UNLABELLED
rows: label them by hand (true/false/note and a reason) before the table is made.

tests/check_corpus_review5.tsv holds a third fresh review's 15 files (set review5), labelled
by the reviewer, in the same columns: `before` is what the reviewed version (f69ac21) said,
`after` this one, which was fixed after that review (not a blind measure); `alone` is not
measured there. Its folder is REVIEW_DIR/owner__name/path, each file in its whole repository:

    python tests/check_corpus.py REVIEW_DIR --labels tests/check_corpus_review5.tsv
    python tests/check_corpus.py --labels tests/check_corpus_review5.tsv --review-table \
        > tests/check_corpus_review5.md

tests/check_corpus_review6.tsv holds a fourth fresh review's 15 files (set review6), the same
way: `before` is what the reviewed version (999036c) said, `after` this one.
tests/check_corpus_review7.tsv holds a fifth (set review7), from that reviewer's table: `before`
is what the reviewed version (8c072c6) said, `after` this one. tests/check_corpus_review9.tsv
holds a sixth (set review9, blind), from that reviewer's table: `before` is 32828ad's run.
tests/check_corpus_review10.tsv holds a seventh (set review10, blind), from that reviewer's table:
`before` is 736fc2e's run. tests/check_corpus_review11.tsv holds an eighth (set review11, blind), from that
reviewer's table: `before` is 0ab6be3's run. tests/check_corpus_review12.tsv holds a ninth (set
review12, blind), from that reviewer's table and notes: `before` is 784b289's run.
tests/check_corpus_review13.tsv holds a tenth (set review13, blind): `before` is 1292787's run, and
no fix followed it.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LABELS = REPO / "tests" / "check_corpus.tsv"
REVIEW = REPO / "tests" / "check_corpus_review5.tsv"  # a fresh review's 15 files: f69ac21, then now
REVIEW6 = REPO / "tests" / "check_corpus_review6.tsv"  # the next fresh review's 15 files: 999036c, then now
REVIEW7 = REPO / "tests" / "check_corpus_review7.tsv"  # a fifth fresh review's 15 files: 8c072c6, then now
REVIEW9 = REPO / "tests" / "check_corpus_review9.tsv"  # a sixth fresh review's 15 files: 32828ad, then now
REVIEW10 = REPO / "tests" / "check_corpus_review10.tsv"  # a seventh fresh review's files: 736fc2e, then now
REVIEW11 = REPO / "tests" / "check_corpus_review11.tsv"  # an eighth fresh review's files: 0ab6be3, then now
# the version each review ran
REVIEWED = {"review5": "f69ac21", "review6": "999036c", "review7": "8c072c6", "review9": "32828ad",
            "review10": "736fc2e", "review11": "0ab6be3", "review12": "784b289",
            "review13": "1292787"}
MODULES = REPO / "tests" / "check_corpus_modules.tsv"  # repo, commit, entry, a module it imports
CHECKER = REPO / "scripts" / "00_porting" / "check_ddp.py"
# a file that is distributed: it wraps DDP, calls torch.distributed, or spawns its ranks (mp.spawn)
WRAPS_DDP = re.compile(
    r"DistributedDataParallel|\bDDP\(|torch\.distributed|\bmp\.spawn\(|multiprocessing\.spawn\("
)
COLUMNS = ["repo", "commit", "path", "set", "line", "code", "label", "before", "alone", "after", "reason"]
VERSIONS = (("before", "first"), ("alone", "e674dd7, the file alone"), ("after", "now, in its repository"))
NOT_DISTRIBUTED, UNREADABLE = "NOTDIST", "UNREADABLE"  # codes of the rows for a file's verdict


def load_checker(path: Path):
    spec = importlib.util.spec_from_file_location(f"checker_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_labels(path: Path = LABELS) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def write_labels(rows: list[dict], path: Path = LABELS) -> None:
    rows = sorted(rows, key=lambda r: (r["set"] != "dev", r["repo"].lower(), r["path"],
                                       int(r["line"]) if r["line"].isdigit() else 0, r["code"]))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def selected(code: str, select: list[str]) -> bool:
    return not select or any(code.startswith(s) for s in select)


def run_checker(checker, path: Path, select: list[str], root: Path | None = None) -> tuple[dict, str | None]:
    """{(line, code): severity} of the checker's findings on one file (an older version has no
    severities: 'error'), and its verdict on the file: NOTDIST (said to have no torch.distributed,
    though it wraps DDP or calls torch.distributed), UNREADABLE or None. `root`: the
    folder of the file's repository, whose modules the checker follows (a version that follows
    none checks the file alone; None: alone)."""
    try:
        text, tree = checker.read_source(str(path))
    except checker.Unreadable:
        return {}, UNREADABLE
    follows = hasattr(checker, "Project")
    if follows:
        findings = checker.check_source(text, tree, str(path), root=root, follow=root is not None)
        project = checker.project_of(str(path), root, follow=root is not None)
        made = checker.Checker(tree, project=project, path=str(path))
    else:
        findings = checker.check_source(text, tree, str(path))
        made = checker.Checker(tree)
    # a file that calls torch.distributed, said to be out of the checker's sight: a right note
    distributed = made.distributed or getattr(made, "names_distributed", False)
    found = {(str(f["line"]), f["code"]): f.get("severity", "error")
             for f in findings if selected(f["code"], select)}
    for f in findings:  # one finding for a model's layers names the others: "(and 2 more: lines 19, 29)"
        named = re.search(r"\(and \d+ more: lines? ([\d, ]+)", f["message"])
        lines = named.group(1).replace(" ", "").split(",") if named and selected(f["code"], select) else []
        for line in lines:
            found.setdefault((line, f["code"]), f.get("severity", "error"))
    plain = not distributed and WRAPS_DDP.search(text)
    return found, NOT_DISTRIBUTED if plain else None


def measure(corpus: Path, rows: list[dict], checker, which: str, select: list[str],
            alone: bool = False) -> dict:
    """Run the checker on every file of the set, in the folder of its repository (the modules
    it imports from there are read too), or alone; compare with the rows."""
    files = {}
    for row in rows:
        if which in ("all", row["set"]):
            files.setdefault((row["repo"], row["commit"], row["path"], row["set"]), []).append(row)
    said, missing = {}, []
    for (repo, commit, rel, part), labels in files.items():
        path = corpus / repo.replace("/", "__") / rel
        if not path.exists():
            missing.append(str(path))
            continue
        root = None if alone else corpus / repo.replace("/", "__")
        found, verdict = run_checker(checker, path, select, root)
        if verdict:
            found[("-", verdict)] = "yes"
        said[(repo, rel)] = found
        known = {(r["line"], r["code"]) for r in labels}
        for line, code in sorted(set(found) - known):
            rows.append({"repo": repo, "commit": commit, "path": rel, "set": part, "line": line, "code": code,
                         "label": "false" if code in (NOT_DISTRIBUTED, UNREADABLE) else "UNLABELLED",
                         "before": "-", "alone": "-", "after": "-",
                         "reason": "it wraps DDP or calls torch.distributed" if code == NOT_DISTRIBUTED else
                         "the checker could not read it" if code == UNREADABLE else "label this finding"})
    return {"said": said, "missing": missing}


def tally(rows: list[dict], column: str, which: str = "all", select: list[str] = ()) -> Counter:
    """The counts of one column of the label file: findings by label, pitfalls, misses."""
    t = Counter()
    t["files"] = len({(r["repo"], r["path"]) for r in rows if which in ("all", r["set"])})
    t["repos"] = len({r["repo"] for r in rows if which in ("all", r["set"])})
    for row in rows:
        if which not in ("all", row["set"]) or row["code"] == "-" or not selected(row["code"], select):
            continue
        said, label = row[column], row["label"]
        if row["code"] in (NOT_DISTRIBUTED, UNREADABLE):
            t[row["code"]] += said == "yes"
            continue
        if label == "true":
            t["pitfalls"] += 1
            t["missed"] += said == "-"
            t["as_note"] += said == "note"
        if said in ("error", "warning"):
            t["flagged"] += 1
            t["flagged_true"] += label == "true"
            t["flagged_unlabelled"] += label == "UNLABELLED"
        elif said == "note":
            t["notes"] += 1
            t[f"notes_{label}"] += 1
    return t


def ratio(part: int, whole: int) -> str:
    return f"{part / whole:.2f} ({part}/{whole})" if whole else "n/a"


def summary(t: Counter) -> list[str]:
    false = t["flagged"] - t["flagged_true"] - t["flagged_unlabelled"]
    return [
        f"{t['files']} files, {t['repos']} repositories",
        f"errors and warnings: {t['flagged']} ({t['flagged_true']} true, {false} false"
        + (f", {t['flagged_unlabelled']} unlabelled)" if t["flagged_unlabelled"] else ")"),
        f"notes: {t['notes']} ({t['notes_true']} on a real pitfall, {t['notes_note']} a right caveat, "
        f"{t['notes_false']} false)",
        f"pitfalls: {t['pitfalls']}, missed: {t['missed']}, found only as a note: {t['as_note']}",
        f"precision (errors and warnings): {ratio(t['flagged_true'], t['flagged'])}",
        f"recall (errors and warnings): {ratio(t['pitfalls'] - t['missed'] - t['as_note'], t['pitfalls'])}, "
        f"with notes: {ratio(t['pitfalls'] - t['missed'], t['pitfalls'])}",
        f"files that wrap DDP called not distributed: {t[NOT_DISTRIBUTED]}, files it could not read: "
        f"{t[UNREADABLE]}",
    ]


def cell(rows: list[dict], column: str) -> str:
    """What one version said about one file, row by row: `80 DDP130 warning ✓`."""
    items = []
    for row in rows:
        said, label = row[column], row["label"]
        if row["code"] in (NOT_DISTRIBUTED, UNREADABLE):
            if said == "yes":
                items.append(
                    "called not distributed ✗" if row["code"] == NOT_DISTRIBUTED else "could not read it ✗"
                )
            continue
        if row["code"] == "-" or (said == "-" and label != "true"):
            continue
        where = f"{row['line']} {row['code']}"
        if said == "-":
            items.append(f"{where} missed")
        elif label == "true":
            items.append(f"{where} {said} ✓")
        elif label == "note" and said == "note":
            items.append(f"{where} note (caveat)")
        else:
            items.append(f"{where} {said} ✗")
    return "; ".join(items) or "nothing"


def table(rows: list[dict]) -> str:
    """The markdown docs/check.md includes: the numbers, then one line per file (two snippet
    sections)."""
    out = [
        "<!-- --8<-- [start:numbers] -->",
        "| files | version | errors and warnings (true, false) | notes | pitfalls missed | precision | "
        "recall | with notes | not distributed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for which in ("dev", "heldout", "all"):
        for column, name in VERSIONS:
            t = tally(rows, column, which)
            false = t["flagged"] - t["flagged_true"]
            out.append(f"| {which} ({t['files']} files, {t['repos']} repositories) | {name} | {t['flagged']} "
                       f"({t['flagged_true']}, {false}) | {t['notes']} | {t['missed']} of {t['pitfalls']} | "
                       f"{ratio(t['flagged_true'], t['flagged'])} | "
                       f"{ratio(t['pitfalls'] - t['missed'] - t['as_note'], t['pitfalls'])} | "
                       f"{ratio(t['pitfalls'] - t['missed'], t['pitfalls'])} | {t[NOT_DISTRIBUTED]} |")
    out += ["<!-- --8<-- [end:numbers] -->", "<!-- --8<-- [start:files] -->",
            "| set | repository | commit | path | now, in its repository | e674dd7, the file alone "
            "| first version |",
            "|---|---|---|---|---|---|---|"]
    files = {}
    for row in rows:
        files.setdefault((row["set"], row["repo"], row["commit"], row["path"]), []).append(row)
    for (part, repo, commit, path), labels in files.items():
        out.append(f"| {part} | {repo} | `{commit[:10]}` | `{path}` | {cell(labels, 'after')} | "
                   f"{cell(labels, 'alone')} | {cell(labels, 'before')} |")
    return "\n".join(out + ["<!-- --8<-- [end:files] -->"]) + "\n"


def review_table(rows: list[dict]) -> str:
    """The markdown of a review's label file: its numbers for the reviewed version and this
    one, then one line per file (two snippet sections, as table() makes)."""
    out = ["<!-- --8<-- [start:numbers] -->",
           "| version | errors and warnings (true, false) | notes (right, wrong) | pitfalls missed "
           "| precision | recall |",
           "|---|---|---|---|---|---|"]
    reviewed = REVIEWED[rows[0]["set"]]
    versions = (("before", f"{reviewed}, the review's run"),
                ("after", "now (not blind: fixed after this review)"))
    for column, name in versions:
        t = tally(rows, column)
        false = t["flagged"] - t["flagged_true"]
        notes = f"{t['notes']} ({t['notes'] - t['notes_false']}, {t['notes_false']})"
        out.append(f"| {name} | {t['flagged']} ({t['flagged_true']}, {false}) | {notes} | "
                   f"{t['missed']} of {t['pitfalls']} | "
                   f"{ratio(t['flagged_true'], t['flagged'])} | "
                   f"{ratio(t['pitfalls'] - t['missed'] - t['as_note'], t['pitfalls'])} |")
    out += ["<!-- --8<-- [end:numbers] -->", "<!-- --8<-- [start:files] -->",
            f"| repository | commit | path | now | {reviewed} |", "|---|---|---|---|---|"]
    files = {}
    for row in rows:
        files.setdefault((row["repo"], row["commit"], row["path"]), []).append(row)
    for (repo, commit, path), labels in files.items():
        out.append(f"| {repo} | `{commit[:10]}` | `{path}` | {cell(labels, 'after')} | "
                   f"{cell(labels, 'before')} |")
    return "\n".join(out + ["<!-- --8<-- [end:files] -->"]) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "corpus", nargs="?", type=Path, help="the folder of fetched scripts (owner__name/path)"
    )
    parser.add_argument("--labels", type=Path, default=LABELS, help="the label file (default: %(default)s)")
    parser.add_argument(
        "--checker", type=Path, default=CHECKER, help="the checker to run (default: %(default)s)"
    )
    parser.add_argument(
        "--set",
        choices=["dev", "heldout", "all"],
        default="all",
        help="dev: the files the checker was fixed on; heldout: the files kept aside to the end",
    )
    parser.add_argument("--select", action="append", default=[], metavar="PREFIX",
                        help="the rules whose codes start so (e.g. DDP04), as check_ddp.py's --select")
    parser.add_argument("--record", choices=["before", "alone", "after"],
                        help="write what the checker says into this column of the label file")
    parser.add_argument("--alone", action="store_true",
                        help="check each file by itself, not in the folder of its repository")
    parser.add_argument("--modules", type=Path, default=MODULES,
                        help="the modules each file imports (default: %(default)s)")
    parser.add_argument("--table", action="store_true", help="print the markdown table of the label file")
    parser.add_argument("--review-table", action="store_true",
                        help="print the markdown table of a review's label file (its two versions)")
    parser.add_argument(
        "--fetch-list", action="store_true", help="print repository, commit and path of each file"
    )
    args = parser.parse_args(argv)
    rows = read_labels(args.labels)
    if args.fetch_list:
        modules = read_labels(args.modules) if args.modules.exists() else []
        wanted = list(dict.fromkeys([(r["repo"], r["commit"], r["path"]) for r in rows]
                                    + [(m["repo"], m["commit"], m["module"]) for m in modules]))
        for repo, commit, path in wanted:
            print(f"{repo}\t{commit}\t{path}\t-> {repo.replace('/', '__')}/{path}")
        return 0
    if args.table or args.review_table:
        print((review_table if args.review_table else table)(rows), end="")
        return 0
    if args.corpus is None or not args.corpus.is_dir():
        print(
            f"check_corpus: no corpus folder{f' at {args.corpus}' if args.corpus else ''}: skipping. "
            f"Fetch the files that {args.labels.name} lists (--fetch-list) into "
            "CORPUS_DIR/<owner>__<name>/<path>, then run python tests/check_corpus.py CORPUS_DIR"
        )
        return 0
    result = measure(args.corpus, rows, load_checker(args.checker), args.set, args.select, args.alone)
    column = args.record or "after"
    changed = []
    for row in rows:
        found = result["said"].get((row["repo"], row["path"]))
        if found is None or row["code"] == "-" or not selected(row["code"], args.select):
            continue
        now = found.get((row["line"], row["code"]), "-")
        if row[column] != now:
            changed.append(row)
            if args.record:
                row[column] = now
    if args.record:
        write_labels(rows, args.labels)
        print(f"check_corpus: {args.labels.name}: {len(changed)} row(s) of column {column!r} rewritten")
    else:
        for row in changed:
            print(f"{row['repo']}\t{row['path']}\t{row['line']}\t{row['code']}\trecorded {row[column]!r}, "
                  f"now {found_for(result, row)!r}\t{row['label']}\t{row['reason']}")
    t = tally([r for r in rows if (r["repo"], r["path"]) in result["said"]], column, args.set, args.select)
    if not args.record:  # the live run: what the checker says now, as the column would hold it
        live = [dict(r, after=found_for(result, r)) for r in rows if (r["repo"], r["path"]) in result["said"]]
        t = tally(live, "after", args.set, args.select)
    print("\n".join(summary(t)))
    if not args.record and changed:
        print(
            f"{len(changed)} row(s) differ from the label file's {column!r} column: "
            f"--record {column} writes them"
        )
    if result["missing"]:
        print(f"not in the corpus folder ({len(result['missing'])}): " + ", ".join(result["missing"]))
    return 0


def found_for(result: dict, row: dict) -> str:
    return result["said"].get((row["repo"], row["path"]), {}).get((row["line"], row["code"]), "-")


if __name__ == "__main__":
    sys.exit(main())
