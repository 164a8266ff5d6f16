"""The AWS actions a function's code can cause, read from its source: the boto3 client
calls reachable from its handler.

Reachable is over-approximated by name, which is safe for a least-privilege check (a call
counted that never happens keeps a grant, it never removes a needed one): from the
handler, and from what the frameworks call (route and resolver functions, registered by
decorators), every function or method whose name is called or referenced is followed,
in the modules the handler imports (grimp's import graph, lazy imports included, and
modules imported by their name). Receivers are typed by annotations: parameters, nested
functions' too, annotated variables, attributes and what functions return. Constructing
one of our classes follows its ``__init__`` and its other dunders (and those it
inherits); if it subclasses what is not ours or is handed to it as an argument, also its
methods no code of ours calls, their names written only in functions of that name (a
framework's hooks: A2A's ``on_cancel_task``). Names
bound to what is not ours (an imported library, a compiled pattern, a response's field)
are not followed. The boto3 clients made on the way (``aws.client("s3", ...)``) are
recorded too: a function's bundle has only its services' models.
"""

from __future__ import annotations

import ast
import builtins
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import botocore.session
import grimp
from botocore import xform_name

REPO = Path(__file__).resolve().parents[2]
# boto3 service name -> IAM prefix
PREFIXES = {"dynamodb": "dynamodb", "s3": "s3", "sqs": "sqs",
            "secretsmanager": "secretsmanager", "bedrock-runtime": "bedrock",
            "s3vectors": "s3vectors", "cognito-idp": "cognito-idp",
            "cloudformation": "cloudformation"}
# Operations authorised by another action than their own name.
AUTHORISED_AS = {
    "s3:HeadObject": "s3:GetObject",
    "s3:ListObjectsV2": "s3:ListBucket",
    "s3:ListObjectVersions": "s3:ListBucketVersions",
    "bedrock:Converse": "bedrock:InvokeModel",
    "bedrock:ConverseStream": "bedrock:InvokeModelWithResponseStream",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}
# A transaction is authorised item by item: its items' kinds, as the code spells them.
TRANSACTION_ITEMS = {"Put": "dynamodb:PutItem", "Update": "dynamodb:UpdateItem",
                     "Delete": "dynamodb:DeleteItem",
                     "ConditionCheck": "dynamodb:ConditionCheckItem"}
TRANSACTIONS = {"dynamodb:TransactWriteItems", "dynamodb:TransactGetItems"}
# Modules of helpers over a client another module hands them: their calls count for the
# module that called the helper (a store's, so they are on its table).
HELPER_MODULES = {"codeshot.store.dynamo"}
# The class of what is not ours (an imported library, a compiled regular expression).
EXTERNAL = "external"
# What makes a boto3 client of the service its first argument names: aws.client("s3"),
# aws.py's own _client("bedrock-runtime", ...), boto3.client("s3").
CLIENT_MAKERS = {"client", "_client"}
NOT_OPERATIONS = {"generate_presigned_url", "generate_presigned_post", "get_paginator",
                  "get_waiter", "can_paginate", "close"}
# Called on a receiver of unknown type, these are taken as the builtin types' methods, not
# ours of the same name (our stores' get, delete ... are reached through typed receivers).
BUILTIN_METHODS = {name for kind in (dict, list, str, set, bytes)
                   for name in dir(kind) if not name.startswith("_")} | {
    "client",  # boto3's session.client(service), not our properties of that name
    "__init__"}  # super().__init__(...): a class's own and inherited ones are followed
# list(...), dict[str, str] ...: the builtins, not our functions of the same name.
BUILTIN_NAMES = set(dir(builtins))
# Bases that are no framework calling its subclasses' methods.
TYPING_BASES = {"Protocol", "ABC", "object"}
# Decorators that do not hand a function to a framework.
PLAIN_DECORATORS = {"cache", "lru_cache", "cached_property", "property", "staticmethod",
                    "classmethod", "contextmanager", "asynccontextmanager", "overload",
                    "wraps", "setter", "dataclass", "override", "abstractmethod"}


@cache
def _methods(services: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """boto3 method name -> the IAM actions of that operation in ``services``."""
    session = botocore.session.get_session()
    methods: dict[str, set[str]] = {}
    for service in services:
        model = session.get_service_model(service)
        for operation in model.operation_names:
            if model.operation_model(operation).auth_type == "none":
                continue  # unsigned (Cognito's SignUp, InitiateAuth ...): no IAM action
            action = f"{PREFIXES[service]}:{operation}"
            methods.setdefault(xform_name(operation), set()).add(
                AUTHORISED_AS.get(action, action))
    return {k: frozenset(v) for k, v in methods.items()}


def _path(module: str) -> Path:
    path = REPO / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def handler_modules(handler_module: str) -> list[Path]:
    """The source files of ``handler_module`` and every module of ours it imports, by an
    import statement or by its name (the API's ``LazyEndpoint("codeshot.api.mcp")``,
    imported on its first request: the import graph has no edge to it)."""
    graph = grimp.build_graph("codeshot", "handlers", exclude_type_checking_imports=True,
                              cache_dir=None)
    names, pending = set(), [handler_module]
    while pending:
        module = pending.pop()
        if module in names:
            continue
        imported = {module} | graph.find_upstream_modules(module)
        names |= imported
        pending += [node.value for name in imported
                    for node in ast.walk(ast.parse(_path(name).read_text()))
                    if isinstance(node, ast.Constant) and node.value in graph.modules]
    return sorted(_path(name) for name in names)


@dataclass
class _Body:
    """What one function (or a module's top level) refers to and which boto3 calls it
    makes. A reference is a name, or (class, name) where the receiver's class is known
    from an annotation: ``self.x()``, ``self.store.x()`` (``store: SessionStore``),
    ``services.sessions.x()`` (a property returning SessionStore), ``registry.x()`` (a
    parameter ``registry: AgentRegistry``) or ``thing = Thing(...); thing.x()``."""

    cls: str | None
    module: str = ""  # where it is written: which store's table its calls are on
    references: set[tuple[str | None, str]] = field(default_factory=set)
    calls: set[str] = field(default_factory=set)  # boto3 method names; "get_object" for
    #                                               a presigned GET
    transaction_items: set[str] = field(default_factory=set)
    clients: set[str] = field(default_factory=set)  # services of the boto3 clients made


@dataclass
class _Types:
    classes: set[str]
    attributes: dict[str, str]  # attribute name -> class, where only one class is named
    members: dict[tuple[str, str], str]  # (class, attribute) -> class
    modules: dict[str, str] = field(default_factory=dict)  # this file's module aliases
    external: set[str] = field(default_factory=set)  # names of what is not ours: re, ...
    # (module or None for "the only one of that name", function) -> the classes it returns
    # (one, or a tuple's), and the module being read
    returns: dict[tuple[str | None, str], list[str | None]] = field(default_factory=dict)
    module: str = ""

    def made_by(self, call: ast.expr) -> list[str | None]:
        """The classes of what ``call`` returns: a constructor's, or an annotated
        function's (a tuple's item by item)."""
        if not isinstance(call, ast.Call):
            return []
        func = call.func
        if made := self.of(func):
            return [made]
        name = func.id if isinstance(func, ast.Name) else \
            func.attr if isinstance(func, ast.Attribute) else ""
        return self.returns.get((self.module, name)) or self.returns.get((None, name)) or []

    def returned(self, node: ast.expr | None) -> list[str | None]:
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and \
                node.value.id == "tuple" and isinstance(node.slice, ast.Tuple):
            return [self.of(e) for e in node.slice.elts]
        return [self.of(node)] if self.of(node) else []

    def of(self, node: ast.expr | None) -> str | None:
        """The class an annotation names, if it is one of ours."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node = ast.parse(node.value, mode="eval").body
        if isinstance(node, ast.BinOp):  # X | None
            return self.of(node.left) or self.of(node.right)
        name = node.id if isinstance(node, ast.Name) else \
            node.attr if isinstance(node, ast.Attribute) else None
        return name if name in self.classes else None


def _receiver_class(receiver: ast.expr, cls: str | None, types: _Types,
                    local: dict[str, str]) -> str | None:
    if isinstance(receiver, ast.Name):
        if receiver.id == "self":
            return cls
        if receiver.id in local:  # a parameter or local variable, typed or not
            return local[receiver.id] or None
        if receiver.id in types.classes:  # Work.purge(...): its classmethod, not others'
            return receiver.id
        if receiver.id in types.external:
            return EXTERNAL
        return types.modules.get(receiver.id)
    if isinstance(receiver, ast.Subscript) and isinstance(receiver.slice, ast.Constant) and \
            isinstance(receiver.slice.value, str):
        return EXTERNAL  # a response's field (out["body"].read()): botocore's, not ours
    if isinstance(receiver, ast.Call):
        made = types.made_by(receiver)
        if not made and isinstance(receiver.func, ast.Attribute):  # self.index().search()
            owner = _receiver_class(receiver.func.value, cls, types, local)
            return types.members.get((owner, receiver.func.attr)) if owner else None
        return made[0] if len(made) == 1 else None
    if isinstance(receiver, ast.Attribute):
        owner = _receiver_class(receiver.value, cls, types, local)
        if owner and (owner, receiver.attr) in types.members:
            return types.members[(owner, receiver.attr)]
        return types.attributes.get(receiver.attr)
    return None


def _value_class(value: ast.expr, cls: str | None, types: _Types,
                 local: dict[str, str]) -> str | None:
    """The class of a value: made by a call, or a typed attribute (``services.storage``)."""
    if isinstance(value, ast.Attribute):
        owner = _receiver_class(value.value, cls, types, local)
        return types.members.get((owner, value.attr)) if owner else \
            types.attributes.get(value.attr)
    made = types.made_by(value)
    return made[0] if len(made) == 1 else None


def _scan(nodes: Iterable[ast.AST], cls: str | None, types: _Types,
          local: dict[str, str] | None = None) -> _Body:
    body, local = _Body(cls, types.module), dict(local or {})
    nodes = list(nodes)
    bound: set[str] = set(local)  # names bound here are not functions of ours
    for top in nodes:  # local variables made by a constructor or a typed function
        for node in ast.walk(top):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.add(node.id)
            elif isinstance(node, ast.arg):  # a nested function's or a lambda's parameter
                bound.add(node.arg)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):  # read here as
                bound.add(node.name)  # part of this body: its name is not another's
            # typed where it is bound: ``def jwks(s: Services)`` inside create_app,
            # ``services: Services = request.app.state.services``
            if isinstance(node, ast.arg) and (kind := types.of(node.annotation)):
                local[node.arg] = kind
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                    (kind := types.of(node.annotation) or (
                        _value_class(node.value, cls, types, local) if node.value else None)):
                local[node.target.id] = kind
            if not isinstance(node, ast.Assign):
                continue
            if made := _value_class(node.value, cls, types, local):
                local |= {t.id: made for t in node.targets if isinstance(t, ast.Name)}
            for target in node.targets:  # reg, values = _registration(...)
                items = types.made_by(node.value)
                if isinstance(target, ast.Tuple) and len(items) == len(target.elts) > 1:
                    local |= {t.id: k for t, k in zip(target.elts, items, strict=True)
                              if isinstance(t, ast.Name) and k}
    for top in nodes:
        called = {id(n.func) for n in ast.walk(top)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
        for node in ast.walk(top):
            if isinstance(node, ast.Attribute) and id(node) not in called:
                body.references.add(
                    (_receiver_class(node.value, cls, types, local), node.attr))
            elif isinstance(node, ast.Name) and node.id not in bound | BUILTIN_NAMES:
                body.references.add((None, node.id))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in CLIENT_MAKERS and node.args and \
                    isinstance(node.args[0], ast.Constant):  # aws.py's _client("bedrock-runtime")
                body.clients.add(str(node.args[0].value))
            elif isinstance(node, ast.Dict):
                body.transaction_items |= {k.value for k in node.keys if isinstance(
                    k, ast.Constant) and k.value in TRANSACTION_ITEMS}
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            name = node.func.attr
            receiver = _receiver_class(node.func.value, cls, types, local)
            if name in CLIENT_MAKERS and node.args and isinstance(node.args[0], ast.Constant):
                body.clients.add(str(node.args[0].value))
            if name == "generate_presigned_url" and node.args and \
                    isinstance(node.args[0], ast.Constant):
                body.calls.add(str(node.args[0].value))
            elif name not in NOT_OPERATIONS and not (receiver or "").startswith("module:"):
                body.calls.add(name)  # accounts.list_users(...) is ours, not Cognito's
            body.references.add((receiver, name))
    return body


def _names(tree: ast.AST) -> Counter[str]:
    """How often each name is written in ``tree``: as a variable, an attribute or a string
    (``getattr(x, "name")``)."""
    return Counter(node.id if isinstance(node, ast.Name) else
                   node.attr if isinstance(node, ast.Attribute) else str(node.value)
                   for node in ast.walk(tree) if isinstance(node, (ast.Name, ast.Attribute))
                   or (isinstance(node, ast.Constant) and isinstance(node.value, str)))


@cache
def _written_in(path: Path) -> Counter[str]:
    """The names ``path`` writes, but where a function of that name writes its own
    (``super().get_route_handler()``, a recursion)."""
    tree = ast.parse(path.read_text())
    return _names(tree) - sum((Counter({f.name: _names(f)[f.name]}) for f in ast.walk(tree)
                               if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))),
                              Counter())


def _written(files: list[Path]) -> Counter[str]:
    """The names our code writes, all of it (and ``files``): a method whose name is
    written nowhere but in functions of that name is called by what is not ours (a
    framework's hook, a duck-typed protocol's method: A2A's ``on_cancel_task``, the MCP
    SDK's ``verify_token``), or by nothing."""
    written: Counter[str] = Counter()
    for path in {p for package in ("codeshot", "handlers") for p in (REPO / package).rglob(
            "*.py")} | {p.resolve() for p in files}:
        written.update(_written_in(path))
    return written


def _handed_over(trees: list[ast.Module], modules: list[str], ours: set[str]) -> set[str]:
    """Our classes whose objects what is not ours may call: a framework's subclasses
    (A2A's ``RequestHandler``), and those made as a call's argument (the MCP SDK's
    ``BearerAuthBackend(ApiKeyVerifier(services))``, a duck-typed protocol)."""
    handed, packages = set(), {m.split(".")[0] for m in modules}
    for tree in trees:
        imported = {a.asname or a.name for node in ast.walk(tree)  # a2a's User, not ours
                    if isinstance(node, ast.ImportFrom) and not node.level and
                    (node.module or "").split(".")[0] not in packages
                    for a in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                    not (isinstance(b, ast.Name) and b.id in ours - imported | TYPING_BASES)
                    for b in node.bases if not isinstance(b, ast.Subscript)):
                handed.add(node.name)
            elif isinstance(node, ast.Call):
                handed |= {_decorator_name(a) for a in node.args + [
                    k.value for k in node.keywords] if isinstance(a, ast.Call)} & ours
    return handed


def _module_aliases(tree: ast.Module, modules: set[str]) -> dict[str, str]:
    """Names this file binds to our modules: ``from codeshot.usecases import users``."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in modules:
                    aliases[alias.asname or alias.name] = f"module:{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            aliases |= {a.asname: f"module:{a.name}" for a in node.names
                        if a.asname and a.name in modules}
    return aliases


def _external(tree: ast.Module, modules: set[str]) -> set[str]:
    """Names whose methods are not ours: modules imported that are not ours (``re.search``)
    and module-level ``_X = re.compile(...)`` (``_X.search``)."""
    imported = {a.asname or a.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for a in node.names
                if not a.name.startswith(("codeshot", "handlers"))}
    return imported | {t.id for node in tree.body if isinstance(node, ast.Assign)
                       and isinstance(node.value, ast.Call)
                       and isinstance(node.value.func, ast.Attribute)
                       and node.value.func.attr == "compile" for t in node.targets
                       if isinstance(t, ast.Name)}


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return target.attr if isinstance(target, ast.Attribute) else \
        target.id if isinstance(target, ast.Name) else ""


def _pairs(node: ast.Assign) -> list[tuple[ast.expr, ast.expr]]:
    """(target, value) of ``self.x = x`` and of ``self.x, self.y = x, y``."""
    pairs = [(t, node.value) for t in node.targets]
    for target in node.targets:
        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) and \
                len(target.elts) == len(node.value.elts):
            pairs += zip(target.elts, node.value.elts, strict=True)
    return pairs


def _types(trees: list[ast.Module], modules: list[str], bases: dict[str, list[str]]
           ) -> _Types:
    """What annotations say about attributes: properties' return types, class-level
    annotations, ``self.x = x`` of an annotated ``__init__`` parameter; and constructors,
    ``self.x = Store(settings)``."""
    types = _Types(set(bases), {}, {})
    named: dict[str, set[str]] = {}
    for tree in trees:
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for item in cls.body:
                found: dict[str, str | None] = {}
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[item.name] = types.of(item.returns)
                    params = {a.arg: types.of(a.annotation) for a in item.args.posonlyargs
                              + item.args.args + item.args.kwonlyargs}
                    for node in ast.walk(item):
                        if isinstance(node, ast.AnnAssign) and isinstance(
                                node.target, ast.Attribute):
                            found[node.target.attr] = types.of(node.annotation)
                        elif isinstance(node, ast.Assign):
                            found |= {t.attr: params[v.id] for t, v in _pairs(node)
                                      if isinstance(t, ast.Attribute) and
                                      isinstance(v, ast.Name) and params.get(v.id)}
                            found |= {t.attr: types.of(v.func) for t, v in _pairs(node)
                                      if isinstance(t, ast.Attribute) and
                                      isinstance(v, ast.Call) and types.of(v.func)}
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    found[item.target.id] = types.of(item.annotation)
                for attr, kind in found.items():
                    if kind:
                        types.members[(cls.name, attr)] = kind
                        named.setdefault(attr, set()).add(kind)
    types.attributes = {attr: next(iter(c)) for attr, c in named.items() if len(c) == 1}
    by_name: dict[str, list[list[str | None]]] = {}
    for tree, module in zip(trees, modules, strict=True):
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    (kinds := types.returned(node.returns)):
                types.returns[(module, node.name)] = kinds
                by_name.setdefault(node.name, []).append(kinds)
    types.returns |= {(None, name): k[0] for name, k in by_name.items() if len(k) == 1}
    return types


def actions_called(files: Iterable[Path], services: tuple[str, ...],
                   entry: str = "handler") -> dict[str, str]:
    """The IAM actions of the boto3 calls of ``services`` reachable from ``entry``, module
    top levels and framework-registered functions in ``files``, each with a path of
    references that reaches it (for messages)."""
    actions: dict[str, str] = {}
    for (action, _), via in calls_by_module(files, services, entry).items():
        actions.setdefault(action, via)
    return actions


def calls_by_module(files: Iterable[Path], services: tuple[str, ...],
                    entry: str = "handler") -> dict[tuple[str, str], str]:
    """As :func:`actions_called`, keyed by (action, the module whose code makes the call):
    a store module's calls are on its own table."""
    methods = _methods(services)
    actions: dict[tuple[str, str], str] = {}
    for body, module, path in _reached(files, entry):
        called = {a for c in body.calls for a in methods.get(c, ())}
        if called & TRANSACTIONS:
            called |= {TRANSACTION_ITEMS[k] for k in body.transaction_items}
        for action in called - TRANSACTIONS:
            actions.setdefault((action, module), path)
    return actions


def clients_made(files: Iterable[Path], entry: str = "handler") -> dict[str, str]:
    """The services of the boto3 clients the code reachable from ``entry`` makes
    (``aws.client("cognito-idp", ...)``), each with a path that reaches it: a function's
    bundle keeps only its ``aws_services``' models, so any other fails to be made."""
    made: dict[str, str] = {}
    for body, _, path in _reached(files, entry):
        for service in body.clients:
            made.setdefault(service, path)
    return made


def _reached(files: Iterable[Path], entry: str) -> list[tuple[_Body, str, str]]:
    """Each body reachable from ``entry``, module top levels and framework-registered
    functions, with the module its calls count for and a path of references to it."""
    files = list(files)
    trees = [ast.parse(path.read_text(), str(path)) for path in files]
    module_names = [".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(
        ".__init__") for p in files]
    bases: dict[str, list[str]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, []).extend(
                    b.id for b in node.bases if isinstance(b, ast.Name))
    types = _types(trees, module_names, bases)
    subclasses: dict[str, list[str]] = {}
    for name, parents in bases.items():
        for parent in parents:
            subclasses.setdefault(parent, []).append(name)
    by_name: dict[str, list[_Body]] = {}
    by_class: dict[tuple[str, str], list[_Body]] = {}
    # class -> the methods Python calls (dunders), and those no code of ours names
    dunders: dict[str, list[_Body]] = {}
    unnamed: dict[str, list[_Body]] = {}
    written, handed = _written(files), _handed_over(trees, module_names, set(bases))
    roots: list[_Body] = []

    def define(node: ast.FunctionDef | ast.AsyncFunctionDef, cls: str | None,
               module: str) -> None:
        args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs + \
            [a for a in (node.args.vararg, node.args.kwarg) if a]
        params = {a.arg: types.of(a.annotation) or "" for a in args}
        body = _scan(node.body, cls, types, params)
        for decorator in node.decorator_list:  # @retried, not @router.delete("/x")
            body.references |= {(None, n.id) for n in ast.walk(decorator)
                                if isinstance(n, ast.Name)}
        by_name.setdefault(node.name, []).append(body)
        by_class.setdefault((cls or f"module:{module}", node.name), []).append(body)
        if cls and node.name.startswith("__") and node.name.endswith("__"):
            dunders.setdefault(cls, []).append(body)
        elif cls and not written[node.name]:
            unnamed.setdefault(cls, []).append(body)
        if any(_decorator_name(d) not in PLAIN_DECORATORS for d in node.decorator_list):
            roots.append(body)  # handed to a framework (a route, a resolver)

    for tree, module in zip(trees, module_names, strict=True):
        types.modules = _module_aliases(tree, set(module_names))
        types.external = _external(tree, set(module_names))
        types.module = module
        rest = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                define(node, None, module)
            elif isinstance(node, ast.ClassDef):
                inner = []
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        define(item, node.name, module)
                    else:
                        inner.append(item)
                roots.append(_scan(inner, node.name, types))  # a class body runs
            else:
                rest.append(node)
        roots.append(_scan(rest, None, types))  # so does a module's top level

    def closure(cls: str, edges: dict[str, list[str]]) -> set[str]:
        out, pending = set(), [cls]
        while pending:
            current = pending.pop()
            if current not in out:
                out.add(current)
                pending += edges.get(current, [])
        return out

    def related(cls: str) -> set[str]:
        """The class, what it inherits from and what inherits from it (the object may be
        a subclass)."""
        return closure(cls, bases) | closure(cls, subclasses)

    def targets(cls: str | None, name: str) -> list[_Body]:
        if cls is None and name in BUILTIN_METHODS:
            return []  # d.get(k), s.index(x) ...: taken as the builtin's
        if cls is None and name in bases:  # Store(settings): its (inherited) __init__ runs,
            # as may its other dunders (an ASGI app's __call__); handed to what is
            # not ours, so may its other methods our code never names (a framework's hooks)
            made = closure(name, bases)
            hooks = unnamed if made & handed else {}
            return [b for c in made for b in dunders.get(c, []) + hooks.get(c, [])]
        if cls == EXTERNAL:
            return []
        if cls is not None and cls.startswith("module:"):
            return by_class.get((cls, name), [])
        if cls is None or "Protocol" in {b for c in related(cls) for b in bases.get(c, [])}:
            return by_name.get(name, [])
        return [b for c in related(cls) for b in by_class.get((c, name), [])]

    roots += by_name.get(entry, [])
    # A body is visited once per module its calls count for: its own, or for a shared
    # helper's (HELPER_MODULES), each store module that reaches it.
    via: dict[tuple[int, str], str] = {(id(r), r.module): "" for r in roots}
    pending = [(r, r.module) for r in roots]
    seen: set[tuple[int, str]] = set()
    reached: list[tuple[_Body, str, str]] = []
    while pending:  # breadth first: the paths are short ones
        body, module = pending.pop(0)
        if (id(body), module) in seen:
            continue
        seen.add((id(body), module))
        path = via[(id(body), module)]
        reached.append((body, module, path))
        for cls, name in body.references:
            for target in targets(cls, name):
                counts_for = module if target.module in HELPER_MODULES else target.module
                via.setdefault((id(target), counts_for), f"{path} > {cls or ''}.{name}".strip())
                pending.append((target, counts_for))
    return reached
