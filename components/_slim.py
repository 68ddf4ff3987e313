"""The runtime a compiled component carries: only what its function reaches, stripped and packed.

KFP 2.14.3's Argo compiler copies each executor's command into the Workflow several times
(pipelines/workflow_size.py), so the whole runtime in every executor made Workflows too big
for etcd. A component embeds instead:
- the kfp_ray modules its function imports, transitively (lazy imports inside functions
  included), found from the source itself, so a new import is followed with no list to keep;
- of those modules, only the parts some kept code names (every identifier, attribute and
  identifier-like string counts as a use: conservative): top-level functions, classes,
  assignments, imported names, and the methods of a class whose bases are ours; the rest
  (statements that bind nothing, dunder methods) stays;
- without comments, docstrings and argument annotations, one space per indent level; each
  dropped line left blank, so a traceback's line numbers are the source's (every module must
  compile, and the annotation and indentation steps must leave its syntax tree as it was);
- packed with code_dir's files (as code/) in one deterministic LZMA stream, base85'd.
A part reached only by a name computed at run time (getattr(module, f"...")) would be
dropped: name it in ALWAYS (tests/unit/test_slim.py imports every module a task carries and
runs ruff's undefined-name check over them).
"""

from __future__ import annotations

import ast
import base64
import functools
import inspect
import io
import lzma
import textwrap
import tokenize
from pathlib import Path

from . import slim_cache

PACKAGE = "kfp_ray"
# Names kept whatever uses them (none today: one reached only by a name computed at run time)
ALWAYS: frozenset[str] = frozenset()


_SCOPES = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
_COMPREHENSIONS = ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp


def _locals(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """The names local to `func` (Python's rule: bound anywhere in its body, not declared
    global): its parameters, assignment, loop, with, except and walrus targets, and the names
    its nested defs, classes and imports bind. A comprehension's own variables are not its."""
    a = func.args
    out = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x is not None}
    declared: set[str] = set()

    def walk(n: ast.AST, in_comprehension: bool = False) -> None:
        for child in ast.iter_child_nodes(n):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                out.add(child.name)  # its body is another scope
            elif isinstance(child, ast.Lambda):
                pass
            elif isinstance(child, ast.Global):
                declared.update(child.names)
            elif isinstance(child, ast.NamedExpr):
                out.add(child.target.id)
                walk(child.value, in_comprehension)
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store | ast.Del) and not in_comprehension:
                out.add(child.id)
            elif isinstance(child, ast.ExceptHandler) and child.name:
                out.add(child.name)
                walk(child, in_comprehension)
            elif isinstance(child, ast.alias):
                out.add((child.asname or child.name).split(".")[0])
            else:
                walk(child, in_comprehension or isinstance(child, _COMPREHENSIONS))

    for stmt in func.body if isinstance(func.body, list) else [func.body]:
        if isinstance(func, ast.Lambda):
            walk(ast.Expr(stmt))
        else:
            walk(ast.Module(body=[stmt], type_ignores=[]))
    return out - declared


def _identifiers(node: ast.AST, local: frozenset[str] = frozenset()) -> set[str]:
    """Every name `node` could use: names, attributes, imported names, identifier-like strings;
    not a name local to the function it sits in (`local`: those of the enclosing functions),
    which can never be a module's part: a local `rows` keeps no top-level rows()."""
    out = set()

    def visit(n: ast.AST, local: frozenset[str]) -> None:
        if isinstance(n, _SCOPES):
            a = n.args
            outer = [*getattr(n, "decorator_list", []), *a.defaults, *[d for d in a.kw_defaults if d is not None],
                     *[x.annotation for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                       if x is not None and x.annotation is not None], *([n.returns] if getattr(n, "returns", None) else [])]
            for x in outer:  # evaluated where the function is defined
                visit(x, local)
            inner = local | _locals(n)
            for x in n.body if isinstance(n.body, list) else [n.body]:
                visit(x, inner)
            return
        if isinstance(n, ast.Name):
            if n.id not in local:
                out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.alias):
            out.add(n.name.split(".")[-1])
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
            out.add(n.value)
        for child in ast.iter_child_nodes(n):
            visit(child, local)

    visit(node, local)
    return out


def _imported_modules(node: ast.AST, module: str, modules: set[str]) -> set[str]:
    """The runtime modules `node` imports (`module` is where it sits: relative imports)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            if n.level:  # relative to the package `module` is in (kfp_ray is one itself)
                parts = (module if module == PACKAGE else module.rsplit(".", 1)[0]).split(".")
                base = ".".join(parts[:len(parts) - n.level + 1])
                base = f"{base}.{n.module}" if n.module else base
            else:
                base = n.module or ""
            names = [base] + [f"{base}.{a.name}" for a in n.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                if ".".join(parts[:i]) in modules:
                    out.add(".".join(parts[:i]))
    return out


def _is_def(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)


def _read_modules(source_dir: Path) -> dict[str, tuple[str, ast.Module]]:
    """module name -> (source, tree) for every .py of the runtime package (no subpackages)."""
    out = {}
    for path in sorted(source_dir.glob("*.py")):
        name = PACKAGE if path.stem == "__init__" else f"{PACKAGE}.{path.stem}"
        text = path.read_text()
        out[name] = (text, ast.parse(text, filename=str(path)))
    return out


def _key(part: ast.AST) -> tuple:
    """A part's identity across parses of the same text."""
    return type(part).__name__, getattr(part, "lineno", 0), getattr(part, "col_offset", 0)


def _units(stmt: ast.stmt) -> list[tuple[set[str], ast.AST]]:
    """What a statement binds, as (names, the part that binds them): a part is kept when one
    of its names is used; no names: always kept. An import binds each of its names apart (an
    unused one is dropped, and with it, for a runtime module, maybe the module; the runtime
    imports nothing for its side effects at top level)."""
    if _is_def(stmt):
        return [({stmt.name}, stmt)]
    if isinstance(stmt, ast.ImportFrom | ast.Import) and getattr(stmt, "module", "") != "__future__":
        return [({(a.asname or a.name).split(".")[0]}, a) for a in stmt.names]
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
    if targets and all(isinstance(t, ast.Name) and not t.id.startswith("__") for t in targets):
        return [({t.id for t in targets}, stmt)]
    return [(set(), stmt)]


def _shakes_methods(cls: ast.ClassDef) -> bool:
    """A class whose unused methods may go: its bases are runtime classes or exceptions (a
    library base, io.TextIOBase say, may call a method by a name our code never writes)."""
    return all(isinstance(b, ast.Name) for b in cls.bases)


def _parts(tree: ast.Module):
    """(the class it sits in or None, names it binds, part, its statement) for every
    top-level part and every method of a class whose methods may go. A dunder method binds
    nothing (always kept with its class)."""
    for stmt in tree.body:
        for binds, part in _units(stmt):
            yield None, binds, part, stmt
        if isinstance(stmt, ast.ClassDef) and _shakes_methods(stmt):
            for inner in stmt.body:
                if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef) and not inner.name.startswith("__"):
                    yield stmt, {inner.name}, inner, inner


def _own_identifiers(part: ast.AST) -> set[str]:
    """The names a kept part uses; a class's methods that may go count apart."""
    if isinstance(part, ast.ClassDef) and _shakes_methods(part):
        skip = {id(m) for m in part.body
                if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and not m.name.startswith("__")}
        out = set()
        for child in [*part.bases, *part.keywords, *part.decorator_list, *part.body]:
            if id(child) not in skip:
                out |= _identifiers(child)
        return out
    return _identifiers(part)


def select(func_source: str, source_dir: Path) -> dict[str, set[tuple]]:
    """module -> the keys of the parts (statements, names of a runtime import, methods) it
    keeps, for the runtime that `func_source` (a component's function) reaches. A fixed
    point: a part is kept once a kept part (or the function) names what it binds; a module
    once a kept part imports it."""
    modules = _read_modules(source_dir)
    names = set(modules)
    root = ast.parse(textwrap.dedent(func_source))
    used = _identifiers(root) | ALWAYS
    todo = _imported_modules(root, "", names) | {PACKAGE}
    kept: dict[str, set[tuple]] = {}
    parts = {m: list(_parts(tree)) for m, (_, tree) in modules.items()}
    changed = True
    while changed:
        changed = False
        for module in sorted(todo):
            have = kept.setdefault(module, set())
            for parent, binds, part, stmt in parts[module]:
                if _key(part) in have or (binds and not binds & used) or (parent and _key(parent) not in have):
                    continue
                have.add(_key(part))
                used |= _own_identifiers(part)
                if isinstance(part, ast.alias):  # one name of a runtime import
                    stmt = (ast.ImportFrom(module=stmt.module, names=[part], level=stmt.level)
                            if isinstance(stmt, ast.ImportFrom) else ast.Import(names=[part]))
                    todo |= _imported_modules(stmt, module, names)
                else:
                    todo |= _imported_modules(part, module, names)
                changed = True
    return kept


def strip(text: str, keep: set[tuple] | None = None, minify: bool = True) -> str:
    """`text` without comments, docstrings and (if `keep` is given: select's keys for this
    module) the parts not kept; every removed line stays as an empty line. `minify`: also
    without argument annotations, indented by one space (not for a component's function:
    kfp reads its annotations)."""
    lines = text.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
    tree = ast.parse(text)

    def blank(first: int, last: int, keep: str = "") -> None:
        lines[first - 1:last] = [keep] + [""] * (last - first)

    def start(stmt: ast.stmt) -> int:
        return min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) or not body:
            continue
        doc = body[0]
        if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
            continue
        first, last = doc.lineno, doc.end_lineno
        head, tail = lines[first - 1][:doc.col_offset], lines[last - 1][doc.end_col_offset:]
        if head.strip() or tail.strip():  # shares a line with other code: left as it is
            continue
        blank(first, last, head + "pass" if len(body) == 1 else "")
    if keep is not None:
        by_stmt: dict[int, list] = {}
        for parent, _, part, stmt in _parts(tree):
            by_stmt.setdefault(id(stmt), [stmt, parent, []])[2].append(part)
        for stmt, parent, parts in by_stmt.values():
            alive = [p for p in parts if _key(p) in keep]
            if len(alive) == len(parts) or (parent is not None and _key(parent) not in keep):
                continue
            if alive and isinstance(stmt, ast.ImportFrom | ast.Import):  # some of its names
                partial = type(stmt)(names=alive, **({"module": stmt.module, "level": stmt.level}
                                                     if isinstance(stmt, ast.ImportFrom) else {}))
                blank(start(stmt), stmt.end_lineno, ast.unparse(partial))
            else:
                blank(start(stmt), stmt.end_lineno, " " * stmt.col_offset + "pass" if parent is not None else "")
    out = "\n".join(line.rstrip() for line in lines).rstrip("\n") + "\n"
    compile(out, "<stripped>", "exec")  # a stripped module that does not parse is a build error
    return reindent(_drop_annotations(out)) if minify else out


def _same_tree(before: str, after: str, fix=lambda tree: tree) -> str:
    """`after`, once sure it parses to `before`'s tree (after `fix`): else a build error."""
    if ast.dump(fix(ast.parse(before))) != ast.dump(ast.parse(after)):
        raise RuntimeError("components/_slim.py changed what a runtime module does: fix it")
    return after


def _drop_annotations(text: str) -> str:
    """Without the annotations of function arguments and returns (never evaluated: every
    module has `from __future__ import annotations`, and nothing reads them), where an
    annotation sits on one line; dataclass fields keep theirs."""
    lines = text.split("\n")
    cuts: list[tuple[int, int, int]] = []  # (line, from column, to column)
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *[x for x in (a.vararg, a.kwarg) if x]]:
            ann = arg.annotation
            if ann is not None and ann.lineno == ann.end_lineno == arg.lineno:
                cuts.append((arg.lineno, arg.col_offset + len(arg.arg), ann.end_col_offset))
        ann = node.returns
        if ann is not None and ann.lineno == ann.end_lineno:
            line = lines[ann.lineno - 1]
            arrow = line.rfind("->", 0, ann.col_offset)
            if arrow >= 0 and not line[arrow + 2:ann.col_offset].strip():
                cuts.append((ann.lineno, len(line[:arrow].rstrip()), ann.end_col_offset))
    for row, start, end in sorted(cuts, reverse=True):
        lines[row - 1] = lines[row - 1][:start] + lines[row - 1][end:]

    def unannotated(tree):
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                args = [*a.posonlyargs, *a.args, *a.kwonlyargs, *[x for x in (a.vararg, a.kwarg) if x]]
                for arg in args:
                    if arg.annotation is not None and arg.annotation.lineno == arg.annotation.end_lineno == arg.lineno:
                        arg.annotation = None
                if node.returns is not None and (node.returns.lineno, node.returns.end_lineno) in {
                        (r, r) for r, _, _ in cuts}:
                    node.returns = None
        return tree

    return _same_tree(text, "\n".join(lines), unannotated)


def reindent(text: str) -> str:
    """One space per block level; continuation lines (in brackets) unindented; the lines of a
    multi-line string as they are."""
    lines = text.split("\n")
    verbatim: set[int] = set()  # 0-based lines inside a multi-line token, after its first
    starts: dict[int, int] = {}  # 0-based line -> block depth, for lines that start a statement
    depth, at_start = 0, True
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.INDENT:
            depth += 1
        elif tok.type == tokenize.DEDENT:
            depth -= 1
        elif tok.type == tokenize.NEWLINE:
            at_start = True
        elif tok.type not in (tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER):
            verbatim.update(range(tok.start[0], tok.end[0]))
            if at_start:
                starts[tok.start[0] - 1] = depth
                at_start = False
    out = [line if i in verbatim else " " * starts[i] + line.lstrip() if i in starts else line.lstrip()
           for i, line in enumerate(lines)]
    return _same_tree(text, "\n".join(out))


def compact(text: str) -> str:
    """The program's form of a component's function (after strip and reindent): no blank
    lines, each statement's continuation lines joined to its first, and "..." strings as
    '...' where that needs no escape. What it saves is counted in the executor's ARGO_TEMPLATE,
    where the program is JSON inside JSON, twice: a newline costs 6 bytes there, a double
    quote 8, a single quote 2. The syntax tree stays the same (a build error otherwise)."""
    toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    lines = text.split("\n")
    # quotes first: a token's columns are the line's until the line is joined
    for tok in reversed(toks):
        t, (row, col), (end_row, end_col) = tok.string, tok.start, tok.end
        if tok.type == tokenize.STRING and row == end_row and t[:1] == '"' and not t.startswith('"""') \
                and "'" not in t and "\\" not in t:
            line = lines[row - 1]
            lines[row - 1] = line[:col] + "'" + t[1:-1] + "'" + line[end_col:]
    joined: list[str] = []
    depth = 0
    for tok in toks:  # continuation lines (inside brackets) go onto the line before
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        elif tok.type in (tokenize.NL, tokenize.NEWLINE) and depth > 0:
            joined.append(tok.start[0])
    for row in reversed(joined):  # 1-based: line `row` ends inside brackets
        lines[row - 1] = lines[row - 1].rstrip() + " " + lines[row].lstrip()
        del lines[row]
    out = "\n".join(line for line in lines if line.strip()) + "\n"
    return _same_tree(text, out)


def function_source(func) -> str:
    return textwrap.dedent(inspect.getsource(func))


@functools.cache
def runtime_files(func, source_dir: Path) -> dict[str, str]:
    """Archive path -> text of the slim runtime `func` needs. Cached in the process (a
    component's variants, `*_with_code`, wrap the same function, and a compile builds each
    several times) and on disk (slim_cache): stripping costs ~0.5 s of CPU a component, paid
    by every process that imports a pipeline (each local run, each task of the suite's)."""
    func_source = function_source(func)
    return slim_cache.cached(func_source, source_dir, lambda: _runtime_files(func_source, source_dir))


def _runtime_files(func_source: str, source_dir: Path) -> dict[str, str]:
    out = {}
    for module, parts in select(func_source, source_dir).items():
        stem = "__init__" if module == PACKAGE else module.rsplit(".", 1)[1]
        out[f"{PACKAGE}/{stem}.py"] = strip((source_dir / f"{stem}.py").read_text(), parts)
    return out


def pack(files: dict[str, str], code_dir: str | Path | None = None, code_files=None, strip_code: bool = False) -> str:
    """base64 of the xz-compressed `files` (and code_dir's files as code/...: all of them, or
    those whose path relative to code_dir is in `code_files`; with `strip_code`, its .py files
    without comments and docstrings, each line where it was), each as its
    path, octal mode and length on a line each, then its bytes: the same bytes for the same
    input (a tar's 512-byte headers cost more than some modules)."""
    entries = [(name, 0o644, text.encode()) for name, text in sorted(files.items())]
    if code_dir is not None:
        base = Path(code_dir)
        for path in sorted(base.rglob("*")):
            if "__pycache__" in path.parts or path.suffix == ".pyc" or not path.is_file():
                continue
            if code_files is not None and path.relative_to(base).as_posix() not in code_files:
                continue
            mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            data = path.read_bytes()
            if strip_code and path.suffix == ".py":
                data = strip_job(data.decode()).encode()
            entries.append((f"code/{path.relative_to(base).as_posix()}", mode, data))
    raw = b"".join(f"{name}\n{mode:o}\n{len(data)}\n".encode() + data for name, mode, data in entries)
    packed = lzma.compress(raw, format=lzma.FORMAT_RAW, filters=[FILTER])
    return base64.b85encode(packed).decode("ascii").translate(TO_SAFE)


def strip_job(text: str) -> str:
    """A job's source without comments and docstrings (a #! line kept), each line where it was:
    a traceback's line numbers are the source's."""
    first, _, rest = text.partition("\n")
    if first.startswith("#!"):
        return first + "\n" + strip("\n" + rest, minify=False)[1:]
    return strip(text, minify=False)


# Base85 (a quarter smaller than base64) with the five of its characters that cost in the
# Workflow swapped for five it does not use: Go's JSON writes & < > as \u0026..., and {{ reads
# as an Argo template tag. None of the five is a quote or a backslash.
UNSAFE, SAFE = "&<>{}", ",./:["
TO_SAFE, FROM_SAFE = str.maketrans(UNSAFE, SAFE), str.maketrans(SAFE, UNSAFE)


# LZMA2 tuned for text (no position bits), 1 MiB of dictionary (what the loader gives to unpack)
FILTER = {"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 1 << 20, "lc": 3, "lp": 0, "pb": 0}
DECODE = '[{"id":_l.FILTER_LZMA2,"dict_size":1048576}]'  # FILTER's, as the loader writes it
# What runs before the component's function is defined (kfp puts it after its imports): the
# files unpacked into a temporary folder first on sys.path, as kfp's own embedded_artifact_path
# does (kfp_ray/ and code/ are found there). Terse: it is copied five times per task into the
# Workflow. Its names start with _ (kfp's `from kfp.dsl import *` binds none such).
LOADER = """
import base64 as _b,lzma as _l,os as _o,sys as _s,tempfile as _t
_k=_t.TemporaryDirectory();__KFP_EMBEDDED_ASSET_DIR=_k.name
_d=_l.decompress(_b.b85decode(__KFP_RAY_RUNTIME.translate(str.maketrans("SAFE","UNSAFE"))),_l.FORMAT_RAW,filters=DECODE)
while _d:
 _p,_m,_n,_d=_d.split(b"\\n",3);_f,_n=_o.path.join(_k.name,_p.decode()),int(_n)
 _o.makedirs(_o.path.dirname(_f),exist_ok=True)
 with open(_f,"wb") as _h:_h.write(_d[:_n])
 _o.chmod(_f,int(_m,8));_d=_d[_n:]
_s.path.insert(0,_k.name)
""".replace("DECODE", DECODE).replace('"SAFE","UNSAFE"', f'"{SAFE}","{UNSAFE}"')


def loader(payload: str) -> str:
    """Source that unpacks `payload` (pack's) and puts it first on sys.path."""
    return f"__KFP_RAY_RUNTIME = '{payload}'\n{LOADER}"


def unpack(payload: str) -> dict[str, bytes]:
    """Path -> bytes of what pack() packed (as the loader reads it: for tests and inspection)."""
    data = lzma.decompress(base64.b85decode(payload.translate(FROM_SAFE)), lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA2,
                                                                                  "dict_size": 1 << 20}])
    out = {}
    while data:
        name, _mode, size, data = data.split(b"\n", 3)
        out[name.decode()], data = data[:int(size)], data[int(size):]
    return out


def payload_of(program: str) -> str | None:
    """The packed runtime in a task's program (the command's last element), if any."""
    head = "__KFP_RAY_RUNTIME = '"
    start = program.find(head)
    return None if start < 0 else program[start + len(head):program.index("'", start + len(head))]
