"""Every Python cross-reference the docs and the docstrings make resolves to real code.

Collected: the roles ``:mod:``, ``:class:``, ``:func:``, ``:meth:``, ``:exc:`` and ``:data:``,
in the reStructuredText form (``:mod:`x.y```, ``:py:mod:`x.y```) and the MyST form
({py:mod}`x.y`), with an optional leading ``~`` and an optional ``title <target>``, from the
tracked Markdown pages under ``docs/`` (the generated ``protocols/`` and ``conformance/cases/``
are not tracked) and from every docstring (module, class, function) under ``src/queuewire``.

The rule a reference resolves by (Sphinx's python domain, made strict):

* A dotted target with leading dots (``.engine.Wait``, ``..codecs``) is relative as a Python
  import is: one dot is the package the module is in (a package's ``__init__`` is in itself),
  each further dot one package up.
* Any other target is tried, first match wins: inside the class whose docstring (or whose
  method's docstring) holds it, ``module.Class.target``; in the module, ``module.target``;
  in the module's package and each package above it, ``package.target``; then as written
  (absolute, also for the standard library and third-party packages such as
  ``asyncio.Protocol``). A docs page has no current module: only the last.
* A candidate resolves when it is an importable module, or an attribute path on the longest
  importable module prefix of it (``queuewire.judge.verdicts.Verdict.FAIL``); a name a class
  declares only as an annotation (a dataclass field) counts as an attribute.

All unresolved references are reported in one failure, each with its file and line.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PACKAGE = SRC / "queuewire"
DOCS = ROOT / "docs"

ROLES = "mod|class|func|meth|exc|data"

#: (file, reference as written): broken references in files other work has open, left out of
#: the failure; fix the docstring, then drop the entry (an entry that resolves is ignored).
KNOWN_BROKEN: set[tuple[str, str]] = set()  # (file, reference) known not to resolve: none
#: :mod:`x`, :py:mod:`x` (reST) and {py:mod}`x` (MyST); the target is group 2 or 4
REF = re.compile(rf":(?:py:)?({ROLES}):`([^`]+)`|\{{py:({ROLES})\}}`([^`]+)`")


@dataclass(frozen=True)
class Ref:
    where: str          # file:line
    role: str
    text: str           # as written
    module: str | None  # the module the reference sits in (None: a docs page)
    cls: str | None     # the class whose docstring (or method docstring) holds it
    is_package: bool = False


def target_of(text: str) -> str:
    """The dotted name a role's text points at: ``title <target>`` gives target, ``~`` and
    a trailing ``()`` are dropped."""
    m = re.search(r"<([^<>]+)>\s*$", text)
    target = m.group(1) if m else text
    target = target.strip().lstrip("~")
    return target.removesuffix("()")


def refs_in(text: str, where_file: str, first_line: int, module: str | None,
            cls: str | None = None, is_package: bool = False) -> list[Ref]:
    out = []
    for m in REF.finditer(text):
        role = m.group(1) or m.group(3)
        body = m.group(2) if m.group(1) else m.group(4)
        line = first_line + text.count("\n", 0, m.start())
        out.append(Ref(f"{where_file}:{line}", role, body, module, cls, is_package))
    return out


def _docstring_nodes(tree: ast.Module):
    """(node, enclosing class name) for the module and every class and function in it."""
    yield tree, None

    def walk(node, cls):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield child, child.name if cls is None else f"{cls}.{child.name}"
                yield from walk(child, child.name if cls is None else f"{cls}.{child.name}")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield child, cls
                yield from walk(child, None)  # nested functions: no class context

    yield from walk(tree, None)


def source_refs() -> list[Ref]:
    refs = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(SRC).with_suffix("")
        parts = list(rel.parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        module = ".".join(parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node, cls in _docstring_nodes(tree):
            body = getattr(node, "body", None)
            if not body or not isinstance(body[0], ast.Expr):
                continue
            const = body[0].value
            if not (isinstance(const, ast.Constant) and isinstance(const.value, str)):
                continue
            # the raw source of the literal, so line numbers are the file's own
            raw = ast.get_source_segment(path.read_text(encoding="utf-8"), const) or const.value
            refs += refs_in(raw, path.relative_to(ROOT).as_posix(), const.lineno, module, cls,
                            is_package)
    return refs


def docs_pages() -> list[Path]:
    # tracked and new (not ignored) pages: the generated ones are git-ignored
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "docs"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout.split()
    pages = [ROOT / p for p in listed if p.endswith(".md")]
    if not pages:  # not a git checkout: every page but the generated ones and the build
        skip = ("_build", "_vendor", "node_modules", "protocols")
        pages = [p for p in DOCS.rglob("*.md")
                 if not any(s in p.relative_to(DOCS).parts for s in skip)
                 and "conformance/cases" not in p.relative_to(DOCS).as_posix()]
    return sorted(p for p in pages if p.is_file())


def docs_refs() -> list[Ref]:
    refs = []
    for path in docs_pages():
        refs += refs_in(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix(), 1,
                        None)
    return refs


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _resolves(name: str) -> bool:
    """An importable module, or an attribute path on the longest importable prefix."""
    if not name or name.startswith(".") or ".." in name:
        return False
    if _is_module(name):
        return True
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:cut])
        if not _is_module(prefix):
            continue
        try:
            obj = importlib.import_module(prefix)
        except ImportError:
            return False
        for attr in parts[cut:]:
            if hasattr(obj, attr):
                obj = getattr(obj, attr)
            elif attr in getattr(obj, "__annotations__", {}) or \
                    attr in getattr(obj, "__dataclass_fields__", {}):
                obj = None  # a declared field: nothing further to look into
            else:
                return False
        return True
    return False


def candidates(ref: Ref) -> list[str]:
    target = target_of(ref.text)
    if ref.module is None:
        return [target]
    package = ref.module if ref.is_package else ref.module.rpartition(".")[0]
    if target.startswith("."):
        dots = len(target) - len(target.lstrip("."))
        base = package.split(".")
        if dots - 1 >= len(base):
            return []
        base = base[:len(base) - (dots - 1)]
        rest = target[dots:]
        return [".".join(base + ([rest] if rest else []))]
    out = []
    if ref.cls:
        out.append(f"{ref.module}.{ref.cls}.{target}")
    out.append(f"{ref.module}.{target}")
    parts = package.split(".")
    while parts:
        out.append(".".join(parts + [target]))
        parts.pop()
    out.append(target)
    return out


def resolve(ref: Ref) -> bool:
    return any(_resolves(c) for c in candidates(ref))


def all_refs() -> list[Ref]:
    return docs_refs() + source_refs()


def test_the_collector_sees_both_forms():
    text = (":mod:`queuewire.judge` :py:class:`~queuewire.judge.Finding` "
            "{py:func}`verdict <queuewire.judge.verdict_for>` {py:meth}`~x.Y.z()`")
    got = [target_of(r.text) for r in refs_in(text, "t", 1, None)]
    assert got == ["queuewire.judge", "queuewire.judge.Finding", "queuewire.judge.verdict_for",
                   "x.Y.z"]


def test_the_rule_resolves_relative_and_local_names():
    judge = Ref("t:1", "func", "verdict_for", "queuewire.judge.verdicts", None)
    assert resolve(judge)
    up = Ref("t:1", "mod", "..codecs", "queuewire.traffic.bunqueue", None)
    assert candidates(up) == ["queuewire.codecs"] and resolve(up)
    own = Ref("t:1", "mod", ".model", "queuewire.conformance", None, is_package=True)
    assert candidates(own) == ["queuewire.conformance.model"] and resolve(own)
    assert resolve(Ref("t:1", "class", "asyncio.Protocol", None, None))
    assert not resolve(Ref("t:1", "func", "no_such_function", "queuewire.judge.verdicts", None))


def test_every_reference_resolves():
    refs = all_refs()
    assert len(refs) > 100, "the collector found almost nothing: is the pattern right?"
    assert any(r.where.startswith("docs/architecture.md") for r in refs)
    broken = [r for r in refs if not resolve(r)]
    broken = [r for r in broken if (r.where.rsplit(":", 1)[0], r.text) not in KNOWN_BROKEN]
    assert not broken, f"{len(broken)} of {len(refs)} references do not resolve:\n" + "\n".join(
        f"  {r.where}: :{r.role}:`{r.text}` (tried {', '.join(candidates(r)) or 'nothing'})"
        for r in broken)
