"""A griffe extension for the API reference (loaded by mkdocs.yml; not part of the package).

Two jobs, both on the package as griffe loaded it (statically), before anything is rendered:

* A blocking twin's method without a docstring takes its async twin's (``StateStoreDict.pop`` reads as
  ``AsyncStateStoreDict.pop``), and the other way round: the blocking class is by design a thin facade with the
  same parameters (the twin tests check that), so its prose lives once.
* A property without a docstring that hands back a constructor argument takes that argument's ``Args:`` entry
  from the class docstring (``AsyncStateStoreCache.codec``).
  Likewise a framework adapter's ``aget`` without a docstring takes ``get``'s (Django's ``a*`` convention).
* A module attribute documented by ``#:`` comments right above it (the Sphinx convention this code uses) takes
  them as its docstring.
* reST roles in docstrings (``:class:`Codec` ``) render as inline code, and a doctest under ``Example:`` as code
  (without its ``# doctest: +SKIP`` marks).
* A parameter the docstring documents together with others (``host, port: the broker.``), or one that travels
  on through ``**options``, gets the defaults of the signature (or "optional"), so the reference does not call
  it *required*: only a parameter without a default is.
* Every name in ``sskv_mapping.__all__``, every name in each framework adapter's ``__all__``, and each public
  method or property of those classes must have a docstring: one that has none is logged as a warning, which
  ``mkdocs build --strict`` turns into a failed build.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import griffe

PACKAGE = "sskv_mapping"
ADAPTERS = ("django", "flask_caching", "litestar", "aiocache", "fastapi")

_logger = griffe.get_logger("sskv_docs")
# reST roles (``:class:`~sskv_mapping.Codec` ``) as the code's docstrings write them; Markdown shows them as code
_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj):`~?([^`]+)`")
# "Example:" is an admonition to the Google parser; with a doctest under it, it is an "Examples:" section
_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*\n(?=\s*>>>)", re.MULTILINE)
_SKIP = re.compile(r"[ \t]*# doctest: \+SKIP")


def _target(obj: Any) -> Any:
    return obj.final_target if obj.is_alias else obj


def _has_docstring(obj: Any) -> bool:
    return obj.docstring is not None and bool(obj.docstring.value.strip())


def _public_methods(cls: Any) -> list[tuple[str, Any]]:
    found = []
    for name, member in cls.members.items():
        if name.startswith("_"):
            continue
        member = _target(member)
        if member.is_function or (member.is_attribute and "property" in member.labels):
            found.append((name, member))
    return found


def _comment_docstring(obj: Any) -> None:
    """An attribute documented Sphinx-style, by ``#:`` comment lines right above it, gets them as its docstring."""
    if _has_docstring(obj) or not obj.is_attribute or obj.lineno is None:
        return
    lines = obj.module.lines
    found: list[str] = []
    index = obj.lineno - 2
    while index >= 0 and lines[index].strip().startswith("#:"):
        found.insert(0, lines[index].strip()[2:].strip())
        index -= 1
    if found:
        obj.docstring = griffe.Docstring(" ".join(found), lineno=index + 2, parent=obj)
        _plain_roles(obj)


def _borrow(member: Any, source: Any) -> None:
    if not _has_docstring(member) and source is not None and _has_docstring(_target(source)):
        doc = _target(source).docstring
        member.docstring = griffe.Docstring(doc.value, lineno=doc.lineno, parent=member)


def _plain_roles(obj: Any) -> None:
    if obj.docstring is not None:
        value = _ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", obj.docstring.value)
        obj.docstring.value = _SKIP.sub("", _EXAMPLE.sub(r"\1Examples:\n", value))
    for member in obj.members.values():
        if not member.is_alias:
            _plain_roles(member)  # the whole package: aliases reach their targets this way


def _properties_from_args(cls: Any) -> None:
    """A property that hands back a constructor argument is documented by that argument's ``Args:`` entry."""
    if not _has_docstring(cls):
        return
    args = {}
    for section in cls.docstring.parsed:
        if section.kind is griffe.DocstringSectionKind.parameters:
            args.update({param.name: param.description for param in section.value})
    for name, member in _public_methods(cls):
        if member.is_attribute and not _has_docstring(member) and args.get(name):
            member.docstring = griffe.Docstring(args[name], lineno=cls.docstring.lineno, parent=member)


def _signature_defaults(obj: Any) -> dict[str, Any] | None:
    """Each parameter of a function's (or a class's ``__init__``'s) signature and its default (``None``: none)."""
    function = obj
    if obj.is_class:
        function = obj.members.get("__init__")
        if function is None or function.is_alias:
            return None
    if not function.is_function:
        return None
    return {param.name: param.default for param in function.parameters}


def _group_defaults(obj: Any) -> None:
    """A documented parameter without a default is *required* to mkdocstrings; that is only true of the ones whose
    signature has no default. Grouped entries (``host, port``) and names passed on through ``**options`` get
    theirs here: the signature's defaults, or "optional"."""
    if obj.is_alias:
        return
    if (obj.is_function or obj.is_class) and _has_docstring(obj):
        signature = _signature_defaults(obj)
        for section in obj.docstring.parsed if signature is not None else ():
            if section.kind is not griffe.DocstringSectionKind.parameters:
                continue
            for param in section.value:
                if param.value is not None:
                    continue
                names = [name.strip() for name in param.name.split(",")]
                if any(name in signature and signature[name] is None for name in names):
                    continue  # really required
                if all(name in signature for name in names):
                    param.value = ", ".join(str(signature[name]) for name in names)
                else:
                    param.value = "optional"  # some travel through **options to where their defaults are
    for member in obj.members.values():
        if not member.is_alias:
            _group_defaults(member)


class PublicDocstrings(griffe.Extension):
    """Twin docstrings first, then the check that every public name has one."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != PACKAGE:
            return
        exported = list(importlib.import_module(PACKAGE).__all__)
        classes = {name: _target(pkg[name]) for name in exported if _target(pkg[name]).is_class}
        _plain_roles(pkg)
        for name, cls in classes.items():
            twin = classes.get(f"Async{name}")
            if twin is not None:
                for method_name, method in _public_methods(cls):
                    _borrow(method, twin.members.get(method_name))
                for method_name, method in _public_methods(twin):
                    _borrow(method, cls.members.get(method_name))
        for cls in classes.values():
            _properties_from_args(cls)
        _group_defaults(pkg)
        targets = [(f"{PACKAGE}.{name}", _target(pkg[name])) for name in exported]
        for adapter in ADAPTERS:
            module = pkg[f"integrations.{adapter}"]
            for name in module.exports or ():
                targets.append((f"{PACKAGE}.integrations.{adapter}.{name}", _target(module[str(name)])))
        for _path, obj in targets:
            if obj.is_class:
                for method_name, method in _public_methods(obj):
                    if method_name.startswith("a") and method_name[1:] in obj.members:
                        _borrow(method, obj.members[method_name[1:]])
        for path, obj in targets:
            _comment_docstring(obj)
            if not _has_docstring(obj):
                _logger.warning(f"{path} has no docstring ({obj.relative_filepath}:{obj.lineno})")
            if obj.is_class:
                for method_name, method in _public_methods(obj):
                    if not _has_docstring(method):
                        _logger.warning(
                            f"{path}.{method_name} has no docstring ({method.relative_filepath}:{method.lineno})"
                        )
