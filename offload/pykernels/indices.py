"""Subscripts that cannot be negative, told to numba: where an array parameter's index
is a `range` or prange loop's variable whose range starts at a literal >= 0 with a literal
step > 0 (and the body never assigns it), plus or minus an integer literal that keeps it
>= 0, the index is cast to uint64, so that numba leaves out Python's wraparound of
negative indices (a compare and a select per index: a third of a GPU stencil's integer
work). Any other index keeps Python's meaning."""
from __future__ import annotations

import ast
from typing import Any

from .source import Source, marker_of, names_stored

CAST = "__offload_index"          # the cast's name in the rewritten code (uint64)


def arrays(src: Source) -> frozenset[str]:
    """The parameters the body never assigns: the names whose subscripts may be cast."""
    stored: set[str] = set()
    for st in src.body:
        stored |= names_stored(st)
    return frozenset(p for p in src.params if p not in stored)


def least(src: Source, loop: ast.For) -> int | None:
    """The least value `loop`'s variable takes, where its range says so in literals and
    its body never assigns it (None: not known)."""
    it = loop.iter
    if not isinstance(loop.target, ast.Name) or not isinstance(it, ast.Call) or \
            it.keywords or not 1 <= len(it.args) <= 3:
        return None
    f = it.func
    builtin = isinstance(f, ast.Name) and f.id == "range" and "range" not in src.globals
    if not builtin and marker_of(src, it) != "prange":
        return None
    start = _literal(it.args[0]) if len(it.args) >= 2 else 0
    step = _literal(it.args[2]) if len(it.args) == 3 else 1
    if start is None or step is None or start < 0 or step <= 0:
        return None
    if any(loop.target.id in names_stored(st) for st in loop.body):
        return None
    return start


def _literal(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _literal(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    return None


class Indices(ast.NodeTransformer):
    """Casts the subscripts known to be >= 0; `known`: loop variables -> their least
    value, for the loops whose bodies are visited without their `for`."""

    def __init__(self, src: Source, known: dict[str, int] | None = None):
        self.src = src
        self.arrays = arrays(src)
        self.known = dict(known or {})

    def visit_For(self, node: ast.For) -> Any:
        # a known variable is never assigned in its loop's body, so an inner loop over it
        # cannot exist: only this loop's own variable is added for its body
        lo = least(self.src, node)             # before its range's call is rewritten
        node.iter = self.visit(node.iter)
        saved = self.known
        if lo is not None:
            assert isinstance(node.target, ast.Name)
            self.known = {**saved, node.target.id: lo}
        node.body = [self.visit(st) for st in node.body]
        self.known = saved
        node.orelse = [self.visit(st) for st in node.orelse]
        return node

    def visit_Subscript(self, node: ast.Subscript) -> Any:
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id in self.arrays:
            if isinstance(node.slice, ast.Tuple):
                node.slice.elts = [self._cast(e) for e in node.slice.elts]
            else:
                node.slice = self._cast(node.slice)
        return node

    def _cast(self, index: ast.expr) -> ast.expr:
        if self._least(index) is None:
            return index
        call = ast.Call(ast.Name(CAST, ast.Load()), [index], [])
        return ast.copy_location(call, index)

    def _least(self, e: ast.expr) -> int | None:
        """The least value of `name`, `name + k`, `name - k` or `k + name` (None: not
        known to be >= 0)."""
        if isinstance(e, ast.Name):
            lo = self.known.get(e.id)
        elif isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add | ast.Sub):
            left, right = e.left, e.right
            k = _literal(right)
            if k is not None and isinstance(left, ast.Name) and left.id in self.known:
                lo = self.known[left.id] + (k if isinstance(e.op, ast.Add) else -k)
            elif isinstance(e.op, ast.Add) and isinstance(right, ast.Name) and \
                    right.id in self.known and _literal(left) is not None:
                lo = self.known[right.id] + (_literal(left) or 0)
            else:
                lo = None
        else:
            lo = None
        return lo if lo is not None and lo >= 0 else None
