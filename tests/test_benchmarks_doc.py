"""docs/benchmarks.md and its lab notes, docs/benchmarks-notes.md: every link between them and from the
other docs resolves (files, and headings as GitHub names them), every chart and results file the
summary names exists, and every recorded results file is one the summary says it shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SUMMARY, NOTES = DOCS / "benchmarks.md", DOCS / "benchmarks-notes.md"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a markdown file's headings (outside fenced code), the second of a name `-1`."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"#{1,6} (.+)", line)):
            name = slug(heading.group(1))
            count = seen.get(name, 0)
            seen[name] = count + 1
            found.add(name if count == 0 else f"{name}-{count}")
    return found


def links(path: Path) -> list[str]:
    """The relative links of a markdown file (outside fenced code)."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


def test_slugs_are_githubs() -> None:
    assert slug("Cold reads on a real engine: Trino against the origin directly") == \
        "cold-reads-on-a-real-engine-trino-against-the-origin-directly"
    assert slug("The SigV4 check of an SDK's GET, counted in instructions, 2026-12-06") == \
        "the-sigv4-check-of-an-sdks-get-counted-in-instructions-2026-12-06"
    assert slug("Workers: a node of two") == "workers-a-node-of-two"


def test_every_link_of_the_benchmark_docs_and_into_them_resolves() -> None:
    sources = [ROOT / "README.md", *sorted(DOCS.glob("*.md")), ROOT / "loadtests" / "README.md"]
    broken = []
    for source in sources:
        for target in links(source):
            file, _, anchor = target.partition("#")
            path = (source.parent / file).resolve() if file else source
            if path.parent == DOCS and path.name.startswith("benchmarks") or source in (SUMMARY, NOTES):
                if not path.exists():
                    broken.append(f"{source.name}: {target} (no such file)")
                elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                    broken.append(f"{source.name}: {target} (no such heading)")
    assert not broken, broken


def test_the_summary_opens_with_its_questions_and_links_its_notes() -> None:
    text = SUMMARY.read_text()
    sections = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert sections[:8] == ["At a glance", "Hits against nginx", "Cold reads and engines against the origin directly",
                            "Disk against memory", "Workers: a node of two", "The fleet", "PUT latency",
                            "The SigV4 check in instructions"]
    assert "(benchmarks-notes.md)" in text.split("## At a glance")[0]
    hits = text.split("## Hits against nginx")[1].split("\n## ")[0]
    assert hits.index("SDK-signed, 4 KiB") < hits.index("same bytes again")  # the SDK-signed rows lead


def test_every_recorded_results_file_is_shown_with_its_run() -> None:
    text = SUMMARY.read_text()
    for path in sorted((DOCS / "img" / "data").glob("*.json")):
        document = json.loads(path.read_text())
        assert path.name in text or path.name.rsplit("-run", 1)[0] in text, f"{path.name} is not named"
        for commit in re.findall(r"\b[0-9a-f]{7}\b", document["commit"]):
            assert f"`{commit}`" in text, f"{path.name}: its commit {commit} is not in the summary"
