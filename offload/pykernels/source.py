"""A Python kernel's source read as offload runs it: its parameters, its top-level
statements sorted into prange loops, code that only sets local names, and the rest, with
each construct the GPU cannot run named with its source line."""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Any

from ..errors import ErrorCode, OffloadError

#: offload's names a kernel calls, by what they become (see `Names`)
MARKERS = ("prange", "atomic_add", "atomic_min", "atomic_max")
# calls that leave memory alone, allowed in code that only sets locals
PURE_CALLS = frozenset({"abs", "min", "max", "int", "float", "bool", "len", "round", "range"})
PURE_MODULES = frozenset({"math", "numpy", "np"})


def kernel_error(where: str, what: str, fix: str = "") -> OffloadError:
    """INVALID_ARGUMENT for a kernel's source, at `where` (file:line)."""
    return OffloadError(ErrorCode.INVALID_ARGUMENT,
                        f"{where}: {what}" + (f"; {fix}" if fix else ""))


@dataclass
class Loop:
    """One top-level `for i in prange(...)`: its index name, range arguments and body,
    and the scalars it reduces (name -> '+' or 'max' / 'min')."""

    node: ast.For
    index: str
    bounds: list[ast.expr]
    reductions: dict[str, str] = field(default_factory=dict)


@dataclass
class Source:
    """A kernel function's parsed source."""

    name: str
    params: list[str]
    body: list[ast.stmt]
    kinds: list[str]                 # per statement: 'loop', 'local' or 'serial'
    loops: dict[int, Loop]           # statement index -> its loop
    filename: str
    globals: dict[str, Any]
    markers: dict[str, str]          # a name the body calls -> the marker it stands for
    text: str                        # the dedented source (part of every cache key)

    def where(self, node: ast.AST) -> str:
        return f"{self.filename}:{getattr(node, 'lineno', '?')}"


def read(fn: Any) -> Source:
    """The source of `fn`, a plain Python function of positional parameters."""
    if not inspect.isfunction(fn):
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"offload.kernel: expected a Python function, got "
                           f"{type(fn).__name__}")
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as exc:
        raise OffloadError(ErrorCode.INVALID_ARGUMENT,
                           f"offload.kernel: the source of '{fn.__name__}' cannot be read "
                           f"({exc}); define kernels in a file, not at an interactive "
                           f"prompt") from None
    text = textwrap.dedent("".join(lines))
    tree = ast.parse(text)
    ast.increment_lineno(tree, first - 1)
    node = tree.body[0]
    filename = fn.__code__.co_filename
    if not isinstance(node, ast.FunctionDef):
        raise kernel_error(f"{filename}:{first}", "offload.kernel takes a def, not a lambda")
    node.decorator_list = []
    a = node.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
        raise kernel_error(f"{filename}:{node.lineno}",
                           f"kernel '{node.name}' may take only plain positional parameters "
                           f"(no defaults, *args, keyword-only or **kwargs)")
    src = Source(node.name, [p.arg for p in a.args], node.body, [], {}, filename,
                 fn.__globals__, _markers(fn), text)
    _check(src)
    for i, st in enumerate(src.body):
        loop = _loop(src, st)
        if loop is not None:
            src.loops[i] = loop
            src.kinds.append("loop")
        else:
            src.kinds.append("local" if _only_locals(src, st) else "serial")
    return src


def _markers(fn: Any) -> dict[str, str]:
    """Names (`prange`, `offload.prange`, an alias) the function's globals bind to
    offload's markers."""
    from . import markers
    out: dict[str, str] = {}
    for name, value in fn.__globals__.items():
        for m in MARKERS:
            if value is getattr(markers, m):
                out[name] = m
        if getattr(value, "__name__", None) in ("offload", "offload.pykernels") or \
                value is markers:
            for m in MARKERS:
                out[f"{name}.{m}"] = m
    return out


def marker_of(src: Source, call: ast.AST) -> str | None:
    """Which marker a call names, if any."""
    if not isinstance(call, ast.Call):
        return None
    f = call.func
    if isinstance(f, ast.Name):
        return src.markers.get(f.id)
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return src.markers.get(f"{f.value.id}.{f.attr}")
    return None


_REFUSED = {ast.Yield: "yield", ast.YieldFrom: "yield from", ast.Await: "await",
            ast.Try: "try", ast.With: "with", ast.Lambda: "lambda", ast.Global: "global",
            ast.Nonlocal: "nonlocal", ast.ClassDef: "a class", ast.AsyncFor: "async for",
            ast.FunctionDef: "a nested def", ast.Delete: "del"}


def _check(src: Source) -> None:
    """Constructs no kernel may hold, named with their line."""
    for st in src.body:
        for node in ast.walk(st):
            for kind, what in _REFUSED.items():
                if isinstance(node, kind):
                    raise kernel_error(src.where(node), f"kernel '{src.name}' uses {what}, "
                                       f"which offload kernels do not support",
                                       "compute it outside the kernel")
            if isinstance(node, ast.Name) and node.id.startswith("__"):
                raise kernel_error(src.where(node), f"the name '{node.id}' starts with two "
                                   f"underscores, which offload keeps for the code it "
                                   f"writes into kernels", "rename it")
            if isinstance(node, ast.Return) and node.value is not None:
                raise kernel_error(src.where(node), f"kernel '{src.name}' returns a value",
                                   "write results into an array argument")
            if marker_of(src, node) == "prange" and not _is_loop_iter(st, node):
                if isinstance(st, ast.For) and marker_of(src, st.iter) == "prange":
                    raise kernel_error(src.where(node), "a prange loop inside another",
                                       "nest a plain range loop inside the prange loop")
                raise kernel_error(src.where(node), "prange is used other than as the "
                                   "range of a top-level for loop",
                                   "write `for i in offload.prange(n):` at the kernel's "
                                   "top level")


def _is_loop_iter(st: ast.stmt, node: ast.AST) -> bool:
    return isinstance(st, ast.For) and st.iter is node


def _loop(src: Source, st: ast.stmt) -> Loop | None:
    if not (isinstance(st, ast.For) and marker_of(src, st.iter) == "prange"):
        return None
    call = st.iter
    assert isinstance(call, ast.Call)
    if not isinstance(st.target, ast.Name) or st.orelse or call.keywords or \
            not 1 <= len(call.args) <= 3:
        raise kernel_error(src.where(st), "a prange loop is `for i in prange([start,] stop"
                           "[, step]):` with one index name and no else")
    for node in ast.walk(st):
        if isinstance(node, (ast.Break, ast.Return)):
            raise kernel_error(src.where(node), f"a prange loop's body cannot "
                               f"{'break' if isinstance(node, ast.Break) else 'return'}: "
                               f"its iterations run at once", "use an if around the work")
        if isinstance(node, ast.For) and node is not st and marker_of(src, node.iter):
            raise kernel_error(src.where(node), "a prange loop inside another",
                               "nest a plain range loop inside the prange loop")
    return Loop(st, st.target.id, list(call.args), _reductions(st))


def _reductions(st: ast.For) -> dict[str, str]:
    """Scalars the loop body reduces: `s += x` / `s -= x` ('+'), `s = max(s, x)`,
    `s = min(s, x)`, where the body sets `s` no other way (else it is the body's own)."""
    out: dict[str, str] = {}
    own = set()
    for node in ast.walk(st):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.For | ast.NamedExpr):
            value = getattr(node, "value", None)
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
                    value.func.id in ("max", "min"):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            own |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    for node in ast.walk(st):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and \
                isinstance(node.op, (ast.Add, ast.Sub)):
            out[node.target.id] = "+"
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call) and \
                isinstance(node.value.func, ast.Name) and node.value.func.id in ("max", "min") \
                and len(node.value.args) == 2 and any(
                    isinstance(a, ast.Name) and a.id == node.targets[0].id
                    for a in node.value.args):
            out[node.targets[0].id] = node.value.func.id
    return {r: op for r, op in out.items() if r not in own}


def _only_locals(src: Source, st: ast.stmt) -> bool:
    """Whether a top-level statement only sets local names from parameters, locals,
    array shapes and pure calls (no array element read or written): the GPU may run it
    on every thread of every launch."""
    if not isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Pass, ast.Expr)):
        return False
    if isinstance(st, ast.Expr):
        return isinstance(st.value, ast.Constant)          # a docstring
    if isinstance(st, ast.Pass):
        return True
    targets = st.targets if isinstance(st, ast.Assign) else [st.target]
    for t in targets:
        for n in ast.walk(t):
            if isinstance(n, (ast.Subscript, ast.Attribute, ast.Starred)):
                return False
    value = st.value
    if value is None:
        return True
    for n in ast.walk(value):
        if isinstance(n, ast.Subscript):
            base = n.value
            if not (isinstance(base, ast.Attribute) and base.attr in ("shape", "strides")):
                return False
        elif isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Name) and f.id in PURE_CALLS:
                continue
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and \
                    f.value.id in PURE_MODULES:
                continue
            return False
        elif isinstance(n, (ast.NamedExpr, ast.Await, ast.Yield)):
            return False
    return True


def names_stored(node: ast.AST) -> set[str]:
    """Local names a statement (or expression) assigns."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Store)}


def names_read(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}
