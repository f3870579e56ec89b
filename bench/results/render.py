#!/usr/bin/env python3
"""Rewrites the generated tables of docs/PERFORMANCE.md from the result files in bench/results/.

Each result file is a CSV whose first columns are date, card and commit, preceded by comment
lines `# key: value` (title, command, note; `commit` explains the commit column where needed).
A block of the document between

    <!-- begin generated: bench/results/NAME.csv -->
    <!-- end generated -->

is that file rendered as a caption and a Markdown table. Usage:

    bench/results/render.py           rewrite the blocks in place
    bench/results/render.py --check   exit 1 (naming the blocks) if a block differs from its file,
                                      a file has no block, or a block names no file
Python 3 standard library only.
"""

import argparse
import csv
import io
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "PERFORMANCE.md"
RESULTS = ROOT / "bench" / "results"
META_KEYS = ("title", "command", "note", "commit")
BLOCK = re.compile(
    r"(<!-- begin generated: (?P<path>[^ ]+\.csv) -->\n)(?P<body>.*?)(<!-- end generated -->)",
    re.S)
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class ResultError(Exception):
    """A result file that cannot be rendered; the message names the file and what is wrong."""


def read_result(path):
    """Returns (meta, header, rows) of one result file, checked."""
    meta, lines = {}, []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("#"):
            key, sep, value = line[1:].strip().partition(":")
            if not sep or key not in META_KEYS:
                raise ResultError(f"{path.name}:{n}: comment is not '# key: value' with key in {META_KEYS}")
            meta[key] = value.strip()
        elif line.strip():
            lines.append(line)
    table = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(table) < 2:
        raise ResultError(f"{path.name}: needs a header and at least one row")
    header, rows = table[0], table[1:]
    if header[:3] != ["date", "card", "commit"]:
        raise ResultError(f"{path.name}: the first columns must be date,card,commit (got {header[:3]})")
    for n, row in enumerate(rows, 2):
        if len(row) != len(header):
            raise ResultError(f"{path.name}: row {n} has {len(row)} fields, the header {len(header)}")
        if not DATE.match(row[0]):
            raise ResultError(f"{path.name}: row {n}: date {row[0]!r} is not YYYY-MM-DD")
        if not row[1] or not row[2]:
            raise ResultError(f"{path.name}: row {n}: empty card or commit")
    if "title" not in meta or "command" not in meta:
        raise ResultError(f"{path.name}: needs '# title:' and '# command:' lines")
    return meta, header, rows


def render(path):
    """The text of one generated block (without its markers)."""
    meta, header, rows = read_result(path)
    # date, card and commit go into the caption when every row shares them, else stay columns.
    shared = [i for i in range(3) if len({r[i] for r in rows}) == 1]
    keep = [i for i in range(len(header)) if i not in shared]
    caption = []
    if 1 in shared:
        caption.append(f"**{rows[0][1]}**")
    if 0 in shared:
        caption.append(rows[0][0])
    if 2 in shared:
        caption.append(f"commit {rows[0][2]}")
    text = [", ".join(caption) + (": " if caption else "") + meta["title"] + ".",
            f"Command: `{meta['command']}`."]
    if "note" in meta:
        text.append(meta["note"])
    if "commit" in meta:
        text.append(f"Commit: {meta['commit']}.")
    out = [" ".join(text), ""]
    cell = lambda s: s.replace("|", "\\|")
    out.append("| " + " | ".join(cell(header[i]) for i in keep) + " |")
    out.append("|" + "---|" * len(keep))
    for r in rows:
        out.append("| " + " | ".join(cell(r[i]) for i in keep) + " |")
    return "\n".join(out) + "\n"


def rewrite(doc_text, results_dir, root):
    """Returns (new text, problems): every block re-rendered from its file."""
    problems, seen = [], set()

    def one(m):
        rel = m.group("path")
        path = root / rel
        seen.add(path.resolve())
        if not path.is_file():
            problems.append(f"block names {rel}, which does not exist")
            return m.group(0)
        try:
            body = render(path)
        except ResultError as e:
            problems.append(str(e))
            return m.group(0)
        return m.group(1) + body + m.group(4)

    text = BLOCK.sub(one, doc_text)
    for path in sorted(results_dir.glob("*.csv")):
        if path.resolve() not in seen:
            problems.append(f"{path.relative_to(root)} has no generated block in the document")
    return text, problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report, do not write")
    ap.add_argument("--doc", type=pathlib.Path, default=DOC)
    ap.add_argument("--results", type=pathlib.Path, default=RESULTS)
    ap.add_argument("--root", type=pathlib.Path, default=ROOT,
                    help="folder the blocks' paths are relative to")
    args = ap.parse_args(argv)
    old = args.doc.read_text(encoding="utf-8")
    new, problems = rewrite(old, args.results, args.root)
    for p in problems:
        print(f"render.py: {p}", file=sys.stderr)
    if problems:
        return 1
    if args.check:
        if new != old:
            stale = [m.group("path") for m, n in zip(BLOCK.finditer(old), BLOCK.finditer(new))
                     if m.group(0) != n.group(0)]
            print(f"render.py: {args.doc} is out of date with {', '.join(stale)}; "
                  "run bench/results/render.py", file=sys.stderr)
            return 1
        return 0
    if new != old:
        args.doc.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
