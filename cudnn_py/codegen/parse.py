"""Read the cuDNN headers into a :mod:`model`: preprocess with ``cpp`` and the stubs, parse with pycparser; each
declaration belongs to the header cpp's line markers name. What the preprocessor erases is read from the raw text:
``CUDNN_DEPRECATED`` marks, ``@brief``/``@deprecated`` comments, and the object-like ``#define CUDNN_*`` constants
(their values evaluated by the same preprocessor, so ``(1U << CUDNN_SEV_ERROR)`` comes out right).
"""
from __future__ import annotations

import contextlib
import operator
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from pycparser import c_ast, c_generator, c_parser

from . import lengths, model, nonnull

#: header file -> capi module, in include order (a module may use names of those before it)
HEADERS = {
    "library_types.h": "cuda_types",
    "cuda_runtime_api.h": "cuda_types",
    "cudnn_version.h": "version",
    "cudnn_graph.h": "graph",
    "cudnn_ops.h": "ops",
    "cudnn_adv.h": "adv",
    "cudnn_cnn.h": "cnn",
    "cudnn_subquadratic_ops.h": "subquadratic_ops",
    "cudnn_gnn_ops.h": "gnn_ops",
}
MODULES = list(dict.fromkeys(HEADERS.values()))

_SCALARS = {
    "void": "None", "char": "_ct.c_char", "signed char": "_ct.c_byte", "unsigned char": "_ct.c_ubyte",
    "short": "_ct.c_short", "unsigned short": "_ct.c_ushort", "int": "_ct.c_int", "signed int": "_ct.c_int",
    "unsigned": "_ct.c_uint", "unsigned int": "_ct.c_uint", "long": "_ct.c_long", "unsigned long": "_ct.c_ulong",
    "long long": "_ct.c_longlong", "unsigned long long": "_ct.c_ulonglong", "float": "_ct.c_float",
    "double": "_ct.c_double", "size_t": "_ct.c_size_t", "intptr_t": "_ct.c_ssize_t", "uintptr_t": "_ct.c_size_t",
    "ptrdiff_t": "_ct.c_ssize_t", **{f"{u}int{n}_t": f"_ct.c_{u}int{n}" for u in ("", "u") for n in (8, 16, 32, 64)},
}
_NOT_CONSTANTS = {"CUDNNWINAPI", "CUDNN_DEPRECATED", "CUDNN_DEPRECATED_ENUM"}
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(CUDNN\w*)(?![\w(])[ \t]+(\S[^\n]*)$", re.M)
_DEP_FUNC = re.compile(r"CUDNN_DEPRECATED\s+[\w\s*]*?\bCUDNNWINAPI\s+(\w+)\s*\(")
_DEP_TYPEDEF = re.compile(r"typedef[^;{}]*?\b(\w+)\s+CUDNN_DEPRECATED\s*;")
_DEP_ENUM = re.compile(r"\b(\w+)\s+CUDNN_DEPRECATED_ENUM\b")
_DOC_FUNC = re.compile(r"/\*\*((?:[^*]|\*(?!/))*)\*/\s*(?:CUDNN_DEPRECATED\s+)?[\w\s*]*?\bCUDNNWINAPI\s+(\w+)\s*\(")


class HeaderError(RuntimeError):
    """The headers could not be found, preprocessed or understood."""


def find_include_dir() -> Path:
    """The include folder of the installed cuDNN (the nvidia-cudnn wheel, or CUDNN_INCLUDE_DIR)."""
    env = os.environ.get("CUDNN_INCLUDE_DIR")
    candidates = [Path(env)] if env else []
    with contextlib.suppress(Exception):  # an old cuda.pathfinder without header lookup: try the wheel layout
        from cuda.pathfinder import find_nvidia_header_directory
        found = find_nvidia_header_directory("cudnn")
        if found:
            candidates.append(Path(found))
    with contextlib.suppress(ImportError):
        import nvidia.cudnn
        candidates += [Path(p) / "include" for p in nvidia.cudnn.__path__]
    for c in candidates:
        if (c / "cudnn.h").is_file():
            return c
    raise HeaderError("cuDNN headers not found; install nvidia-cudnn-cu12 or set CUDNN_INCLUDE_DIR "
                      f"(looked in: {', '.join(map(str, candidates)) or 'nothing'})")


def _preprocess(source: str, include_dir: Path, stubs: Path) -> str:
    cpp = shutil.which("cpp")
    if cpp is None:
        raise HeaderError("the generator needs a C preprocessor: install cpp (Debian: apt-get install cpp)")
    with tempfile.NamedTemporaryFile("w", suffix=".h", delete=False) as f:
        f.write(source)
    try:
        run = subprocess.run([cpp, "-nostdinc", "-undef", "-std=c99", f"-I{stubs}", f"-I{include_dir}", f.name],
                             capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if run.returncode:
        raise HeaderError(f"cpp failed:\n{run.stderr}")
    return run.stdout


_BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "%": operator.mod,
           "<<": operator.lshift, ">>": operator.rshift, "|": operator.or_, "&": operator.and_, "^": operator.xor}
_UNARY = {"-": operator.neg, "+": operator.pos, "~": operator.invert, "!": lambda v: int(not v)}


class _Evaluator:
    """Constant expressions of enumerators and defines (ints, floats, casts, operators, names)."""

    def __init__(self):
        self.names: dict[str, int | float] = {}

    def __call__(self, node):
        if isinstance(node, c_ast.Constant):
            if node.type in ("float", "double"):
                return float(node.value.rstrip("fF"))
            if node.type == "char":
                return ord(node.value.strip("'"))
            text = node.value.rstrip("uUlL")
            return int(text, 8) if re.fullmatch(r"0\d+", text) else int(text, 0)
        if isinstance(node, c_ast.ID):
            return self.names[node.name]
        if isinstance(node, c_ast.Cast):
            return self(node.expr)
        if isinstance(node, c_ast.UnaryOp):
            return _UNARY[node.op](self(node.expr))
        if isinstance(node, c_ast.BinaryOp):
            a, b = self(node.left), self(node.right)
            if node.op == "/" and not (isinstance(a, float) or isinstance(b, float)):
                return int(a / b)  # C truncates toward zero
            return _BINARY[node.op](a, b)
        if isinstance(node, c_ast.TernaryOp):
            return self(node.iftrue) if self(node.cond) else self(node.iffalse)
        raise HeaderError(f"cannot evaluate constant expression at {node.coord}: {type(node).__name__}")


class _Reader:
    def __init__(self, headers: dict[str, model.Header]):
        self.headers = headers
        self.typedefs: dict[str, c_ast.Node] = {}      # name -> the typedef's type node
        self.enum_names: set[str] = set()
        self.type_names: set[str] = set()  # the opaque handle, struct and callback types: emitted by name
        self.evaluate = _Evaluator()

    # --- types -------------------------------------------------------------------------------
    def ctype(self, node) -> str:
        """The ctypes expression for a C type node (in a parameter, a field or a return)."""
        if isinstance(node, c_ast.TypeDecl):
            t = node.type
            if isinstance(t, c_ast.IdentifierType):
                name = " ".join(n for n in t.names if n not in ("const", "volatile"))
                if name in _SCALARS:
                    return _SCALARS[name]
                if name in self.enum_names:
                    return "_ct.c_int"
                if name in self.type_names:
                    return name
                if name in self.typedefs:
                    return self.ctype(self.typedefs[name])
                raise HeaderError(f"unknown type {name!r} at {node.coord}")
            if isinstance(t, c_ast.Enum):
                return "_ct.c_int"
            if isinstance(t, c_ast.Struct):
                return t.name
            raise HeaderError(f"unsupported type at {node.coord}")
        if isinstance(node, (c_ast.PtrDecl, c_ast.ArrayDecl)):
            inner = node.type
            if isinstance(inner, c_ast.TypeDecl) and isinstance(inner.type, c_ast.IdentifierType):
                base = " ".join(n for n in inner.type.names if n not in ("const", "volatile"))
                if base == "void":
                    return "_ct.c_void_p"
                if base == "char":
                    return "_ct.c_char_p" if "const" in (inner.quals or []) else "_ct.POINTER(_ct.c_char)"
            return f"_ct.POINTER({self.ctype(inner)})"  # a parameter's array decays to a pointer
        if isinstance(node, c_ast.FuncDecl):
            raise HeaderError(f"bare function type at {node.coord}")
        raise HeaderError(f"unsupported declarator {type(node).__name__} at {node.coord}")

    def param_type(self, node) -> str:
        """A parameter's type as the binding takes it (see ``cudnn_py.clib.binding``): enum and handle types by name
        (checked per type), ``_pointer(T)`` for a pointer C may write through, ``_array(T)`` for a pointer to
        const (also takes a sequence), ``_const_void_p`` for ``const void *``; otherwise the ctypes type."""
        if isinstance(node, c_ast.TypeDecl) and isinstance(node.type, c_ast.IdentifierType):
            name = " ".join(n for n in node.type.names if n not in ("const", "volatile"))
            if name in self.enum_names:
                return name
        ctype = self.ctype(node)
        if isinstance(node, (c_ast.PtrDecl, c_ast.ArrayDecl)):
            inner = node.type
            const = isinstance(inner, c_ast.TypeDecl) and "const" in (inner.quals or [])
            if ctype == "_ct.c_void_p":
                return "_const_void_p" if const else ctype
            if ctype.startswith("_ct.POINTER("):
                return f"{'_array' if const else '_pointer'}({ctype[len('_ct.POINTER('):-1]})"
        return ctype

    def field_ctype(self, node) -> str:
        if isinstance(node, c_ast.ArrayDecl) and node.dim is not None:
            return f"({self.ctype(node.type)} * {self.evaluate(node.dim)})"
        return self.ctype(node)

    # --- declarations ------------------------------------------------------------------------
    def header_of(self, node) -> model.Header | None:
        return self.headers.get(Path(node.coord.file).name) if node.coord else None

    def read(self, ast: c_ast.FileAST):
        for node in ast.ext:
            header = self.header_of(node)
            if isinstance(node, c_ast.Typedef):
                self.typedef(node, header)
            elif isinstance(node, c_ast.Decl):
                if isinstance(node.type, c_ast.FuncDecl) and header is not None:
                    header.functions.append(self.function(node))
                elif isinstance(node.type, c_ast.Enum) and node.type.values and header is not None:
                    self.enum(node.type.name, node.type, header)

    def typedef(self, node: c_ast.Typedef, header):
        t = node.type
        self.typedefs[node.name] = t
        if header is None:
            return
        if isinstance(t, c_ast.TypeDecl) and isinstance(t.type, c_ast.Enum):
            self.enum(node.name, t.type, header)
        elif isinstance(t, c_ast.TypeDecl) and isinstance(t.type, c_ast.Struct):
            self.type_names.add(node.name)  # with no members: an incomplete type, only pointed to
            fields = [(d.name, self.field_ctype(d.type)) for d in t.type.decls or ()]
            header.structs.append(model.Struct(node.name, fields))
        elif isinstance(t, c_ast.PtrDecl) and isinstance(t.type, c_ast.FuncDecl):
            self.type_names.add(node.name)
            fd = t.type
            args = [self.ctype(p.type) for p in self.params(fd)]
            header.callbacks.append(model.Callback(node.name, self.ctype(fd.type), args, _render(node)))
        elif isinstance(t, c_ast.PtrDecl) and isinstance(t.type, c_ast.TypeDecl):
            inner = t.type.type
            if isinstance(inner, c_ast.Struct) and not inner.decls:
                target = f"struct {inner.name}"
            elif isinstance(inner, c_ast.IdentifierType) and inner.names == ["void"]:
                target = "void"
            else:
                return
            self.type_names.add(node.name)
            header.opaques.append(model.Opaque(node.name, target, foreign=header.module == "cuda_types"))

    def enum(self, name: str, node: c_ast.Enum, header: model.Header):
        members, value = [], -1
        for e in node.values.enumerators:
            value = self.evaluate(e.value) if e.value is not None else value + 1
            self.evaluate.names[e.name] = value
            members.append((e.name, value))
        self.enum_names.add(name)
        header.enums.append(model.Enum(name, members))

    @staticmethod
    def params(fd: c_ast.FuncDecl):
        ps = fd.args.params if fd.args else []
        if len(ps) == 1 and isinstance(ps[0], c_ast.Typename) and _render_type(ps[0].type) == "void":
            return []
        return ps

    def function(self, node: c_ast.Decl) -> model.Function:
        fd = node.type
        restype = self.ctype(fd.type)
        ret_name = _render_type(fd.type)
        params = self.params(fd)
        names = [p.name or f"arg{i}" for i, p in enumerate(params)]
        args = [self.param_type(p.type) for p in params]
        return model.Function(node.name, restype, args, _render(node), ret_name == "cudnnStatus_t", params=names)


def _render_type(node) -> str:
    return c_generator.CGenerator().visit(node) if not isinstance(node, c_ast.TypeDecl) else \
        " ".join((node.quals or []) + list(getattr(node.type, "names", [getattr(node.type, "name", "")])))


def _render(node) -> str:
    return re.sub(r"\s+", " ", c_generator.CGenerator().visit(node)).strip()


def _brief(comment: str) -> tuple[str, str]:
    """(@brief text, @deprecated text) of a doc comment."""
    lines = [re.sub(r"^\s*\*\s?", "", line).rstrip() for line in comment.splitlines()]
    text = "\n".join(lines)

    def tag(name):
        m = re.search(rf"@{name}\b(.*?)(?=\n\s*\n|\n\s*@|\Z)", text, re.S)
        return re.sub(r"\s+", " ", m.group(1)).strip() if m else ""
    return tag("brief"), tag("deprecated")


def _header_text(name: str, include_dir: Path, stubs: Path) -> str:
    """The text of header ``name`` from the cuDNN include folder, else our stubs; a header an older cuDNN lacks
    (``cudnn_subquadratic_ops.h`` before 9.2x) reads as empty, giving an empty module, so capi's modules are the
    same whichever headers it is generated from."""
    for folder in (include_dir, stubs):
        if (folder / name).exists():
            return (folder / name).read_text()
    return ""


def read_headers(include_dir: Path, stubs: Path) -> tuple[str, list[model.Header]]:
    """Parse ``cudnn.h`` and everything it includes; returns (version string, headers in module order)."""
    include_dir, stubs = Path(include_dir), Path(stubs)
    raw = {f: _header_text(f, include_dir, stubs) for f in HEADERS}
    headers = {f: model.Header(f, HEADERS[f]) for f in HEADERS}
    ast = c_parser.CParser().parse(_preprocess('#include "cudnn.h"\n', include_dir, stubs), "cudnn.h")
    reader = _Reader(headers)
    reader.read(ast)

    # constants that only the preprocessor knows: let cpp expand them, then evaluate the expansion
    defines = [(f, m.group(1)) for f, text in raw.items() for m in _DEFINE.finditer(text)
               if m.group(1) not in _NOT_CONSTANTS and not m.group(1).endswith("_H_")]
    probe = '#include "cudnn.h"\n' + "".join(f"int __cudnnpy_{n} = {n};\n" for _, n in defines)
    values = {d.name[len("__cudnnpy_"):]: d.init
              for d in c_parser.CParser().parse(_preprocess(probe, include_dir, stubs)).ext
              if isinstance(d, c_ast.Decl) and d.name and d.name.startswith("__cudnnpy_")}
    for f, name in dict.fromkeys(defines):
        headers[f].defines.append(model.Define(name, reader.evaluate(values[name])))

    for f, text in raw.items():
        h = headers[f]
        dep_funcs = set(_DEP_FUNC.findall(text))
        docs = {name: _brief(comment) for comment, name in _DOC_FUNC.findall(text)}
        for fn in h.functions:
            fn.deprecated = fn.name in dep_funcs
            fn.brief, fn.deprecation = docs.get(fn.name, ("", ""))
        dep_types = set(_DEP_TYPEDEF.findall(text))
        for o in h.opaques + h.structs:
            o.deprecated = o.name in dep_types
        dep_enums = set(_DEP_ENUM.findall(text))
        for e in h.enums:
            e.deprecated_members = {m for m, _ in e.members if m in dep_enums}

    functions = [fn for h in headers.values() for fn in h.functions]
    lengths.attach(functions)
    nonnull.attach(functions)
    version = "{CUDNN_MAJOR}.{CUDNN_MINOR}.{CUDNN_PATCHLEVEL}".format(
        **{d.name: d.value for d in headers["cudnn_version.h"].defines})
    merged: dict[str, model.Header] = {}
    for f, h in headers.items():
        m = merged.setdefault(h.module, h)
        if m is not h:
            for kind in ("enums", "structs", "opaques", "callbacks", "functions", "defines"):
                getattr(m, kind).extend(getattr(h, kind))
            m.file += f", {f}"
    return version, [merged[m] for m in MODULES]
