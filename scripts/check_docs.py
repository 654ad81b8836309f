#!/usr/bin/env python3
"""Checks the guide and the README without building anything: every relative link leads to a
file that exists and, with a #fragment, to a heading in it; every `{{#include}}` to a file,
and with an :anchor to an ANCHOR block in it; every page of docs/ is in SUMMARY.md; every
alert rule has its runbook; the README stays an entry page."""

import functools
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README_MAX_LINES = 200

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
INCLUDE = re.compile(r"\{\{#include ([^}:\s]+)(?::([\w-]+))?\}\}")


def slug(heading: str) -> str:
    """The anchor mdBook and GitHub give a heading."""
    text = re.sub(r"[`*_]|\[|\]\([^)]*\)", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose(path: Path):
    """The lines of a Markdown file outside code blocks, with their numbers."""
    inside = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line.strip()):
            inside = not inside
            continue
        if not inside:
            yield number, line


@functools.lru_cache(maxsize=None)
def anchors(path: Path) -> frozenset:
    return frozenset(slug(line.lstrip("#")) for _, line in prose(path) if line.startswith("#"))


def check_links(path: Path, problems: list) -> None:
    for number, line in prose(path):
        for match in LINK.finditer(line):
            target = match.group(1) or match.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto:
            file_part, _, fragment = target.partition("#")
            destination = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)}:{number}"
            if not destination.exists():
                problems.append(f"{where}: {target} leads nowhere")
            elif fragment and destination.suffix == ".md":
                if fragment not in anchors(destination):
                    problems.append(f"{where}: {target} names no heading of {file_part or path.name}")


def check_includes(path: Path, problems: list) -> None:
    """mdBook's includes, code blocks included: the file, and the anchor's block in it."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for match in INCLUDE.finditer(line):
            included, anchor = match.group(1), match.group(2)
            destination = (path.parent / included).resolve()
            where = f"{path.relative_to(ROOT)}:{number}"
            if not destination.exists():
                problems.append(f"{where}: {included} is included but does not exist")
            elif anchor and not re.search(
                rf"ANCHOR: {anchor}\b[\s\S]*ANCHOR_END: {anchor}\b", destination.read_text()
            ):
                problems.append(f"{where}: {included} has no ANCHOR block named {anchor}")


def main() -> int:
    problems: list = []
    pages = [ROOT / "README.md", ROOT / "deploy" / "README.md"] + sorted(DOCS.glob("*.md"))
    for page in pages:
        check_links(page, problems)
        check_includes(page, problems)

    summary = (DOCS / "SUMMARY.md").read_text()
    listed = set(re.findall(r"\]\(([^)]+\.md)\)", summary))
    for page in sorted(DOCS.glob("*.md")):
        if page.name != "SUMMARY.md" and page.name not in listed:
            problems.append(f"docs/{page.name} is not in docs/SUMMARY.md")

    alerts = set(re.findall(r"- alert: (\w+)", (ROOT / "deploy/prometheus/alerts.yml").read_text()))
    runbooks = {line[3:].strip() for _, line in prose(DOCS / "runbooks.md") if line.startswith("## ")}
    for alert in sorted(alerts - runbooks):
        problems.append(f"docs/runbooks.md has no section for the alert {alert}")
    for heading in sorted(runbooks - alerts):
        problems.append(f"docs/runbooks.md has a section for {heading}, which no alert rule raises")

    lines = len((ROOT / "README.md").read_text().splitlines())
    if lines > README_MAX_LINES:
        problems.append(f"README.md has {lines} lines; keep it an entry page of at most {README_MAX_LINES}")

    for problem in problems:
        print(f"check_docs: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"check_docs: {len(pages)} pages, links, runbooks and the README's length are in order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
