"""The table core, compiled and pure-Python: the same methods and entry fields, the same
answers step by step, and the compiled C reaching Python objects only through its one
declared interface (offload/accel_c/interface.c), never a mapping class by name."""
import collections
import importlib
import inspect
import os
import pathlib
import re
import shutil
import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import offload
from offload import _accel, entries, locks
from offload.mapping import core as twin_core
from tests.scripts_support import check_layers as check_layers_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _compiled():
    module = _accel.load()
    if module is None:
        pytest.skip("the compiled core does not build here (no compiler or Python headers)")
    return module


def _public(tp):
    return {n for n in dir(tp) if not n.startswith("_")} | {"__len__"} & set(dir(tp))


def test_both_cores_offer_the_same_methods_and_entry_fields():
    module = _compiled()
    assert _public(module.TableCore) == _public(twin_core.TableCore)
    assert tuple(module.ENTRY_FIELDS) == entries.HostDataToTarget.__slots__
    assert _public(module.HostDataToTarget) == _public(entries.HostDataToTarget)


def test_entries_of_both_cores_start_alike():
    module = _compiled()
    made = [tp(0x1000, 64, 0x9000, "a", None, owned=False)
            for tp in (module.HostDataToTarget, entries.HostDataToTarget)]
    for field in entries.HostDataToTarget.__slots__:
        assert getattr(made[0], field) == getattr(made[1], field), field
    assert made[0].size == made[1].size == 64 and made[0].total() == made[1].total() == 0
    assert repr(made[0]) == repr(made[1])
    made[0].dyn = made[1].dyn = float("inf")          # an association's count
    assert made[0].total() == made[1].total()


@pytest.mark.parametrize("which", ["compiled", "twin"])
def test_a_core_refuses_a_foreign_entry_and_a_second_entry_at_one_start(which):
    tp = _compiled().TableCore if which == "compiled" else twin_core.TableCore
    lock = _accel.load().Lock() if which == "compiled" else locks.Lock()
    core = tp(lock, threading.Condition(lock))
    other = (entries.HostDataToTarget if which == "compiled"
             else _compiled().HostDataToTarget)(0x10, 8, 0, None, None)
    with pytest.raises(TypeError, match="not an entry of this core"):
        core.insert(other)
    e = core.entry_type(0x10, 8, 0, None, None)
    core.insert(e)
    with pytest.raises(ValueError, match="already starts at 0x10"):
        core.insert(core.entry_type(0x10, 4, 0, None, None))
    assert core.entries() == [e] and len(core) == 1


def test_the_compiled_core_takes_only_its_own_lock():
    module = _compiled()
    with pytest.raises(TypeError):
        module.TableCore(locks.Lock(), threading.Condition())


# ---- the two cores side by side, step by step ------------------------------------------------
addresses = st.integers(0, 40).map(lambda k: 0x1000 + 8 * k)


class TwoCores(RuleBasedStateMachine):
    """insert / remove / clear, references, unreferences, associations and marks on both
    cores; every get, find, count and answer compared, including zero-length lookups between
    and inside entries with bases before their starts."""

    def __init__(self):
        super().__init__()
        module = _accel.load()
        self.cores = []
        for tp, lock in ((module.TableCore, module.Lock()),
                         (twin_core.TableCore, locks.Lock())):
            self.cores.append(tp(lock, threading.Condition(lock)))
        self.made = [[], []]

    @rule(p=addresses, n=st.integers(1, 40), back=st.integers(0, 24))
    def insert(self, p, n, back):
        if self.cores[1].find(p, n)[0] is not None:
            return                                    # the table never overlaps
        for core, made in zip(self.cores, self.made, strict=True):
            e = core.entry_type(p, n, 0, None, None)
            e.hst_base = p - back                     # a section of a larger array
            core.insert(e)
            made.append(e)

    @precondition(lambda self: self.made[1])
    @rule(k=st.integers(0, 100))
    def remove(self, k):
        i = k % len(self.made[1])
        for core, made in zip(self.cores, self.made, strict=True):
            core.remove(made.pop(i))

    @rule()
    def clear(self):
        for core, made in zip(self.cores, self.made, strict=True):
            core.clear()
            made.clear()

    # the counts: one reference, one unreference, marks in use
    @precondition(lambda self: self.made[1])
    @rule(k=st.integers(0, 100), hold=st.booleans())
    def reference(self, k, hold):
        for core, made in zip(self.cores, self.made, strict=True):
            core.reference(made[k % len(made)], hold=hold)

    @precondition(lambda self: self.made[1])
    @rule(k=st.integers(0, 100), hold=st.booleans(), delete=st.booleans())
    def unreference(self, k, hold, delete):
        last = [core.unreference(made[k % len(made)], hold, delete=delete)
                for core, made in zip(self.cores, self.made, strict=True)]
        assert last[0] == last[1] and type(last[0]) is bool, last

    @precondition(lambda self: self.made[1])
    @rule(k=st.integers(0, 100))
    def associate(self, k):
        for core, made in zip(self.cores, self.made, strict=True):
            core.reference_forever(made[k % len(made)])

    @precondition(lambda self: self.made[1])
    @rule(k=st.integers(0, 100), mark=st.booleans())
    def mark_or_unmark(self, k, mark):
        errors = []
        for core, made in zip(self.cores, self.made, strict=True):
            e = made[k % len(made)]
            if mark:
                core.mark(e)
                continue
            try:
                core.unmark([e])
            except RuntimeError as err:
                errors.append(str(err).split(":")[0])
        assert errors in ([], ["TableCore.unmark"] * 2), errors

    @invariant()
    def same_counts(self):
        for a, b in zip(*self.made, strict=True):
            assert (a.dyn, a.hold, a.busy) == (b.dyn, b.hold, b.busy), (a, b)
            assert a.total() == b.total()

    @rule(p=st.integers(0x0f00, 0x1200), n=st.integers(0, 48))
    def look(self, p, n):
        got = []
        for core, made in zip(self.cores, self.made, strict=True):
            e, inside = core.find(p, n)
            exact = core.get(p)
            got.append((None if e is None else made.index(e), inside,
                        None if exact is None else made.index(exact)))
        assert got[0] == got[1], (p, n, got)

    @invariant()
    def same_order(self):
        a, b = (core.entries() for core in self.cores)
        assert [e.hst_begin for e in a] == [e.hst_begin for e in b]
        assert len(self.cores[0]) == len(self.cores[1]) == len(self.made[1])


def test_the_two_cores_answer_alike_step_by_step():
    _compiled()
    TwoCores.TestCase.settings = settings(max_examples=60, stateful_step_count=40,
                                          deadline=None)
    TwoCores.TestCase().runTest()


# ---- the compiled core's one declared interface ----------------------------------------------
def _owner_has(owner: str, name: str) -> bool:
    module_name, _, cls_name = owner.partition(":")
    module = __import__(module_name, fromlist=[cls_name])
    cls = getattr(module, cls_name)
    if name in getattr(cls, "__slots__", ()) or hasattr(cls, name):
        return True
    source = inspect.getsource(cls)
    return re.search(rf"\bself\.{re.escape(name)}\b\s*(:[^=]+)?=", source) is not None


def test_every_declared_name_belongs_to_its_owner(runtime):
    """A renamed attribute the C reads would send every call to the Python path (or fail
    at run time): each name of the interface exists where the interface says."""
    module = _compiled()
    runtime()
    gen = offload.runtime.current().device(0).generic
    kinds = {"lock": [locks.Lock(), module.Lock(), locks.latch()],
             "condition": [threading.Condition()], "deque": [collections.deque()]}
    checked = 0
    for owner, name in module.INTERFACE:
        if owner in kinds:
            assert all(hasattr(x, name) for x in kinds[owner]), (owner, name)
        elif owner == "stats key":
            assert name in gen.stats, name
        elif owner == "thread-local":
            assert re.search(rf"_tls\.{name}\b", inspect.getsource(offload.runtime)), name
        elif owner.startswith("keyword:"):
            from offload.mapping import MappingTable
            assert name in inspect.signature(getattr(MappingTable, owner[8:])).parameters
        elif owner == "message":
            continue
        elif owner.startswith("module "):
            assert hasattr(importlib.import_module(owner[7:]), name), (owner, name)
        else:
            assert _owner_has(owner, name), (owner, name)
        checked += 1
    assert checked >= 30


def test_the_core_interface_check_passes_here_and_catches_each_fault(tmp_path, monkeypatch):
    check = check_layers_script()
    assert check.c_problems() == []
    assert not any(owner.startswith(check.MAPPING_OWNERS) for _, owner, _ in check.interface())
    plants = {
        "present.c": ('static void f(PyObject *t) {\n'
                      '  PyObject_GetAttrString(t, "_by_start");\n}\n',
                      "names an attribute by a string"),
        "update.c": ("static void g(PyObject *t) {\n  PyObject_GetAttr(t, s_secret);\n}\n",
                     "s_secret, a name not declared"),
        "interface.c": ('static const Name more[] = {\n    {&s_acquire, "offload.mapping:'
                        'MappingTable", "_starts"},\n};\n', "attribute of a mapping class"),
    }
    for file, (text, want) in plants.items():
        tree = tmp_path / file.replace(".", "_") / "offload"
        shutil.copytree(check.ROOT / check.CORE, tree / check.CORE)
        target = tree / check.CORE / file
        target.write_text(target.read_text() + text)
        found = check.c_problems(tree)
        assert any(want in line for line in found), (file, found)
    tree = tmp_path / "unused" / "offload"
    shutil.copytree(check.ROOT / check.CORE, tree / check.CORE)
    path = tree / check.CORE / "interface.c"
    pop = '{&s_pop, "deque", "pop"},'
    path.write_text(path.read_text().replace(pop, pop + '\n    {&s_spare, "deque", "x"},'))
    assert any("s_spare is declared and never used" in line for line in check.c_problems(tree))


def test_no_core_source_reads_an_entry_or_the_table_by_name():
    """The entries and the table's state are the core's own C types: no field of
    HostDataToTarget and no attribute of the table appears as a name in the C."""
    check = check_layers_script()
    declared = {name for _, _, name in check.interface()}
    table_attrs = {"_by_start", "_starts", "_entries", "_lock", "_idle", "_waiting", "observed"}
    mapping_names = set(entries.HostDataToTarget.__slots__) | {"__slots__"}
    owners = {name: owner for _, owner, name in check.interface()}
    for name in (mapping_names | table_attrs) & declared:
        assert not owners[name].startswith(("offload.mapping", "offload.entries")), name


def test_the_data_operation_hooks_are_written_once():
    """A table and a Device reach device memory through one interface (mapping/memory.py),
    the one place an allocation, a free or a copy is told to a tool."""
    found = []
    for path in sorted(pathlib.Path(ROOT, "offload").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\btracing\.(alloc|delete|submit|retrieve)\(", line):
                found.append(f"{path.relative_to(ROOT)}:{n}")
    assert found and all(f.startswith("offload/mapping/memory.py:") for f in found), found


@pytest.mark.parametrize("which", ["compiled", "twin"])
def test_the_core_counts_as_llvm_counts(which):
    """A reference count never falls below 0, an association's INF stays INF, `delete`
    drops every dynamic reference but no hold one, and a mark given back twice is an error
    that changes nothing (LLVM's HostDataToTargetTy: decRefCount, resetRefCount, INF)."""
    tp = _compiled().TableCore if which == "compiled" else twin_core.TableCore
    lock = _accel.load().Lock() if which == "compiled" else locks.Lock()
    core = tp(lock, threading.Condition(lock))
    e = core.entry_type(0x10, 8, 0, None, None)
    assert core.unreference(e) is True and (e.dyn, e.hold) == (0, 0)
    core.reference(e)
    core.reference(e)
    core.reference(e, hold=True)
    assert (e.dyn, e.hold) == (2, 1)
    assert core.unreference(e, delete=True) is False and (e.dyn, e.hold) == (0, 1)
    assert core.unreference(e, True) is True and (e.dyn, e.hold) == (0, 0)
    core.reference_forever(e)
    core.reference(e)
    assert core.unreference(e) is False and core.unreference(e, delete=True) is False
    assert e.dyn == float("inf")
    core.mark(e)
    core.unmark([e])
    with pytest.raises(RuntimeError, match="not marked in use"):
        core.unmark([e])
    assert e.busy == 0


def test_counts_change_in_the_core_alone():
    """One reference, one unreference: an entry's dyn, hold and busy counts are written by
    the core's methods only (mapping/core.py; the compiled core's entry.c), never by a
    mapping rule, a fewer-steps path or the C ABI."""
    written = re.compile(r"(?<!\btls)\.(dyn|hold|busy)\s*(\+|-)?=(?!=)")  # (tls: a profile's)
    found = []
    for path in sorted(pathlib.Path(ROOT, "offload").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if written.search(line) and rel != "offload/entries.py":   # (its __init__)
                found.append(f"{rel}:{n}")
    assert found and all(f.startswith("offload/mapping/core.py:") for f in found), found
    put = re.compile(r"\bput\([^,]+,\s*(DYN|HOLD|BUSY)\b")
    c_found = [f"{path.name}:{n}"
               for path in sorted(pathlib.Path(ROOT, "offload", "accel_c").glob("*.c"))
               for n, line in enumerate(path.read_text().splitlines(), 1) if put.search(line)]
    assert c_found and all(f.startswith("entry.c:") for f in c_found), c_found
