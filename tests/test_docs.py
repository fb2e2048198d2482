"""README.md and docs/*.md point only at things inside the repository (a user of the package has nothing else).

Checked: every relative Markdown link (``[text](target)``, the part before ``#``), every repository path in
backticks or code blocks (``src/…``, ``tests/…``, ``docs/…``, ``benchmarks/…``, ``.ci/…``, ``*.md``), and
no path that climbs out of the repository (``../`` from the root; ``research/`` pages may link ``../``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "research").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
REPO_PATH = re.compile(r"(?<![\w./-])((?:src|tests|docs|benchmarks|\.ci)/[\w./{}*-]*[\w*}]|[\w-]+\.md)(?![\w/-])")
GENERATED = {"report.md"}  # file names the tools write, mentioned as output, not as documents
OUTSIDE = re.compile(r"(?<![\w.])\.\./[\w.-]+")


def _exists(doc: Path, target: str) -> bool:
    """Relative to the document first, then to the repository root; ``{a,b}`` and ``*`` match as a shell would."""
    if "{" in target:
        head, alternatives, tail = re.match(r"(.*?)\{([^}]*)\}(.*)", target).groups()
        return all(_exists(doc, head + alt + tail) for alt in alternatives.split(","))
    for base in (doc.parent, ROOT):
        if "*" in target:
            if any(p.resolve().is_relative_to(ROOT) for p in base.glob(target)):
                return True
        elif (base / target).exists() and (base / target).resolve().is_relative_to(ROOT):
            return True
    return False


def _leaves(doc: Path, path: str) -> bool:
    """``../x`` from ``research/`` stays inside the repository; from the root (or outside it) it leaves."""
    return not (doc.parent / path).resolve().is_relative_to(ROOT)


def problems(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    found = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # an URL or an anchor on the same page
        path = target.split("#", 1)[0]
        if not _exists(doc, path):
            found.append(f"link ({target}) does not resolve inside the repository")
    for code in CODE.findall(text):
        for path in REPO_PATH.findall(code):
            if path not in GENERATED and not _exists(doc, path):
                found.append(f"file name `{path}` is not in the repository")
        found += [f"path `{m}` leaves the repository" for m in OUTSIDE.findall(code) if _leaves(doc, m)]
    found += [f"path {m} leaves the repository" for m in OUTSIDE.findall(CODE.sub("", text)) if _leaves(doc, m)]
    return found


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_link_and_file_name_resolves_inside_the_repository(doc: Path) -> None:
    found = problems(doc)
    assert not found, f"{doc.relative_to(ROOT)}:\n" + "\n".join(found)


def test_the_check_can_fail(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("see [rules](missing.md), `trojai-reference.md` §1, `src/trojanscope/nope.py`, "
                   "`TROJANSCOPE_DATA=../shared/data` and [ok](https://example.org) `src/trojanscope/cli.py`\n")
    found = problems(doc)
    assert len(found) == 4, found
