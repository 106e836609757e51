#!/usr/bin/env python3
"""The book's links, checked offline: every link between pages (docs/src, README.md and the
plugin READMEs into docs/src) names a file that exists and, with `#anchor`, a heading of that
page; every page is in SUMMARY.md. With the rendered book (target/book), each page's links are
also checked against the ids mdbook wrote into its HTML. External links are left alone: no
network here. Exits 1 naming each broken link as FILE:LINE: TARGET."""

import html.parser
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "docs" / "src"
BOOK = ROOT / "target" / "book"
# Markdown links and images, not inside code spans: [text](target) or [text](target "title").
LINK = re.compile(r"!?\[(?:[^\]`]|`[^`]*`)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def normalize_id(text):
    """mdbook's id for a heading: the text's letters, digits, `_` and `-`, lowercased, with
    whitespace as `-` (inline code and emphasis marks dropped first)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("`", "").replace("*", "")
    out = []
    for ch in text:
        if ch.isalnum() or ch in "_-":
            out.append(ch.lower())
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def strip_code(lines):
    """Lines with fenced code blanked out and inline code spans removed, numbered from 1."""
    fence = False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence or line.startswith("    "):
            continue
        yield number, re.sub(r"`[^`]*`", "``", line)


def anchors(page):
    ids, seen = set(), {}
    fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        m = None if fence else HEADING.match(line)
        if m:
            base = normalize_id(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            ids.add(base if n == 0 else f"{base}-{n}")
    return ids


def check_file(md, errors):
    lines = md.read_text(encoding="utf-8").splitlines()
    for number, line in strip_code(lines):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # external (https:, mailto:): not checked offline
            path, _, anchor = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            where = f"{md.relative_to(ROOT)}:{number}"
            if not dest.exists():
                errors.append(f"{where}: {target}: no such file")
                continue
            if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                errors.append(f"{where}: {target}: no heading with the id #{anchor}")


class Ids(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.hrefs = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.hrefs.append(attrs["href"])


def check_html(errors):
    """The rendered pages: every relative href names a page mdbook wrote and an id in it."""
    parsed = {}

    def ids_of(page):
        if page not in parsed:
            p = Ids()
            p.feed(page.read_text(encoding="utf-8"))
            parsed[page] = p
        return parsed[page]

    for page in sorted(BOOK.rglob("*.html")):
        if page.name in ("print.html", "404.html", "toc.html"):
            continue
        for href in ids_of(page).hrefs:
            if re.match(r"^[a-z][a-z0-9+.-]*:", href) or href.startswith("//"):
                continue
            path, _, anchor = href.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}"
            if dest.is_dir():
                dest = dest / "index.html"
            if not dest.exists():
                errors.append(f"{where}: {href}: no such page in the rendered book")
            elif anchor and dest.suffix == ".html" and anchor not in ids_of(dest).ids:
                errors.append(f"{where}: {href}: no id #{anchor} in the rendered page")


def main():
    errors = []
    pages = sorted(SRC.rglob("*.md"))
    for md in pages + [ROOT / "README.md"]:
        check_file(md, errors)
    summary = (SRC / "SUMMARY.md").read_text(encoding="utf-8")
    listed = {(SRC / t).resolve() for t in LINK.findall(summary)}
    for md in pages:
        if md.name != "SUMMARY.md" and md.resolve() not in listed:
            errors.append(f"{md.relative_to(ROOT)}: not in docs/src/SUMMARY.md")
    if BOOK.is_dir():
        check_html(errors)
    for e in errors:
        print(e, file=sys.stderr)
    checked = "docs/src, README.md" + (" and target/book" if BOOK.is_dir() else "")
    print(f"links: {len(errors)} broken in {checked}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
