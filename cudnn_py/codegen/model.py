"""What the generator reads out of the cuDNN headers: a plain model, independent of how it is printed."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Enum:
    name: str                           # the typedef name, e.g. cudnnDataType_t
    members: list[tuple[str, int]]      # in header order, aliases included
    deprecated_members: set[str] = field(default_factory=set)


@dataclass
class Struct:
    name: str
    fields: list[tuple[str, str]]       # (field name, ctypes expression); none for an incomplete type
    deprecated: bool = False


@dataclass
class Opaque:
    name: str                           # e.g. cudnnTensorDescriptor_t
    target: str                         # what it points to, e.g. "struct cudnnTensorStruct"
    deprecated: bool = False
    foreign: bool = False               # a CUDA type (cudaStream_t): its parameters also take int handles


@dataclass
class Callback:
    name: str
    restype: str
    argtypes: list[str]
    prototype: str


@dataclass
class Function:
    name: str
    restype: str                        # ctypes expression
    argtypes: list[str]                 # parameter types as the binding takes them (see parse._Reader.param_type)
    prototype: str                      # the C declaration, one line
    returns_status: bool
    params: list[str] = field(default_factory=list)  # parameter names
    lengths: list[tuple[str, ...]] = field(default_factory=list)  # (array, count[, attribute type]): see lengths.py
    nonnull: list[str] = field(default_factory=list)  # parameters cuDNN dereferences unchecked: nonnull.py
    deprecated: bool = False
    brief: str = ""
    deprecation: str = ""               # the header's @deprecated text


@dataclass
class Define:
    name: str
    value: int | float


@dataclass
class Header:
    """Everything one header declares, in declaration order per kind."""
    file: str                           # basename, e.g. cudnn_ops.h
    module: str                         # capi module name, e.g. ops
    enums: list[Enum] = field(default_factory=list)
    structs: list[Struct] = field(default_factory=list)
    opaques: list[Opaque] = field(default_factory=list)
    callbacks: list[Callback] = field(default_factory=list)
    functions: list[Function] = field(default_factory=list)
    defines: list[Define] = field(default_factory=list)

    def names(self) -> list[str]:
        """Every public name this header's module defines."""
        out = [o.name for o in self.opaques]
        for e in self.enums:
            out.append(e.name)
            out.extend(m for m, _ in e.members)
        out += [s.name for s in self.structs] + [c.name for c in self.callbacks]
        return out + [f.name for f in self.functions] + [d.name for d in self.defines]
