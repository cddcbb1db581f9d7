"""Vectorised loads and stores for Metal loops: a column loop (rowwise) or a thread's flat range
(elementwise) rewritten to read and write 2- or 4-wide vectors where the host finds the buffers
aligned, with the scalar loop kept as the fallback."""

from __future__ import annotations

import re

from porter.codegen.metal.dispatch import Signature

_LANE = "xyzw"
_ROW_LOAD_RE = re.compile(r"in(\d+)\[((?:\w+ \* in\1_s\d+ \+ )*)c \* (in\1_cs\d+)\]")
_ROW_STORE_RE = re.compile(r"^(\s*)out(\d+)\[((?:\w+ \* out\2_s\d+ \+ )*)c \* (out\2_s\d+)\] = "
                           r"(.*);$")
_FLAT_LOAD_RE = re.compile(r"in(\d+)\[offs\]")
_FLAT_STORE_RE = re.compile(r"^(\s*)out(\d+)\[offs\] = (.*);$")


def row_loop(body: list[str], vec: int, sig: Signature, types: dict[str, str],
             vec_terms: list[str]) -> list[str]:
    """The column loop around `body` (lines using `c`): scalar, or vectorised when aligned.

    Vector mode reads each `in<k>[<row part> + c * in<k>_cs<d>]` once per `vec` columns as one
    vector (and writes each `out<j>[... + c * out<j>_s<d>] = v` as one), when the host's vec_ok
    says every such stride is 1 and every row start aligned. `vec_terms` gets the host
    conditions, as Python over `inputs`/`outs`.
    """
    scalar = ["    for (idx_t c = lid; c < n_cols; c += LANES) {",
              *["    " + ln for ln in body], "    }"]
    if vec == 1:
        return scalar
    loads: dict[tuple[str, str], str] = {}
    stores: dict[tuple[str, str], str] = {}
    unit: set[str] = set()
    rowparts: set[str] = set()

    def load(m: re.Match[str]) -> str:
        k, rowpart, cs = m.group(1), m.group(2), m.group(3)
        key = (k, rowpart)
        if key not in loads:
            loads[key] = f"xv{k}_{len(loads)}"
        unit.add(cs)
        rowparts.add(rowpart)
        return f"{loads[key]}[J]"

    per_lane: list[str] = []
    for line in body:
        sm = _ROW_STORE_RE.match(line)
        if sm:
            j, rowpart, stride, value = sm.group(2), sm.group(3), sm.group(4), sm.group(5)
            key = (j, rowpart)
            if key not in stores:
                stores[key] = f"ov{j}_{len(stores)}"
            unit.add(stride)
            rowparts.add(rowpart)
            per_lane.append(f"{sm.group(1)}{stores[key]}[J] = {_ROW_LOAD_RE.sub(load, value)};")
            continue
        if re.search(r"\bout\d+\[", line):
            return scalar  # a store this loop cannot vectorise (e.g. a reshaped output)
        per_lane.append(_ROW_LOAD_RE.sub(load, line))
    if not loads and not stores:
        return scalar
    decl = {name: types[f"in{k}"] for (k, _), name in loads.items()}
    decl.update({name: types[f"out{j}"] for (j, _), name in stores.items()})
    lines = ["    if (vec_ok) {",
             f"        for (idx_t cv = lid; cv < n_cols / {vec}; cv += LANES) {{"]
    for (k, rowpart), name in loads.items():
        base = f"in{k} + {rowpart[:-3]}" if rowpart else f"in{k}"
        lines.append(f"            {decl[name]}{vec} {name} = "
                     f"((device const {decl[name]}{vec}*)({base}))[cv];")
    for name in stores.values():
        lines.append(f"            {decl[name]}{vec} {name};")
    uses_c = any(re.search(r"\bc\b", ln) for ln in per_lane)
    for lane in range(vec):
        lines.append("            {")
        if uses_c:  # a load this loop does not vectorise (a gather, a strided input)
            lines.append(f"                const idx_t c = cv * {vec} + {lane};")
        lines += ["            " + ln.replace("[J]", f".{_LANE[lane]}") for ln in per_lane]
        lines.append("            }")
    for (j, rowpart), name in stores.items():
        base = f"out{j} + {rowpart[:-3]}" if rowpart else f"out{j}"
        lines.append(f"            ((device {decl[name]}{vec}*)({base}))[cv] = {name};")
    lines += ["        }", "    } else {", *["    " + ln for ln in scalar], "    }"]
    exprs = {b["name"]: b.get("expr") for b in sig.buffers}
    for name in sorted(unit):
        vec_terms.append(f"{exprs[name]} == 1")
    for rowpart in sorted(rowparts):
        for stride in re.findall(r"\* (\w+) \+", rowpart):
            vec_terms.append(f"{exprs[stride]} % {vec} == 0")
    for (k, _) in loads:
        vec_terms.append(f"inputs[{k}].storage_offset() % {vec} == 0")
    for (j, _) in stores:
        vec_terms.append(f"outs[{j}].storage_offset() % {vec} == 0")
    return lines


def flat_vectorise(body: list[str], vec: int, types: dict[str, str], vec_terms: list[str],
                    numel: str) -> list[str]:
    """Each thread's `vec` elements: one vector load/store per tensor when aligned and whole,
    else element by element (the tail of the range, or unaligned buffers)."""
    scalar = [("    for (idx_t offs = base; offs < base + (idx_t)VEC && offs < n_elements; "
               "++offs) {"), *["    " + ln for ln in body], "    }"]
    if vec == 1:
        return ["    const idx_t offs = base;", *body]
    loads: dict[str, str] = {}
    stores: dict[str, str] = {}
    per_lane = []
    for line in body:
        sm = _FLAT_STORE_RE.match(line)
        value = line
        if sm:
            j = sm.group(2)
            stores.setdefault(j, f"ov{j}")
            value = f"{sm.group(1)}ov{j}[J] = {sm.group(3)};"

        def load(m: re.Match[str]) -> str:
            k = m.group(1)
            loads.setdefault(k, f"xv{k}")
            return f"xv{k}[J]"

        per_lane.append(_FLAT_LOAD_RE.sub(load, value))
    lines = ["    if (vec_ok && base + (idx_t)VEC <= n_elements) {"]
    for k, name in loads.items():
        t = types[f"in{k}"]
        lines.append(f"        {t}{vec} {name} = ((device const {t}{vec}*)(in{k}))[base / VEC];")
    for j, name in stores.items():
        lines.append(f"        {types[f'out{j}']}{vec} {name};")
    for lane in range(vec):
        lines.append("        {")
        lines.append(f"            const idx_t offs = base + {lane};")
        lines += ["        " + ln.replace("[J]", f".{_LANE[lane]}") for ln in per_lane]
        lines.append("        }")
    for j, name in stores.items():
        lines.append(f"        ((device {types[f'out{j}']}{vec}*)(out{j}))[base / VEC] = {name};")
    lines += ["    } else {", *["    " + ln for ln in scalar], "    }"]
    for k in loads:
        vec_terms.append(f"inputs[{k}].storage_offset() % {vec} == 0")
    for j in stores:
        vec_terms.append(f"outs[{j}].storage_offset() % {vec} == 0")
    return lines


def vec_ok_expr(terms: list[str], extent: str, vec: int) -> str:
    conds = [f"({extent}) % {vec} == 0", *dict.fromkeys(terms)]
    return "int(" + " and ".join(f"({c})" for c in conds) + ")"

