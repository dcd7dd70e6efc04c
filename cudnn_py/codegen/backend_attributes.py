"""The backend attribute table (``capi/backend_attributes.py``): the element types, count and nested descriptor type
each ``cudnnBackendAttributeName_t`` takes, read from ``cudnn_graph.h``'s documentation comments
(``- CUDNN_ATTR_X (CUDNN_TYPE_INT64, 1 element)``), else from ``_KNOWN`` (the cuDNN backend documentation), else
from naming rules (``..._DESC``: a nested descriptor, ``..._MATH_PREC``: a data type). Attributes none of these
cover are left out: set/get them with an explicit ``attr_type=``.
"""
from __future__ import annotations

import pathlib
import re

def _each(spec: tuple[tuple[str, ...], str, str | None], *names: str) -> dict:
    return dict.fromkeys((f"CUDNN_ATTR_{n}" for n in names), spec)


# name -> (types, count, nested descriptor type or None). Count: "1", "0+", "1+", "n" (an array).
_KNOWN: dict[str, tuple[tuple[str, ...], str, str | None]] = {
    **{f"CUDNN_ATTR_{n}": ((t,), "1", None) for n, t in (
        ("CONVOLUTION_CONV_MODE", "CONVOLUTION_MODE"), ("DEVICEPROP_HANDLE", "HANDLE"), ("KNOB_INFO_TYPE", "KNOB_TYPE"),
        ("OPERATIONGRAPH_MODE", "OPERATIONGRAPH_MODE"), ("OPERATION_GENSTATS_MODE", "GENSTATS_MODE"),
        ("OPERATION_NORM_BWD_MODE", "NORM_MODE"), ("OPERATION_RESHAPE_MODE", "RESHAPE_MODE"),
        ("OPERATION_BN_BWD_WEIGHTS_MATH_PREC", "DATA_TYPE"), ("RNG_DISTRIBUTION", "RNG_DISTRIBUTION"),
        ("TENSOR_REORDERING_MODE", "TENSOR_REORDERING_MODE"),
        ("OPERATION_MOE_GROUPED_MATMUL_MODE", "MOE_GROUPED_MATMUL_MODE"))},
    **_each((("INT32",), "1", None), "DEVICEPROP_DEVICE_ID", "OPERATION_MOE_GROUPED_MATMUL_TOP_K"),
    **_each((("INT64",), "1", None), "ENGINECFG_SHARED_MEMORY_USED", "KERNEL_CACHE_ENTRY_COUNT",
            "KERNEL_CACHE_REVISION", "KNOB_INFO_MAXIMUM_VALUE", "KNOB_INFO_MINIMUM_VALUE", "KNOB_INFO_STRIDE",
            "OPERATION_RNG_SEED"),
    **_each((("INT64",), "n", None), "OPERATION_REDUCTION_DIMS", "OPERATION_REDUCTION_SUBGRAPH_ACCUMULATOR_UIDS",
            "OPERATION_REDUCTION_SUBGRAPH_CURRENT_UIDS", "OPERATION_REDUCTION_SUBGRAPH_OUTPUT_UIDS",
            "OPERATION_TRANSPOSE_PERMUTATION", "OPERATION_SLICE_START_INDICES", "OPERATION_SLICE_LIMIT_INDICES",
            "OPERATION_SLICE_STRIDES", "VARIANT_PACK_OVERRIDE_UNIQUE_IDS", "VARIANT_PACK_OVERRIDE_SHAPES",
            "VARIANT_PACK_OVERRIDE_STRIDES"),
    **_each((("BOOLEAN",), "1", None), "ENGINE_DISABLE_CLUSTER_COOPERATIVE",
            "OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED", "OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED",
            "OPERATIONGRAPH_IS_SAME_TOPOLOGY", "REDUCTION_IS_DETERMINISTIC", "TENSOR_IS_BY_VALUE"),
    **_each((("DOUBLE",), "1", None), "RNG_BERNOULLI_DIST_PROBABILITY", "RNG_NORMAL_DIST_MEAN",
            "RNG_NORMAL_DIST_STANDARD_DEVIATION", "RNG_UNIFORM_DIST_MAXIMUM", "RNG_UNIFORM_DIST_MINIMUM"),
    **_each((("FLOAT", "DOUBLE"), "1", None), "OPERATION_POINTWISE_ALPHA1", "OPERATION_POINTWISE_ALPHA2"),
    **_each((("CHAR",), "n", None), "DEVICEPROP_JSON_REPRESENTATION", "KERNEL_CACHE_JSON_REPRESENTATION"),
    **_each((("BACKEND_DESCRIPTOR",), "1", "OPERATIONGRAPH"), "KERNEL_CACHE_OPERATION_GRAPH",
            "OPERATION_REDUCTION_SUBGRAPH"),
    "CUDNN_ATTR_KERNEL_CACHE_IS_ENGINECFG_KERNEL_CACHED": (("BACKEND_DESCRIPTOR",), "1", "ENGINECFG"),
    "CUDNN_ATTR_OPERATION_NORM_BWD_PEER_STAT_DESCS": (("BACKEND_DESCRIPTOR",), "0+", "TENSOR"),
    "CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR": (("BACKEND_DESCRIPTOR",), "1", "POINTWISE"),
    "CUDNN_ATTR_OPERATION_RNG_DESC": (("BACKEND_DESCRIPTOR",), "1", "RNG"),
    "CUDNN_ATTR_MATMUL_PADDING_VALUE": (("DOUBLE", "FLOAT"), "1", None),
    "CUDNN_ATTR_OPERATION_REDUCTION_SUBGRAPH_COMPUTE_TYPES": (("DATA_TYPE",), "n", None),
    "CUDNN_ATTR_OPERATION_REDUCTION_INIT_VALUES": (("VOID_PTR",), "n", None),
}

# Where the header's one-line type note is incomplete: (types, count, nested descriptor type).
_HEADER_FIXES = {
    "CUDNN_ATTR_ENGINE_KNOB_INFO": (("BACKEND_DESCRIPTOR",), "0+", "KNOB_INFO"),  # an array, one per knob
    "CUDNN_ATTR_ENGINEHEUR_RESULTS": (("BACKEND_DESCRIPTOR",), "0+", "ENGINECFG"),
    "CUDNN_ATTR_OPERATION_REDUCTION_DESC": (("BACKEND_DESCRIPTOR",), "1", "REDUCTION"),  # header says TENSOR
}

# The header's documentation spells a few attributes differently from the enum; others it documents do not exist.
_DOC_ALIASES = {"CUDNN_ATTR_CONVOLUTION_MODE": "CUDNN_ATTR_CONVOLUTION_CONV_MODE",
                "CUDNN_ATTR_OPERATION_BN_FINALIZE_EXP_AVERAGE_FACTOR_DESC":
                    "CUDNN_ATTR_OPERATION_BN_FINALIZE_EXP_AVERATE_FACTOR_DESC"}

# Nested descriptor type by the attribute name's ending, where the header's prose does not say it.
_NESTED_BY_SUFFIX = {"OPERATION_GRAPH": "OPERATIONGRAPH", "ENGINE_CONFIG": "ENGINECFG", "CONV_DESC": "CONVOLUTION",
                     "KNOB_CHOICES": "KNOB_CHOICE", "LAYOUT_INFO": "LAYOUT_INFO", "KERNEL_CACHE": "KERNEL_CACHE",
                     "_ENGINE": "ENGINE"}

_DOC = re.compile(r"^\s*\*\s*-\s*(CUDNN_ATTR_\w+)\s*\((CUDNN_TYPE_[^)]*)\)")
_ENUM_MEMBER = re.compile(r"^\s*(CUDNN_BACKEND_\w+_DESCRIPTOR)\s*=\s*(\d+)")


def _count(text: str) -> str:
    if "1 element" in text and "1+" not in text:
        return "1"
    if "0+" in text:
        return "0+"
    if "1+" in text:
        return "1+"
    if "element" in text or "CUDNN_MAX_DIMS" in text or "many" in text:
        return "n"
    return "1"


def parse(header: str) -> tuple[dict, dict]:
    """(attribute -> (types, count, nested descriptor type, source), attribute -> owning descriptor type)."""
    text = pathlib.Path(header).read_text()
    names = re.findall(r"^\s*(CUDNN_ATTR_\w+)\s*(?:CUDNN_DEPRECATED_ENUM)?\s*=", text, re.M)
    table: dict[str, tuple] = {}
    owner: dict[str, str] = {}  # attribute -> descriptor type whose doc block lists it
    start = text.index("cudnnBackendAttributeType_t;")
    block: list[str] = []
    for line in text[start:].splitlines():
        m = _ENUM_MEMBER.match(line)
        if m:
            desc = m.group(1)[len("CUDNN_BACKEND_"):-len("_DESCRIPTOR")]
            for i, b in enumerate(block):
                d = _DOC.match(b)
                if not d:
                    continue
                attr, spec = _DOC_ALIASES.get(d.group(1), d.group(1)), d.group(2)
                if attr not in names:
                    continue
                types = tuple(dict.fromkeys(re.findall(r"CUDNN_TYPE_(\w+)", spec.split(",")[0])))
                types = tuple("NAN_PROPOGATION" if t == "NAN_PROPAGATION" else t for t in types)
                nested = re.search(r"CUDNN_BACKEND_(\w+?)_DESCRIPTOR", spec)
                nested_t = nested.group(1) if nested and "*" not in nested.group(1) else None
                if types == ("BACKEND_DESCRIPTOR",) and nested_t is None:
                    # "Descriptor type CUDNN_BACKEND_X_DESCRIPTOR" in the prose after the line
                    rest = block[i + 1:i + 6]
                    cut = next((k for k, x in enumerate(rest) if re.match(r"^\s*\*\s*-\s", x) or not x.strip(" *")),
                               len(rest))
                    prose = " ".join(x.strip(" *") for x in rest[:cut])
                    p = re.search(r"[Dd]escriptor type\s+CUDNN_BACKEND_(\w+?)_DESCRIPTOR", prose)
                    nested_t = p.group(1) if p else next((v for k, v in _NESTED_BY_SUFFIX.items()
                                                          if attr.endswith(k)), None)
                table[attr] = ((*_HEADER_FIXES[attr], "header+fix") if attr in _HEADER_FIXES
                               else (types, _count(spec), nested_t, "header"))
                owner[attr] = desc
            block = []
        else:
            block.append(line)
        if line.startswith("} cudnnBackendDescriptorType_t"):
            break
    for attr in names:
        if attr in table:
            continue
        if attr in _KNOWN:
            table[attr] = (*_KNOWN[attr], "known")
        elif attr.endswith("DESC"):
            table[attr] = (("BACKEND_DESCRIPTOR",), "1", "TENSOR", "rule")
        elif attr.endswith(("_MATH_PREC", "_COMP_TYPE")):
            table[attr] = (("DATA_TYPE",), "1", None, "rule")
    return table, owner


def render(header: str, banner: str) -> str:
    """The source of the table module for ``header`` (cudnn_graph.h), under ``banner``."""
    table, owner = parse(header)
    out = [banner.rstrip("\n"),
           '"""Backend attribute -> (element types, count, nested descriptor type, source): see cudnn_py.graph."""',
           "# count: '1' one element, '0+'/'1+' arrays, 'n' an array of any length; source: header doc, known, rule",
           "TABLE = {"]
    out.extend(f"    {name!r}: {table[name]!r}," for name in sorted(table))
    out += ["}", "# attribute name -> the descriptor type whose documentation lists it", "OWNER = {"]
    out.extend(f"    {name!r}: {owner[name]!r}," for name in sorted(owner))
    out.append("}")
    return "\n".join(out) + "\n"
