"""Child-side driver for one untrusted PF: the restricted runtime and the request loop.

Started through ``hasp.sandbox.child`` by ``hasp.pf.sandboxed.SandboxedPF``; the
lockdown (namespaces, rlimits, uid, seccomp) is ``hasp.sandbox.lockdown``'s job and
has happened before ``run`` is called. The driver speaks JSON lines: one request
per line on stdin, one response per line on its private copy of fd 1. The first
line it writes is ``{"op": "hello", "protections": {...}}``.

Requests::

    {"op": "load", "code": "...", "skill_id": "x" | null}
        -> {"ok": true, "skill_id", "class_name", "needs_teacher", "max_fires", "watches", "interface", ...}
    {"op": "call", "method": "should_activate" | "intervene", "ctx": {...},
     "action_type": "SEARCH", "arg": "..."}
        -> {"ok": true, "result": bool | intervention-dict, "result_type": "bool",
            "ctx_private": {changed "_" keys}, "ctx_deleted": [...]}
        |  {"ok": false, "error": "TypeName: message", "where": "line N: ..."}
    {"op": "ping"} -> {"ok": true}
    {"op": "exit"}

Only ``_``-prefixed ctx keys the PF *changed* (or added) come back in
``ctx_private``; removed ones are listed in ``ctx_deleted``. The teacher is
always ``None`` inside the sandbox.

Everything the PF may use is imported and built in ``prepare``, before the
lockdown: afterwards the process may not be able to read the filesystem, and the
restricted importer only hands out already-loaded modules.

Allowed modules are handed out as trimmed proxies, and a few of their functions are
replaced where the real one would do on the PF's behalf what the policy refuses in its
own code: evaluate a string or copy an attribute chosen by name.

* ``functools.update_wrapper`` / ``wraps`` copy only the default attributes, onto objects
  the PF defined (``assigned=("__globals__",)`` would read any function's globals,
  ``updated=`` would merge them into the PF's own);
* ``functools.singledispatch`` / ``singledispatchmethod`` register by explicit class only
  (registering an annotated function runs ``typing.get_type_hints``, which evaluates
  annotation strings the PF can build at run time);
* ``enum.global_enum`` only writes into the PF's own module;
* ``dataclasses`` compiles methods from field names, which a class built with ``type()``
  or ``TypedDict`` can make arbitrary text: in a restricted worker that text must pass the
  static policy and run in the PF's own namespace (``_guard_dataclass_codegen``).
"""

from __future__ import annotations

import builtins
import functools
import inspect
import io
import json
import linecache
import os
import platform
import resource
import sys
import time
import traceback
import types
import warnings
from collections.abc import Callable
from typing import Any

from hasp.pf.base import ProgramFunction, Teacher, watched_types
from hasp.pf.intervention import Intervention, InterventionType
from hasp.pf.registry import collecting, register_pf
from hasp.sandbox.lockdown import cpu_used
from hasp.sandbox.policy import (ALLOWED_MODULES, DATACLASS_GENERATED, FORMAT_METHODS, UNSAFE_ATTRS, check_policy,
                                 is_sunder)
from hasp.sandbox.probe import probe_protections

# Pre-import the allow-list: after setup the process may not be able to read the
# filesystem, and the restricted importer only hands out already-loaded modules.
for _m in sorted(ALLOWED_MODULES):
    __import__(_m)
# ... and the codecs a PF might use (codec modules are imported lazily by str.encode).
for _enc in ("ascii", "latin-1", "utf-8", "utf-16", "utf-32", "cp1252"):
    "".encode(_enc)

CANDIDATE_MODULE = "hasp_candidate"
CANDIDATE_FILE = "<candidate>"
MAX_PRINT_CHARS = 4000
MAX_ERROR_CHARS = 2000
MAX_PRIVATE_BYTES = 256 * 1024  # private ctx state a PF may change per call (it rides along every step)

# ---------------------------------------------------------------------------- restricted runtime

_SAFE_BUILTIN_NAMES = (
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr",
    "classmethod", "complex", "dict", "dir", "divmod", "enumerate", "filter", "float", "format",
    "frozenset", "hash", "hex", "id", "int", "isinstance", "issubclass", "iter", "len", "list",
    "map", "max", "min", "next", "object", "oct", "ord", "pow", "property", "range", "repr",
    "reversed", "round", "set", "slice", "sorted", "staticmethod", "str", "sum", "super",
    "tuple", "type", "zip", "aiter", "anext", "True", "False", "None", "NotImplemented",
    "Ellipsis", "__build_class__",
)
# Not offered: eval exec compile open __import__(raw) globals locals vars input breakpoint
# exit quit memoryview help — and getattr/setattr/delattr/hasattr only in guarded form.

# Names a PF may not see even inside an allowed module (escape hatches to eval/frames).
_PROXY_EXCLUDE = {
    "typing": {"get_type_hints", "ForwardRef", "TYPE_CHECKING"},
    "string": {"Formatter"},
}


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _attr_allowed(obj: object, name: object) -> str:
    if type(name) is not str:
        raise TypeError("attribute name must be str")
    if name in UNSAFE_ATTRS or (_is_dunder(name) and name != "__init__") or is_sunder(name):
        raise AttributeError(f"access to {name!r} is not allowed in the sandbox")
    if name in FORMAT_METHODS:  # a template chosen at run time walks attributes of its arguments
        raise AttributeError(f"{name!r} through getattr is not allowed in the sandbox")
    if name.startswith("_") and not _is_dunder(name):
        owner = obj if isinstance(obj, type) else type(obj)
        if type.__getattribute__(owner, "__module__") != CANDIDATE_MODULE:
            raise AttributeError(f"private attribute {name!r} of a non-PF object is not allowed in the sandbox")
    return name


def _guarded_getattr(obj, name, *default):
    _attr_allowed(obj, name)
    return getattr(obj, name, *default)


def _guarded_hasattr(obj, name):
    try:
        _attr_allowed(obj, name)
    except AttributeError:
        return False
    return hasattr(obj, name)


def _guarded_setattr(obj, name, value):
    _attr_allowed(obj, name)
    if isinstance(obj, types.ModuleType) or obj in _PROTECTED_OBJECTS:
        raise AttributeError("patching runtime objects is not allowed in the sandbox")
    return setattr(obj, name, value)


def _guarded_delattr(obj, name):
    _attr_allowed(obj, name)
    if isinstance(obj, types.ModuleType) or obj in _PROTECTED_OBJECTS:
        raise AttributeError("patching runtime objects is not allowed in the sandbox")
    return delattr(obj, name)


_PROTECTED_OBJECTS: tuple = (ProgramFunction, Intervention, InterventionType, register_pf)
_TYPE_MODULE = type.__dict__["__module__"]  # a class's own module, whatever its metaclass says


def _defined_by_candidate(obj: object) -> bool:
    """True for functions and classes (and their instances) the PF's code defined."""
    if type(obj) is types.FunctionType:
        return obj.__globals__.get("__name__") == CANDIDATE_MODULE
    cls = obj if issubclass(type(obj), type) else type(obj)
    mod = _TYPE_MODULE.__get__(cls)
    return type(mod) is str and mod == CANDIDATE_MODULE


# ---------------------------------------------------------------------------- module replacements

def _update_wrapper(wrapper, wrapped, assigned=functools.WRAPPER_ASSIGNMENTS, updated=functools.WRAPPER_UPDATES):
    """``functools.update_wrapper`` limited to the default attributes, onto the PF's own objects."""
    assigned, updated = tuple(assigned), tuple(updated)
    for names, default in ((assigned, functools.WRAPPER_ASSIGNMENTS), (updated, functools.WRAPPER_UPDATES)):
        for n in names:
            if type(n) is not str or n not in default:
                raise AttributeError(f"update_wrapper copies only {default} in the sandbox, not {n!r}")
    if not _defined_by_candidate(wrapper):
        raise AttributeError("update_wrapper may only change objects the PF defined")
    return functools.update_wrapper(wrapper, wrapped, assigned, updated)


def _wraps(wrapped, assigned=functools.WRAPPER_ASSIGNMENTS, updated=functools.WRAPPER_UPDATES):
    return functools.partial(_update_wrapper, wrapped=wrapped, assigned=assigned, updated=updated)


def _is_dispatch_type(cls: object) -> bool:
    import typing

    if isinstance(cls, type):
        return True
    return typing.get_origin(cls) in (typing.Union, types.UnionType)


def _singledispatch(func):
    """``functools.singledispatch`` whose ``register`` takes an explicit class only."""
    dispatcher = functools.singledispatch(func)
    real_register = dispatcher.register

    def register(cls, func=None):
        if func is not None:  # the real register never reads annotations when given a function
            return real_register(cls, func)
        if not _is_dispatch_type(cls):
            raise TypeError("register(cls, func) or @register(cls) in the sandbox: registering by "
                            "annotation evaluates annotation strings")

        def deco(f):
            if f is None:
                raise TypeError("register(cls) decorates a function")
            return real_register(cls, f)
        return deco

    dispatcher.register = register
    return dispatcher


class _SingleDispatchMethod(functools.singledispatchmethod):
    """``functools.singledispatchmethod`` over the sandbox's ``singledispatch``."""

    def __init__(self, func) -> None:
        super().__init__(func)
        self.dispatcher = _singledispatch(func)


def _global_enum(cls, update_str=False):
    """``enum.global_enum`` that exports into the PF's own module, whatever ``cls.__module__`` says."""
    import enum

    if not (isinstance(cls, type) and issubclass(cls, enum.Enum) and _defined_by_candidate(cls)):
        raise TypeError("global_enum takes an enum the PF defined")
    cls.__repr__ = enum.global_flag_repr if issubclass(cls, enum.Flag) else enum.global_enum_repr
    if not issubclass(cls, enum.ReprEnum) or update_str:
        cls.__str__ = enum.global_str
    sys.modules[CANDIDATE_MODULE].__dict__.update(cls.__members__)
    return cls


def _make_dataclass(cls_name, fields, *, namespace=None, **kw):
    """``dataclasses.make_dataclass`` whose class belongs to the PF's module (the real one's
    would belong to ``types``, whose namespace the generated methods must not run in)."""
    import dataclasses

    ns = dict(namespace or {})
    ns["__module__"] = CANDIDATE_MODULE
    return dataclasses.make_dataclass(cls_name, fields, namespace=ns, **kw)


#: module attribute -> what the proxy offers instead
_PROXY_REPLACE: dict[str, dict[str, object]] = {
    "functools": {"update_wrapper": _update_wrapper, "wraps": _wraps, "singledispatch": _singledispatch,
                  "singledispatchmethod": _SingleDispatchMethod},
    "enum": {"global_enum": _global_enum},
    "dataclasses": {"make_dataclass": _make_dataclass},
}


def _guard_dataclass_codegen() -> None:
    """Make ``dataclasses`` refuse to compile a method unless its text passes the static policy
    and it runs in the candidate's namespace (not ``{}`` with real builtins, not a host module).
    Field names come from ``__annotations__`` keys, which a class built at run time can make
    any text; a legitimate dataclass generates the same code as before."""
    import dataclasses

    real = getattr(dataclasses, "_create_fn", None)
    if real is None or getattr(real, "_hasp_guarded", False):
        return

    def _create_fn(name, args, body, *, globals=None, locals=None, return_type=dataclasses.MISSING):  # noqa: A002
        cand = sys.modules.get(CANDIDATE_MODULE)
        if cand is None or globals is not cand.__dict__:
            raise TypeError("dataclasses: a dataclass in the sandbox must be defined by the PF's own code")
        text = "def __create_fn__({}):\n def {}({}):\n{}\n return {}".format(
            ", ".join(locals or ()), name, ",".join(args), "\n".join(f"  {b}" for b in body), name)
        bad = check_policy(text, generated=DATACLASS_GENERATED)
        if bad:
            raise TypeError("dataclasses: generated method refused by the sandbox policy: " + "; ".join(bad)[:500])
        return real(name, args, body, globals=globals, locals=locals, return_type=return_type)

    _create_fn._hasp_guarded = True
    dataclasses._create_fn = _create_fn


class _PrintSink:
    """``print`` inside the sandbox: captured (bounded) and returned with the response."""

    def __init__(self) -> None:
        self.buf = io.StringIO()

    def __call__(self, *args, sep=" ", end="\n", **_kw) -> None:
        if self.buf.tell() >= MAX_PRINT_CHARS:
            return
        s = (sep if isinstance(sep, str) else " ").join(str(a) for a in args) + (end if isinstance(end, str) else "\n")
        self.buf.write(s[: MAX_PRINT_CHARS - self.buf.tell()])

    def take(self) -> str:
        s = self.buf.getvalue()
        self.buf = io.StringIO()
        return s


_PRINT = _PrintSink()


def _proxy_module(name: str, cache: dict[str, types.ModuleType]) -> types.ModuleType:
    """A trimmed copy of an allowed module: public names only, no module-valued attributes
    except other allowed modules (``typing.sys`` / ``collections._sys`` are not reachable)."""
    if name in cache:
        return cache[name]
    real = sys.modules[name]
    proxy = types.ModuleType(name)
    cache[name] = proxy
    excluded = _PROXY_EXCLUDE.get(name, set())
    replaced = _PROXY_REPLACE.get(name, {})
    for attr in dir(real):
        if attr.startswith("_") and not (name == "__future__" and not attr.startswith("__")):
            continue
        if attr in excluded or attr in UNSAFE_ATTRS:
            continue
        val = replaced.get(attr, getattr(real, attr, None))
        if isinstance(val, types.ModuleType):
            if val.__name__ in ALLOWED_MODULES:
                setattr(proxy, attr, _proxy_module(val.__name__, cache))
            continue
        setattr(proxy, attr, val)
    return proxy


def _preamble() -> dict[str, object]:
    return {"ProgramFunction": ProgramFunction, "Intervention": Intervention,
            "InterventionType": InterventionType, "register_pf": register_pf, "Teacher": Teacher}


def _fake_hasp_modules() -> dict[str, types.ModuleType]:
    """``import hasp.pf.base`` etc. inside the sandbox: modules holding only the preamble."""
    mods: dict[str, types.ModuleType] = {}
    for n in ("hasp", "hasp.pf", "hasp.pf.base", "hasp.pf.intervention", "hasp.pf.registry"):
        m = types.ModuleType(n)
        if n != "hasp":
            for k, v in _preamble().items():
                setattr(m, k, v)
        mods[n] = m
    mods["hasp"].pf = mods["hasp.pf"]
    for leaf in ("base", "intervention", "registry"):
        setattr(mods["hasp.pf"], leaf, mods[f"hasp.pf.{leaf}"])
    return mods


def _make_restricted_import():
    cache: dict[str, types.ModuleType] = {}
    fakes = _fake_hasp_modules()
    proxies = {n: _proxy_module(n, cache) for n in sorted(ALLOWED_MODULES)}

    def _import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002
        if level:
            raise ImportError("relative imports are not allowed in the sandbox")
        table = fakes if name in fakes else proxies if name in proxies else None
        if table is None:
            raise ImportError(f"import of {name!r} is not allowed in the sandbox")
        if fromlist:
            return table[name]
        return table[name.split(".")[0]]

    return _import


def _safe_builtins() -> dict[str, object]:
    b: dict[str, object] = {n: getattr(builtins, n) for n in _SAFE_BUILTIN_NAMES}
    for n in dir(builtins):  # every exception class
        v = getattr(builtins, n)
        if isinstance(v, type) and issubclass(v, BaseException):
            b[n] = v
    b.update(getattr=_guarded_getattr, hasattr=_guarded_hasattr, setattr=_guarded_setattr,
             delattr=_guarded_delattr, print=_PRINT, __import__=_make_restricted_import())
    return b


# ---------------------------------------------------------------------------- request handling

def _json_default(o):
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    raise TypeError(f"{type(o).__name__} value is not JSON-compatible")


_ENC = json.JSONEncoder(separators=(",", ":"), default=_json_default)
_ENC_SORTED = json.JSONEncoder(separators=(",", ":"), sort_keys=True, default=_json_default)
_SCALARS = (int, float, str, bool, type(None))


def _snapshot(v):
    """A comparable, immutable image of a private ctx value (scalars as-is, containers as JSON)."""
    t = type(v)
    if t in _SCALARS:
        return (t, v)  # the type too: True == 1, but a PF that swaps them changed the value
    return (list, _ENC_SORTED.encode(v))


def _err(e: BaseException) -> dict:
    try:
        msg = f"{type(e).__name__}: {e}"
    except BaseException:  # noqa: BLE001 - a hostile __str__
        msg = f"{type(e).__name__}: <unprintable>"
    where = ""
    try:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == CANDIDATE_FILE]
        if frames:
            f = frames[-1]
            where = f"line {f.lineno} in {f.name}: {(f.line or '').strip()}"[:300]
    except BaseException:  # noqa: BLE001
        pass
    out = {"ok": False, "error": msg[:MAX_ERROR_CHARS]}
    if where:
        out["where"] = where
    return out


class Worker:
    def __init__(self, job: dict) -> None:
        self.skip_policy = bool(job.get("unsafe_skip_policy"))
        self.pf: ProgramFunction | None = None
        self.skill_id: str | None = None
        self.call_cpu_s = int(job["call_cpu_s"])
        self.total_cpu_s = max(int(job["total_cpu_s"]), self.call_cpu_s)
        self.restricted = not job.get("unsafe_unrestricted_runtime")
        # text longer than the caps is cut here, one character over, so the host sees (and records)
        # the cut without a megabyte crossing the pipe
        self.max_arg = int(job.get("max_arg_chars") or 1 << 20) + 1
        self.max_text = int(job.get("max_context_chars") or 1 << 20) + 1
        self.builtins = _safe_builtins() if self.restricted else builtins.__dict__
        self._armed_at = -10.0

    # -- per-call CPU budget: the kernel kills a runaway even if the host is gone.
    # The soft limit is re-armed once a full CPU second has been used since the last
    # arming, so every call gets at least ``call_cpu_s - 1`` s (>= the host's timeout).
    def _arm_cpu(self) -> None:
        now = time.process_time()
        if now - self._armed_at < 1.0:
            return
        try:
            soft = min(self.total_cpu_s, cpu_used() + self.call_cpu_s)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, self.total_cpu_s))
            self._armed_at = now
        except (ValueError, OSError):
            pass

    def load(self, req: dict) -> dict:
        code = req.get("code")
        if not isinstance(code, str):
            return {"ok": False, "error": "TypeError: code must be a string"}
        if not self.skip_policy:
            violations = check_policy(code)
            if violations:
                return {"ok": False, "error": "PolicyViolation: " + "; ".join(violations)[:MAX_ERROR_CHARS],
                        "violations": violations}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                code_obj = compile(code, CANDIDATE_FILE, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as e:
            return {"ok": False, "error": f"{type(e).__name__}: {e}"}
        lines = code.splitlines(keepends=True)
        linecache.cache[CANDIDATE_FILE] = (len(code), None, lines, CANDIDATE_FILE)
        # A real module object, registered, so library code that looks the candidate's module
        # up (dataclasses with string annotations, enum, pickle-free typing) works.
        mod = types.ModuleType(CANDIDATE_MODULE)
        sys.modules[CANDIDATE_MODULE] = mod
        ns: dict = mod.__dict__
        ns.update({"__builtins__": self.builtins, "__file__": CANDIDATE_FILE})
        ns.update(_preamble())
        want = req.get("skill_id")
        self._arm_cpu()
        try:
            with collecting() as found:
                exec(code_obj, ns)  # noqa: S102 - this is the sandbox
            if want:
                if want not in found:
                    return {"ok": False, "error": f"LookupError: no @register_pf({want!r}) class (found {sorted(found)})",
                            "registered": sorted(found)}
                sid = want
            elif len(found) == 1:
                sid = next(iter(found))
            else:
                return {"ok": False, "error": f"LookupError: expected exactly one @register_pf class, found {sorted(found)}",
                        "registered": sorted(found)}
            cls = found[sid]
            interface = self._interface(cls)
            pf = cls()
            warn: list[str] = []
            needs = getattr(pf, "needs_teacher", False)
            if type(needs) is not bool:
                warn.append(f"needs_teacher is {type(needs).__name__}, not bool")
                needs = bool(needs)
            mf = getattr(pf, "max_fires", None)
            if mf is not None and (type(mf) is not int or mf < 0):
                warn.append(f"max_fires={mf!r} is not a non-negative int; ignored")
                mf = None
            try:
                w = watched_types(getattr(pf, "watches", None))
                watches = sorted(w) if w is not None else None
            except ValueError as e:
                warn.append(f"{e}; ignored (asked on every action type)")
                watches = None
        except BaseException as e:  # noqa: BLE001
            return _err(e)
        self.pf, self.skill_id = pf, sid
        return {"ok": True, "skill_id": sid, "class_name": cls.__name__, "needs_teacher": needs,
                "max_fires": mf, "watches": watches, "registered": sorted(found), "interface": interface,
                "warnings": warn, "log": _PRINT.take()}

    @staticmethod
    def _interface(cls: type) -> dict:
        info: dict = {"is_program_function": isinstance(cls, type) and issubclass(cls, ProgramFunction)}
        for name in ("should_activate", "intervene"):
            fn = getattr(cls, name, None)
            base = getattr(ProgramFunction, name)
            d: dict = {"defined": fn is not None, "overridden": fn is not None and fn is not base}
            try:
                sig = inspect.signature(fn)
                d["params"] = [{"name": p.name, "kind": p.kind.name,
                                "has_default": p.default is not inspect.Parameter.empty,
                                "default_is_none": p.default is None}
                               for p in sig.parameters.values()]
            except (TypeError, ValueError) as e:
                d["params"] = None
                d["error"] = str(e)
            info[name] = d
        return info

    def call(self, req: dict) -> dict:
        if self.pf is None:
            return {"ok": False, "error": "RuntimeError: no PF loaded"}
        method = req.get("method")
        ctx = req.get("ctx")
        if method not in ("should_activate", "intervene") or not isinstance(ctx, dict):
            return {"ok": False, "error": "ValueError: bad call request"}
        at, arg = req.get("action_type", ""), req.get("arg", "")
        before = {k: _snapshot(v) for k, v in ctx.items() if k[:1] == "_"}
        self._arm_cpu()
        c0 = time.process_time()
        try:
            if method == "should_activate":
                r = self.pf.should_activate(ctx, at, arg)
                rtype = type(r).__name__
                resp = {"ok": True, "result": r if type(r) is bool else bool(r), "result_type": rtype}
            else:
                r = self.pf.intervene(ctx, at, arg, None)
                resp = self._intervention(r, self.max_arg, self.max_text)
        except BaseException as e:  # noqa: BLE001 - SystemExit / KeyboardInterrupt from the PF too
            resp = _err(e)
        resp["cpu_s"] = round(time.process_time() - c0, 6)
        # private ctx keys the PF changed, added or removed
        try:
            changed, deleted = {}, [k for k in before if k not in ctx]
            for k, v in list(ctx.items()):
                if type(k) is str and k[:1] == "_":
                    snap = _snapshot(v)
                    if before.get(k) != snap:
                        changed[k] = json.loads(snap[1]) if snap[0] is list else v
            if changed and len(_ENC.encode(changed)) > MAX_PRIVATE_BYTES:
                raise ValueError(f"more than {MAX_PRIVATE_BYTES} bytes of private state")
            resp["ctx_private"], resp["ctx_deleted"] = changed, deleted
        except BaseException as e:  # noqa: BLE001
            resp = {"ok": False, "error": f"TypeError: private ctx value cannot leave the sandbox ({e})"}
        out = _PRINT.take()
        if out:
            resp["log"] = out
        return resp

    @staticmethod
    def _intervention(r: object, max_arg: int = 1 << 30, max_text: int = 1 << 30) -> dict:
        if not isinstance(r, Intervention):
            return {"ok": True, "result": None, "result_type": type(r).__name__}
        t = r.type
        tv = t.value if isinstance(t, InterventionType) else t
        fields = {"type": tv, "new_action_type": r.new_action_type, "new_action_arg": r.new_action_arg,
                  "context_text": r.context_text, "reason": r.reason, "skill_id": r.skill_id}
        issues = []
        for k, v in fields.items():
            if v is not None and type(v) is not str:
                issues.append(f"Intervention.{k} is {type(v).__name__}")
                fields[k] = None
            elif v is not None:
                cap = max_arg if k in ("new_action_type", "new_action_arg") else max_text
                if len(v) > cap:
                    fields[k] = v[:cap]
        out = {"ok": True, "result": fields, "result_type": "Intervention"}
        if issues:
            out["issues"] = issues
        return out


def _send_to(proto_fd: int) -> Callable[[dict], None]:
    def send(obj: dict) -> None:
        try:
            data = _ENC.encode(obj).encode() + b"\n"
        except BaseException as e:  # noqa: BLE001
            data = json.dumps({"ok": False, "error": f"TypeError: response not serialisable ({e})"}).encode() + b"\n"
        view = memoryview(data)
        while view:
            n = os.write(proto_fd, view)
            view = view[n:]
    return send


def _serve(worker: Worker, send: Callable[[dict], None]) -> int:
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return 0
        try:
            req = json.loads(line)
            op = req.get("op")
        except (ValueError, AttributeError) as e:
            send({"ok": False, "error": f"ValueError: bad request ({e})"})
            continue
        if op == "call":
            send(worker.call(req))
        elif op == "load":
            send(worker.load(req))
        elif op == "ping":
            send({"ok": True})
        elif op == "exit":
            return 0
        else:
            send({"ok": False, "error": f"ValueError: unknown op {op!r}"})


def prepare(job: dict) -> Callable[[dict], int]:
    """Take the protocol off fd 1 and build the runtime; the runner says hello and serves."""
    # The protocol gets its own fd; fd 1 (and sys.stdout) become stderr so nothing
    # a PF or the interpreter prints can corrupt the response stream.
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    if job.get("probe") or job.get("unsafe_unrestricted_runtime"):
        # Load what a hostile PF would reach for *before* the filesystem is out of reach,
        # so probes and tests exercise the kernel-level blocks, not a missing module.
        import socket  # noqa: F401
        import subprocess  # noqa: F401
        "x".encode("idna")  # socket.create_connection needs it
        import hasp.pf.dispatcher  # noqa: F401 - so a patching attempt has a real target
    worker = Worker(job)  # builds proxies / builtins before privileges are gone
    if worker.restricted:
        _guard_dataclass_codegen()
    send = _send_to(proto_fd)

    def run(prot: dict[str, Any]) -> int:
        prot["restricted_runtime"] = worker.restricted
        prot["static_policy"] = not worker.skip_policy
        hello = {"op": "hello", "ok": True, "protections": prot, "python": platform.python_version()}
        if job.get("probe"):
            hello["probe"] = probe_protections(prot.get("workdir") or os.getcwd())
        send(hello)
        return _serve(worker, send)

    return run
