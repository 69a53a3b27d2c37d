"""A Python kernel's statements rewritten for each target: for the host, prange as numba's
and the atomics as host intrinsics; for a GPU, one device function whose phases are its
prange loops (a grid-stride loop over the launch's threads, scalars reduced across them)
and the code between them (run by one thread), each launched in turn."""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from typing import Any

from .indices import CAST, Indices, least
from .source import Source, kernel_error, marker_of, names_read, names_stored


class _Markers(Indices):
    """Calls of offload's markers as calls of the target's versions: `__offload_<m>` on
    the host, numba-cuda's `__cuda.atomic.<op>` on a GPU; subscripts known to be >= 0 cast
    (`known`: the variables of loops whose bodies are visited without their `for`)."""

    def __init__(self, src: Source, gpu: bool = False, known: dict[str, int] | None = None):
        super().__init__(src, known)
        self.gpu = gpu

    def visit_Call(self, node: ast.Call) -> Any:
        self.generic_visit(node)
        m = marker_of(self.src, node)
        if m is not None:
            if self.gpu and m.startswith("atomic_"):
                f: ast.expr = ast.Attribute(ast.Attribute(ast.Name("__cuda", ast.Load()),
                                                          "atomic", ast.Load()),
                                            m.removeprefix("atomic_"), ast.Load())
            else:
                f = ast.Name(f"__offload_{m}", ast.Load())
            node.func = ast.copy_location(f, node.func)
            ast.fix_missing_locations(node)
        return node


def _function(name: str, params: list[str], body: list[ast.stmt], line: int) -> ast.Module:
    fn = ast.FunctionDef(name=name, args=ast.arguments(
        posonlyargs=[], args=[ast.arg(p) for p in params], kwonlyargs=[], kw_defaults=[],
        defaults=[]), body=body or [ast.Pass()], decorator_list=[], returns=None)
    if hasattr(ast, "TypeVar"):               # Python 3.12+: the field must be there
        setattr(fn, "type_params", [])  # noqa: B010
    fn.lineno = line
    fn.end_lineno = max([line, *(getattr(n, "end_lineno", None) or line
                                 for st in fn.body for n in ast.walk(st))])
    fn.col_offset = fn.end_col_offset = 0
    mod = ast.Module(body=[fn], type_ignores=[])
    return ast.fix_missing_locations(mod)


def host_module(src: Source, name: str) -> ast.Module:
    """The kernel as a function `name` for numba's CPU target (a prange with a step: over
    its trip count, as numba takes only a constant step)."""
    body: list[ast.stmt] = []
    for i, st in enumerate(src.body):
        st = _Markers(src).visit(copy.deepcopy(st))
        loop = src.loops.get(i)
        if loop is not None and len(loop.bounds) == 3:
            b = [ast.unparse(x) for x in loop.bounds]
            n = f"__b{i}"
            body += _parse(f"{n}_start, {n}_stop, {n}_step = {b[0]}, {b[1]}, {b[2]}\n"
                           f"{n}_trip = len(range({n}_start, {n}_stop, {n}_step))", st)
            assert isinstance(st, ast.For) and isinstance(st.iter, ast.Call)
            st.iter.args = [ast.Name(f"{n}_trip", ast.Load())]
            st.body = _parse(f"{loop.index} = {n}_start + {n}_k * {n}_step", st) + st.body
            st.target = ast.Name(f"{n}_k", ast.Store())
        body.append(st)
    return _function(name, src.params, body, src.body[0].lineno)


def host_names() -> dict[str, Any]:
    """The host versions of the markers."""
    import numba

    from .atomics import host_atomics
    names = {"__offload_prange": numba.prange, CAST: numba.types.uint64}
    names.update({f"__offload_{k}": v for k, v in host_atomics().items()})
    return names


@dataclass(frozen=True)
class Phase:
    """One launch of a GPU kernel: a prange loop over every thread, or code one thread
    runs."""

    single: bool
    line: int


def cuda_function(src: Source, name: str, reductions: dict[str, str]
                  ) -> tuple[ast.Module, list[Phase]]:
    """The kernel as one device function `name(__phase, <params>, <one scratch array
    per reduced scalar>)` and its phases, in launch order. `reductions`: scalar name ->
    numpy dtype name."""
    _check_crossings(src)
    phases: list[Phase] = []
    branches: list[tuple[int, list[ast.stmt]]] = []
    run: list[int] = []

    def flush() -> None:
        if any(src.kinds[j] == "serial" for j in run):
            serial = [_Markers(src, gpu=True).visit(copy.deepcopy(src.body[j])) for j in run]
            once = _parse("if __cuda.threadIdx.x == 0:\n    pass", src.body[run[0]])[0]
            assert isinstance(once, ast.If)
            once.body = serial                      # thread 0 of the launch's one block
            body = _prelude(src, run[0], reductions) + [once]
            branches.append((len(phases), body))
            phases.append(Phase(True, src.body[run[0]].lineno))
        run.clear()

    for i, kind in enumerate(src.kinds):
        if kind != "loop":
            run.append(i)
            continue
        flush()
        body = _prelude(src, i, reductions) + _grid_loop(src, i, reductions)
        branches.append((len(phases), body))
        phases.append(Phase(False, src.body[i].lineno))
    flush()
    line = src.body[0].lineno
    if not phases:                          # nothing but locals: one launch doing nothing
        branches.append((0, _prelude(src, len(src.body), reductions) or [ast.Pass()]))
        phases.append(Phase(True, line))
    ifs: list[ast.stmt] = []
    for k, body in reversed(branches):
        test = ast.Compare(ast.Name("__phase", ast.Load()), [ast.Eq()], [ast.Constant(k)])
        ifs = [ast.If(test=test, body=body, orelse=ifs)]
        ast.copy_location(ifs[0], body[0] if body else src.body[0])
    params = ["__phase", *src.params, *[f"__red_{r}" for r in reduced(src)]]
    return _function(name, params, ifs, line), phases


def reduced(src: Source) -> list[str]:
    """Every reduced scalar, in the order their scratch arrays are passed."""
    out: list[str] = []
    for loop in src.loops.values():
        out += [r for r in loop.reductions if r not in out]
    return out


def _prelude(src: Source, upto: int, dtypes: dict[str, str]) -> list[ast.stmt]:
    """What every thread runs before statement `upto`: the statements that only set
    locals, and after each earlier loop its reduced scalars' totals."""
    out: list[ast.stmt] = []
    for j in range(upto):
        if src.kinds[j] == "local":
            out.append(_Markers(src, gpu=True).visit(copy.deepcopy(src.body[j])))
        elif src.kinds[j] == "loop":
            for r, op in src.loops[j].reductions.items():
                total = f"__combine_{'add' if op == '+' else op}_{dtypes[r]}(__red_{r})"
                out += _parse(f"{r} = {r} + {total}" if op == "+" else
                              f"{r} = {op}({r}, {total})", src.body[j])
    return out


def _grid_loop(src: Source, i: int, dtypes: dict[str, str]) -> list[ast.stmt]:
    """Loop `i` spread over the launch's threads, each reducing into its own partial."""
    loop = src.loops[i]
    node = loop.node
    text = _range_text("__", loop.bounds)
    inner = _collapsible(loop)
    if inner is not None:                 # with its inner range loop: one index space
        text += _range_text("__i", inner.iter.args)             # type: ignore[attr-defined]
        text += ["__T = __cuda.gridsize(1)",
                 "__ki = __cuda.grid(1) // __itrip if __itrip > 0 else __trip",
                 "__kj = __cuda.grid(1) - __ki * __itrip",
                 "__dq = __T // __itrip if __itrip > 0 else 0",
                 "__dr = __T - __dq * __itrip"]
    for r, op in loop.reductions.items():
        text.append(f"{r} = __ident_{op.replace('+', 'add')}_{dtypes[r]}")
    out = _parse("\n".join(text), node)
    known = {} if (lo := least(src, node)) is None else {loop.index: lo}
    if inner is not None and (lo := least(src, inner)) is not None:
        assert isinstance(inner.target, ast.Name)
        known[inner.target.id] = lo
    if inner is not None:
        # each thread steps through the (i, j) space by the grid's size, carrying the
        # remainder: one division per thread, none per element
        assert isinstance(inner.target, ast.Name)
        body = [_Markers(src, True, known).visit(copy.deepcopy(st)) for st in inner.body]
        head = _parse(f"{loop.index} = __start + __ki * __step\n"
                      f"{inner.target.id} = __istart + __kj * __istep", node)
        advance = _parse("__kj += __dr\n__ki += __dq\nif __kj >= __itrip:\n"
                      "    __kj -= __itrip\n    __ki += 1", node)
        grid = _parse("while __ki < __trip:\n    pass", node)[0]
        assert isinstance(grid, ast.While)
        grid.body = head + body + advance
    elif not _continues(node):            # a plain counter: fewer steps than range's
        body = [_Markers(src, True, known).visit(copy.deepcopy(st)) for st in node.body]
        out += _parse("__k = __cuda.grid(1)\n__T = __cuda.gridsize(1)", node)
        head = _parse(f"{loop.index} = __start + __k * __step", node)
        grid = _parse("while __k < __trip:\n    pass", node)[0]
        assert isinstance(grid, ast.While)
        grid.body = head + body + _parse("__k += __T", node)
    else:
        body = [_Markers(src, True, known).visit(copy.deepcopy(st)) for st in node.body]
        head = _parse(f"{loop.index} = __start + __k * __step", node)
        loop1 = _parse("for __k in range(__cuda.grid(1), __trip, __cuda.gridsize(1)):\n"
                       "    pass", node)[0]
        assert isinstance(loop1, ast.For)
        loop1.body = head + body
        grid = loop1
    out.append(grid)
    for r, op in loop.reductions.items():
        out += _parse(f"__reduce_{op.replace('+', 'add')}_{dtypes[r]}(__red_{r}, {r})",
                      node)
    return out


def _range_text(prefix: str, bounds: list[ast.expr]) -> list[str]:
    """Generated lines naming a range's start, stop and step `<prefix>start` ... and its
    trip count `<prefix>trip` (0 for an empty range or a zero step)."""
    b = [ast.unparse(x) for x in bounds]
    start, stop, step = ("0", b[0], "1") if len(b) == 1 else \
        (b[0], b[1], "1") if len(b) == 2 else tuple(b)
    p = prefix
    return [f"{p}start, {p}stop, {p}step = {start}, {stop}, {step}",
            f"{p}trip = ({p}stop - {p}start + {p}step - 1) // {p}step if {p}step > 0 else "
            f"(({p}start - {p}stop - {p}step - 1) // (-{p}step) if {p}step < 0 else 0)"]


def _continues(loop: ast.For) -> bool:
    """Whether a `continue` in the loop's body may end its iteration (not one of an inner
    loop's own)."""
    def walk(stmts: list[ast.stmt]) -> bool:
        for st in stmts:
            if isinstance(st, ast.Continue):
                return True
            if isinstance(st, ast.If) and (walk(st.body) or walk(st.orelse)):
                return True
        return False
    return walk(loop.body)


def _collapsible(loop: Any) -> ast.For | None:
    """The body's one `for j in range(...)` loop whose bounds do not depend on the prange
    index: spread over the threads with it, the inner index fastest (adjacent threads
    touch adjacent elements), as OpenMP's collapse(2)."""
    body = loop.node.body
    if len(body) != 1 or not isinstance(body[0], ast.For):
        return None
    inner = body[0]
    it = inner.iter
    if inner.orelse or not isinstance(inner.target, ast.Name) or \
            not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and
                 it.func.id == "range" and 1 <= len(it.args) <= 3 and not it.keywords):
        return None
    if loop.index in names_read(it) or inner.target.id == loop.index:
        return None
    for n in ast.walk(inner):
        if isinstance(n, (ast.Break, ast.Continue)):
            return None
    return inner


def _parse(text: str, at: ast.AST) -> list[ast.stmt]:
    """Statements of generated code, placed at `at`'s line (errors point at it)."""
    stmts = ast.parse(text).body
    for st in stmts:
        for n in ast.walk(st):
            if hasattr(n, "lineno"):
                n.lineno = at.lineno            # type: ignore[attr-defined]
                n.end_lineno = at.lineno        # type: ignore[attr-defined]
    return stmts


def _check_crossings(src: Source) -> None:
    """On a GPU each thread has its own locals: refuse a local that a prange loop's body
    or code between loops sets and a later statement reads (except a reduced scalar)."""
    for i, st in enumerate(src.body):
        kind = src.kinds[i]
        if kind == "local":
            continue
        stored = names_stored(st)
        if kind == "loop":
            stored -= set(src.loops[i].reductions)
        for name in sorted(n for n in stored if exposed(src.body[i + 1:], n)):
            what = "the prange loop" if kind == "loop" else "code that reads or writes arrays"
            raise kernel_error(src.where(st), f"'{name}' is set by {what} here and read "
                               f"after it; on a GPU every thread has its own '{name}'",
                               "write it into an array, or reduce it with += / max / min")
        if kind == "loop":
            for r in src.loops[i].reductions:
                _check_reduction(src, i, r)


def exposed(stmts: list[ast.stmt], name: str) -> bool:
    """Whether `stmts`, run in order, may read `name` before setting it."""
    for st in stmts:
        if isinstance(st, ast.For):
            if name in names_read(st.iter) or (
                    name not in names_stored(st.target) and exposed(st.body, name)):
                return True
        elif isinstance(st, ast.While):
            if name in names_read(st.test) or exposed(st.body, name):
                return True
        elif isinstance(st, ast.If):
            if name in names_read(st.test) or exposed(st.body, name) or \
                    exposed(st.orelse, name):
                return True
            if name in _always_set(st.body) and name in _always_set(st.orelse):
                return False
        elif isinstance(st, ast.Assign | ast.AnnAssign):
            if st.value is not None and name in names_read(st.value):
                return True
            if name in names_stored(st):
                return False
        elif name in names_read(st):
            return True
    return False


def _always_set(stmts: list[ast.stmt]) -> set[str]:
    return {n for st in stmts if isinstance(st, ast.Assign) for n in names_stored(st)}


def _check_reduction(src: Source, i: int, r: str) -> None:
    loop = src.loops[i]
    inits = [j for j in range(i) if r in names_stored(src.body[j])]
    if not inits or any(src.kinds[j] != "local" for j in inits):
        raise kernel_error(src.where(loop.node), f"'{r}' is reduced by the prange loop but "
                           f"not first set by a plain assignment before it",
                           f"write `{r} = 0` (or its start value) before the loop")
    for n in ast.walk(loop.node):
        if isinstance(n, ast.Name) and n.id == r and isinstance(n.ctx, ast.Load):
            parent_ok = _is_reduction_use(loop.node, n, r)
            if not parent_ok:
                raise kernel_error(src.where(n), f"'{r}' is reduced by the prange loop and "
                                   f"also read inside it; each thread sees only its own "
                                   f"partial value", "read it after the loop")


def _is_reduction_use(loop: ast.For, name: ast.Name, r: str) -> bool:
    """Whether a read of `r` inside the loop is its reduction's own (`r = max(r, x)`)."""
    for n in ast.walk(loop):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and \
                isinstance(n.value.func, ast.Name) and n.value.func.id in ("max", "min") and \
                any(a is name for a in n.value.args):
            return True
    return False
