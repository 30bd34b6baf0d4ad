"""test_conformance.py — KvtierConnector against the installed vLLM's
KVConnectorBase_V1, and the stand-ins of tests/python/stubs (the fast suite
where vLLM is not installed) against it too: drift fails here."""

import importlib.util
import inspect
import sys
from types import ModuleType

import pytest
from vllm.distributed.kv_transfer.kv_connector.v1 import base as vllm_base

from conftest import SRC
from kvtier.vllm import KvtierConnector

BASE = vllm_base.KVConnectorBase_V1


def kind(cls: type, name: str) -> str:
    """property, classmethod, staticmethod or method: how name is bound on cls."""
    for klass in cls.__mro__:
        if name in vars(klass):
            attr = vars(klass)[name]
            return type(attr).__name__ if isinstance(attr, (property, classmethod, staticmethod)) \
                else "method"
    raise AttributeError(name)


def parameters(cls: type, name: str) -> list[inspect.Parameter]:
    attr = inspect.getattr_static(cls, name)
    fn = attr.__func__ if isinstance(attr, (classmethod, staticmethod)) else attr
    params = list(inspect.signature(fn).parameters.values())
    return params[1:] if not isinstance(attr, staticmethod) else params


def accepts(ours: list[inspect.Parameter], theirs: list[inspect.Parameter]) -> bool:
    """Whether a method with parameters `ours` takes every call vLLM makes with `theirs`:
    the same positional names in order, then only parameters with defaults, or **kwargs
    where theirs has it."""
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    want = [p.name for p in theirs if p.kind in positional]
    have = [p.name for p in ours if p.kind in positional]
    if have[:len(want)] != want:
        return False
    extra = [p for p in ours if p.kind in positional][len(want):]
    if any(p.default is inspect.Parameter.empty for p in extra):
        return False
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in theirs):
        return any(p.kind == inspect.Parameter.VAR_KEYWORD for p in ours)
    return True


def own_public(cls: type) -> list[str]:
    return sorted(n for n in vars(cls) if not n.startswith("_"))


def test_every_abstract_method_is_implemented():
    assert BASE.__abstractmethods__, "the installed base declares no abstract method"
    missing = sorted(m for m in BASE.__abstractmethods__ if m not in vars(KvtierConnector))
    assert not missing and not KvtierConnector.__abstractmethods__, missing


@pytest.mark.parametrize("name", own_public(KvtierConnector))
def test_what_kvtier_defines_is_what_vllm_calls(name):
    """Each public member of KvtierConnector overrides one of the base, bound the same
    way, taking every argument vLLM passes (a member vLLM no longer has is dead code)."""
    assert hasattr(BASE, name), f"{name}: the installed KVConnectorBase_V1 has no such member"
    assert kind(KvtierConnector, name) == kind(BASE, name)
    if kind(BASE, name) != "property":
        theirs, ours = parameters(BASE, name), parameters(KvtierConnector, name)
        assert accepts(ours, theirs), f"{name}{inspect.signature(getattr(BASE, name))} vs ours " \
            f"{[p.name for p in ours]}"


def load_stub_base() -> ModuleType:
    path = SRC / "tests" / "python" / "stubs" / "vllm" / "distributed" / "kv_transfer" / \
        "kv_connector" / "v1" / "base.py"
    spec = importlib.util.spec_from_file_location("kvtier_stub_base", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.pop("kvtier_stub_base", None)
    return module


STUB = load_stub_base()


@pytest.mark.parametrize("name", own_public(STUB.KVConnectorBase_V1))
def test_the_stand_in_base_agrees_with_vllm(name):
    assert hasattr(BASE, name), f"the stand-in has {name}; the installed vLLM does not"
    assert kind(STUB.KVConnectorBase_V1, name) == kind(BASE, name)
    if kind(BASE, name) != "property":
        theirs = [p.name for p in parameters(BASE, name)]
        stub = [p.name for p in parameters(STUB.KVConnectorBase_V1, name)]
        assert stub == theirs, f"{name}: the stand-in takes {stub}, vLLM {theirs}"


def test_the_stand_in_abstract_methods_are_vllms():
    stub_abstract = {n for n in own_public(STUB.KVConnectorBase_V1)
                     if kind(STUB.KVConnectorBase_V1, n) == "method" and
                     "raise NotImplementedError" in inspect.getsource(
                         getattr(STUB.KVConnectorBase_V1, n))}
    assert stub_abstract == set(BASE.__abstractmethods__)


def test_the_stand_in_roles_are_vllms():
    assert {r.name: r.value for r in STUB.KVConnectorRole} == \
        {r.name: r.value for r in vllm_base.KVConnectorRole}
