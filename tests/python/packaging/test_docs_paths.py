# SPDX-License-Identifier: Apache-2.0
"""The docs point at things that exist and read as a reference, not a log.

test_named_paths_exist: every repository path README.md and docs/*.md name in
`backticks` or as a Markdown link's target exists (relative to the repository
root; a link's target may also be relative to its document, as `img/x.png` is
in docs/). A path is a word starting with one of ROOTS (src/, include/, ...)
or a file at the root (CHANGELOG.md, VERSION ...). `:line` suffixes and
`#anchors` are stripped, `{a,b}` is expanded, and a path with `*` passes when
the glob matches something.

test_no_history_words: the docs name no issue numbers ("issue 37", "#38",
"(41)" as an issue), no sessions or numbered rounds as history ("this
session", "the fifth round", "round 3") and no commit hashes. History belongs
in CHANGELOG.md and bench/results/ (bench/results/history.md).
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Top-level folders whose paths the docs name. data/ is not among them: it is
# in .gitignore, and the docs name data/... only as where commands write the
# datasets they generate (data/d/train, data/compare/full/...).
ROOTS = ("src/", "include/", "python/", "tools/", "bindings/", "bench/", "tests/", "scripts/", "examples/",
         "docs/", "cmake/")
ROOT_FILES = {"CHANGELOG.md", "README.md", "LICENSE", "NOTICE", "VERSION", "CMakeLists.txt", "pyproject.toml",
              "requirements-test.txt"}
PATH = re.compile(r"^(?:" + "|".join(re.escape(r) for r in ROOTS) + r")[\w.*{},/+-]*$")
FENCE = re.compile(r"^\s*```")
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(path):
    """(line number, line) of a document outside fenced code blocks (commands
    there name generated files and build outputs, not the repository's)."""
    inside = False
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield n, line


def expand(word):
    """`a.{h,cc}` -> a.h, a.cc (one brace group at a time)."""
    m = re.search(r"\{([^{}]*)\}", word)
    if not m:
        return [word]
    return [w for alt in m.group(1).split(",") for w in expand(word[:m.start()] + alt + word[m.end():])]


def candidates(doc):
    """(line, as written, path) for each repository path the document names."""
    for n, line in prose(doc):
        words = [w for span in SPAN.findall(line) for w in span.split()]
        links = [t for t in LINK.findall(line) if not re.match(r"^(?:[a-z]+:|#|mailto:)", t)]
        for word in words + links:
            word = word.strip(".,;:()'\"")
            word = re.sub(r"#.*$", "", word)           # anchors
            word = re.sub(r":\d+(?:-\d+)?$", "", word)  # :line, :line-line
            if not word:
                continue
            if word in links:
                rel = (doc.parent / word).resolve()
                if rel.is_relative_to(ROOT) and not word.startswith(ROOTS):
                    yield n, word, rel
                    continue
            if word in ROOT_FILES:
                yield n, word, ROOT / word
            elif PATH.match(word):
                yield n, word, ROOT / word


def exists(path):
    text = str(path)
    if "*" in text:
        rel = path.relative_to(ROOT)
        return any(ROOT.glob(str(rel)))
    return path.exists()


def test_named_paths_exist():
    missing, seen = [], 0
    for doc in DOCS:
        for n, word, path in candidates(doc):
            for one in expand(str(path)):
                seen += 1
                if not exists(Path(one)):
                    missing.append(f"{doc.relative_to(ROOT)}:{n}: {word}")
                    break
    assert seen > 100, f"only {seen} paths found: is the extraction broken?"
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


# Words that read as the project's history rather than a reference. Each one
# is matched case-insensitively with word boundaries, so "round-robin",
# "rounded", "rounding", "rounds of 512 KiB" (reads sent in rounds) and "issues
# the copies" (the verb) pass.
HISTORY = [
    (re.compile(r"\bissues?\s+#?\d+", re.I), "an issue number"),
    (re.compile(r"(?<![\w&/])#\d+\b"), "an issue reference (#N)"),
    (re.compile(r"\b(?:this|that|the (?:last|previous|next|same|first|second))\s+session\b", re.I),
     "a session as history"),
    (re.compile(r"\bsessions?\b(?!-)", re.I), "a session"),
    (re.compile(r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last|previous|next|"
                r"this|that)\s+round\b", re.I), "a round as history"),
    (re.compile(r"\bround\s+\d+\b", re.I), "a numbered round"),
    # "(41)" after a word, as in "the feeder thread (28)"; a count after a number ("122.9k (8)") passes.
    (re.compile(r"(?<=[A-Za-z] )\(\d{2}(?:/\d{2})*\)"), "an issue reference (N)"),
]
# A commit hash: 7-12 hex digits with at least one letter and one digit, or
# 40 of them. Hex data the docs show on purpose (format magic numbers, a
# calibration fingerprint in a JSON example) is listed in HEX_DATA.
HASH = re.compile(r"(?<![\w-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)(?:[0-9a-f]{7,12}|[0-9a-f]{40})(?![\w-])")
HEX_DATA = {
    "37c3a667467294ca",  # docs/workloads.md: the calibration file's dataset fingerprint, an example value
}


def test_no_history_words():
    found = []
    for doc in DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), start=1):
            where = f"{doc.relative_to(ROOT)}:{n}"
            for pattern, what in HISTORY:
                for m in pattern.finditer(line):
                    found.append(f"{where}: {what}: {m.group(0)!r}")
            for m in HASH.finditer(line):
                if m.group(0) not in HEX_DATA:
                    found.append(f"{where}: a commit hash: {m.group(0)!r}")
    assert not found, ("history in the docs (move it to CHANGELOG.md or bench/results/, or rewrite it as "
                       "reference text):\n" + "\n".join(found))
