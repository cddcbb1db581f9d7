"""Metal Shading Language -> C++ for the CPU executor (the subset porter emits).

What changes, and why:

- `#include <metal_stdlib>` becomes the executor's header (`metal_stdlib.h` beside this file);
- `kernel void NAME(...)` becomes a plain C++ function, its `[[buffer(i)]]` and thread-position
  attributes are read off into a `KernelSig`, and an `extern "C" porter_launch_NAME` entry calls
  it once per thread (a fiber) with the buffers and that thread's positions;
- `device T*` / `constant T*` become bounds-checked `porter_rt::dev_ptr<T>`, a cast
  `(device const float4*)(p)` becomes `porter_rt::dev_cast<const float4>(p)` (alignment-checked);
- `threadgroup T name[N];` (and `[N][M]`, `[N][M][K]`) becomes one allocation shared by the
  threadgroup's threads (`PORTER_TG`), each index bounds-checked against its own dimension and every
  element race-checked; a scalar `threadgroup T name;` is a one-element array's element;
  `threadgroup T*` becomes `porter_rt::tg_ptr<T>`;
- `atomic_int` / `atomic_uint` / `atomic_float` objects are reached only through the
  `atomic_*_explicit` functions with `memory_order_relaxed`; anything else is refused here, naming
  the line (`refused`);
- any other `[[...]]` attribute (e.g. `max_total_threads_per_threadgroup(N)`) is dropped after its
  value is recorded.

Comments are removed first, so nothing in them is taken for code, and line numbers are kept (a
kernel's signature keeps its line breaks), so a build error's line is the Metal source's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Thread-position attributes -> the runtime's enum (targets/metal_exec/metal_stdlib.h).
ATTRIBUTES = {
    "thread_position_in_grid": "A_THREAD_POSITION_IN_GRID",
    "threadgroup_position_in_grid": "A_THREADGROUP_POSITION_IN_GRID",
    "thread_position_in_threadgroup": "A_THREAD_POSITION_IN_THREADGROUP",
    "threads_per_threadgroup": "A_THREADS_PER_THREADGROUP",
    "threadgroups_per_grid": "A_THREADGROUPS_PER_GRID",
    "threads_per_grid": "A_THREADS_PER_GRID",
    "thread_index_in_threadgroup": "A_THREAD_INDEX_IN_THREADGROUP",
    "thread_index_in_simdgroup": "A_THREAD_INDEX_IN_SIMDGROUP",
    "simdgroup_index_in_threadgroup": "A_SIMDGROUP_INDEX_IN_THREADGROUP",
    "threads_per_simdgroup": "A_THREADS_PER_SIMDGROUP",
    "thread_execution_width": "A_THREADS_PER_SIMDGROUP",
    "simdgroups_per_threadgroup": "A_SIMDGROUPS_PER_THREADGROUP",
}

_TYPE = r"[A-Za-z_]\w*"
_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_KERNEL_RE = re.compile(r"(?:\[\[[^\]]*\]\]\s*)*\bkernel\s+void\s+([A-Za-z_]\w*)\s*\(")
_MAX_THREADS_RE = re.compile(r"max_total_threads_per_threadgroup\s*\(\s*(\d+)\s*\)")
_TG_DECL_RE = re.compile(
    rf"\bthreadgroup\s+({_TYPE})\s+([A-Za-z_]\w*)\s*((?:\[[^\]]+\]\s*)+);")
_TG_SCALAR_RE = re.compile(rf"\bthreadgroup\s+({_TYPE})\s+([A-Za-z_]\w*)\s*;")
_DEV_CAST_RE = re.compile(
    rf"\(\s*(const\s+)?(device|constant)\s+(const\s+)?({_TYPE})\s*\*\s*\)\s*(\(|[A-Za-z_]\w*)")
_DEV_PTR_RE = re.compile(rf"(const\s+)?\b(device|constant)\s+(const\s+)?({_TYPE})\s*\*")
_TG_PTR_RE = re.compile(rf"(const\s+)?\bthreadgroup\s+(const\s+)?({_TYPE})\s*\*")
_ATTR_RE = re.compile(r"\[\[\s*([^\]]*?)\s*\]\]")


class TranslateError(ValueError):
    """Metal source the executor cannot take: names the construct and where."""


# What the Metal Shading Language refuses (its specification, "C++14 features not supported")
# though the C++ the executor compiles would take it: each is refused before translation, so a
# kernel that passes here is not one Apple's compiler rejects for these (issue 48: an LLM's
# kernel with a `double` or a recursive helper ran on the executor).
REFUSED = (
    (re.compile(r"\bdouble\b"), "double (Metal has no 64-bit floating point)"),
    (re.compile(r"\bnew\b|\bdelete\b"), "new/delete (no dynamic allocation in Metal)"),
    (re.compile(r"\bstd\s*::"), "std:: (the C++ standard library is not in Metal)"),
    (re.compile(r"\b(?:malloc|calloc|realloc|free|printf|fprintf)\s*\("),
     "a C library call (not in Metal)"),
    (re.compile(r"\bvirtual\b"), "virtual functions (not in Metal)"),
    (re.compile(r"\b(?:try|catch|throw)\b"), "exceptions (not in Metal)"),
    (re.compile(r"\bgoto\b"), "goto (not in Metal)"),
    (re.compile(r"\b(?:dynamic_cast|typeid)\b"), "RTTI (not in Metal)"),
    (re.compile(r"\bthread_local\b"), "thread_local (not in Metal)"),
    # The specification's atomic functions take memory_order_relaxed only.
    (re.compile(r"\bmemory_order_(?:seq_cst|acq_rel|acquire|release|consume)\b"),
     "{0} (Metal's atomic functions take only memory_order_relaxed)"),
)
_FUNC_DEF_RE = re.compile(r"\b([A-Za-z_]\w*)\s*\([^;{}()]*(?:\([^()]*\)[^;{}()]*)*\)\s*"
                          r"(?:const\s*)?\{")
_NOT_FUNCS = frozenset({"if", "for", "while", "switch", "return", "sizeof"})


# An atomic object: a pointer parameter or variable, or a threadgroup array or scalar.
_ATOMIC_DECL_RE = re.compile(
    r"\b(?:device|threadgroup)\s+(atomic_(?:int|uint|float|bool|long|ulong))\s*(\*?)\s*"
    r"([A-Za-z_]\w*)")


def _line(src: str, at: int) -> int:
    return src.count("\n", 0, at) + 1


def _block_end(src: str, at: int) -> int:
    """The index of the `}` closing the block that `at` is in (the end when there is none)."""
    depth = 0
    for i in range(at, len(src)):
        if src[i] == "{":
            depth += 1
        elif src[i] == "}":
            depth -= 1
            if depth < 0:
                return i
    return len(src)


def _misused_atomic(src: str) -> str | None:
    """An atomic used as a plain value (`counter[0] += 1`, `int v = hist[i];`, `*p`): in Metal
    an atomic is reached only through the atomic_*_explicit functions, which take its address
    (`&counter[0]`, `counter + i`, `&hist[i]`, `&total`)."""
    for decl in _ATOMIC_DECL_RE.finditer(src):
        type_name, pointer, name = decl.groups()
        after = _ATTR_RE.sub("", src[decl.end():decl.end() + 200]).lstrip()
        if after[:1] in (",", ")"):  # a parameter: its scope is the function's body
            start = src.index("{", decl.end()) + 1
        else:  # a local: the rest of its block
            start = decl.end()
        scope = src[start:_block_end(src, start)]
        if pointer:  # an element (`p[i]`, `*p`) must be under `&`, the pointer itself is free
            use = rf"(&\s*)?(?:\b{name}\s*\[|\*\s*{name}\b)"
        elif src[decl.end():].lstrip().startswith("["):  # an array: likewise its elements
            use = rf"(&\s*)?\b{name}\s*\["
        else:  # a scalar
            use = rf"(&\s*)?\b{name}\b"
        for m in re.finditer(use, scope):
            if m.group(1) is None:
                end = m.end()
                if scope[end - 1] == "[":  # the element with its subscript
                    close = _matching(scope, end - 1, "[", "]")
                    end = close + 1 if close >= 0 else len(scope)
                return (f"line {_line(src, start + m.start())}: {scope[m.start():end]} used as "
                        f"a plain value ({name} is an {type_name}: an atomic is reached only "
                        "through the atomic_*_explicit functions, by its address, e.g. "
                        f"atomic_fetch_add_explicit(&{name}[i], v, memory_order_relaxed))")
    return None


def refused(source: str) -> str | None:
    """The first construct of `source` (comments stripped) that Metal refuses, with its line;
    None when there is none."""
    src = strip_comments(source)
    for pattern, what in REFUSED:
        m = pattern.search(src)
        if m:
            return f"line {_line(src, m.start())}: {what.format(m.group(0))}"
    if (why := _misused_atomic(src)) is not None:
        return why
    for m in _FUNC_DEF_RE.finditer(src):
        name = m.group(1)
        if name in _NOT_FUNCS:
            continue
        body_end = _matching(src, m.end() - 1, "{", "}")
        body_end = len(src) if body_end < 0 else body_end
        if re.search(rf"\b{re.escape(name)}\s*\(", src[m.end():body_end]):
            return f"line {_line(src, m.start())}: {name} calls itself (Metal has no recursion)"
    return None


@dataclass(frozen=True)
class Param:
    """One kernel parameter.

    kind: "buffer" (a `[[buffer(i)]]`: a pointer or a `constant T&` scalar) or "attr" (a
    thread-position attribute). type: the element type ("bfloat", "long", "uint3").
    """

    name: str
    kind: str
    type: str
    index: int | None = None
    pointer: bool = False
    const: bool = False
    attr: str | None = None


@dataclass(frozen=True)
class KernelSig:
    """A kernel's name, its parameters in order, and any declared thread limit."""

    name: str
    params: tuple[Param, ...]
    max_threads: int | None = None

    def buffers(self) -> tuple[Param, ...]:
        """The buffer parameters in buffer-index order."""
        return tuple(sorted((p for p in self.params if p.kind == "buffer"),
                            key=lambda p: p.index or 0))


@dataclass(frozen=True)
class Translation:
    """C++ source for the executor and the kernels it defines."""

    cpp: str
    kernels: tuple[KernelSig, ...]


def strip_comments(source: str) -> str:
    """Comments replaced by spaces/newlines (line numbers kept)."""
    return _COMMENT_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), source)


def _split_params(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    i = 0
    while i < len(text):
        ch = text[i]
        if text.startswith("[[", i):
            end = text.index("]]", i) + 2
            cur.append(text[i:end])
            i = end
            continue
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def _matching(text: str, open_at: int, opening: str = "(", closing: str = ")") -> int:
    """The index of the bracket closing the one at `open_at`; -1 when it is never closed."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == opening:
            depth += 1
        elif text[i] == closing:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _matching_paren(text: str, open_at: int) -> int:
    close = _matching(text, open_at)
    if close < 0:
        raise TranslateError("unbalanced parentheses in a kernel signature")
    return close


def _parse_param(kernel: str, text: str) -> tuple[Param, str]:
    """The parameter and its C++ declaration (attributes removed, pointers rewritten)."""
    attrs = _ATTR_RE.findall(text)
    decl = _ATTR_RE.sub("", text).strip()
    match = re.search(r"([A-Za-z_]\w*)\s*$", decl)
    if not match:
        raise TranslateError(f"kernel {kernel}: cannot read the parameter {text!r}")
    name = match.group(1)
    type_text = decl[:match.start()].strip()
    if not attrs:
        raise TranslateError(f"kernel {kernel}: parameter {name!r} has no [[buffer(i)]] or "
                             "thread-position attribute")
    attr = attrs[0]
    buf = re.fullmatch(r"buffer\s*\(\s*(\d+)\s*\)", attr)
    if buf:
        ptr = _DEV_PTR_RE.search(type_text)
        if ptr:
            const = bool(ptr.group(1) or ptr.group(3)) or ptr.group(2) == "constant"
            elem = ptr.group(4)
            param = Param(name, "buffer", elem, int(buf.group(1)), pointer=True, const=const)
        else:
            ref = re.fullmatch(
                rf"(?:const\s+)?(constant|device)?\s*(const\s+)?({_TYPE})\s*&", type_text
            )
            if not ref:
                raise TranslateError(f"kernel {kernel}: buffer parameter {name!r} of type "
                                     f"{type_text!r} is neither a pointer nor a reference")
            param = Param(name, "buffer", ref.group(3), int(buf.group(1)), pointer=False,
                          const=True)
        return param, _rewrite_pointers(type_text) + " " + name
    if attr not in ATTRIBUTES:
        raise TranslateError(f"kernel {kernel}: attribute [[{attr}]] of {name!r} is not one the "
                             f"executor implements ({', '.join(sorted(ATTRIBUTES))})")
    return Param(name, "attr", type_text, attr=attr), type_text + " " + name


def _rewrite_pointers(text: str) -> str:
    def cast(m: re.Match[str]) -> str:
        const = "const " if (m.group(1) or m.group(3) or m.group(2) == "constant") else ""
        nxt = m.group(5)
        target = f"porter_rt::dev_cast<{const}{m.group(4)}>"
        return target + ("(" if nxt == "(" else f"({nxt})")

    text = _DEV_CAST_RE.sub(cast, text)

    def dev(m: re.Match[str]) -> str:
        const = "const " if (m.group(1) or m.group(3) or m.group(2) == "constant") else ""
        return f"porter_rt::dev_ptr<{const}{m.group(4)}> "

    text = _DEV_PTR_RE.sub(dev, text)
    return _TG_PTR_RE.sub(lambda m: f"porter_rt::tg_ptr<{m.group(3)}> ", text)


def translate(source: str, header: str = "metal_stdlib.h") -> Translation:
    """C++ for `source` and the signatures of its kernels.

    Raises:
        TranslateError: a construct outside the executor's subset (named).
    """
    src = strip_comments(source)
    if not _KERNEL_RE.search(src):
        raise TranslateError("no `kernel void NAME(...)` in the Metal source")
    if (why := refused(src)) is not None:
        raise TranslateError(f"Metal does not accept {why}")
    src = re.sub(r"#\s*include\s*<metal_stdlib>", f'#include "{header}"', src)
    src = re.sub(r"#\s*include\s*<metal_\w+>", "", src)
    kernels: list[KernelSig] = []
    out: list[str] = []
    pos = 0
    for match in _KERNEL_RE.finditer(src):
        name = match.group(1)
        limit = _MAX_THREADS_RE.search(match.group(0))
        open_at = match.end() - 1
        close_at = _matching_paren(src, open_at)
        params, decls = [], []
        for text in _split_params(src[open_at + 1:close_at]):
            p, d = _parse_param(name, text)
            params.append(p)
            decls.append(d)
        kernels.append(KernelSig(name, tuple(params), int(limit.group(1)) if limit else None))
        out.append(src[pos:match.start()])
        # the signature on one line, then its line breaks: later lines keep their numbers
        out.append(f"static void {name}(" + ", ".join(decls) + ")"
                   + "\n" * src.count("\n", match.start(), close_at))
        pos = close_at + 1
    out.append(src[pos:])
    body = "".join(out)
    site = iter(range(1, 1 << 30))

    def tg_decl(m: re.Match[str]) -> str:
        dims = re.findall(r"\[([^\]]+)\]", m.group(3))
        if len(dims) > 3:
            raise TranslateError(f"threadgroup {m.group(1)} {m.group(2)}{m.group(3)}: the "
                                 "executor takes threadgroup arrays of one to three dimensions")
        sizes = ", ".join(f"({d.strip()})" for d in dims)
        return f"PORTER_TG({m.group(1)}, {m.group(2)}, {next(site)}, {sizes});"

    def tg_scalar(m: re.Match[str]) -> str:
        # one element of a one-element array: checked like any other
        array = f"porter_tg_{m.group(2)}"
        return (f"PORTER_TG({m.group(1)}, {array}, {next(site)}, 1); "
                f"auto {m.group(2)} = {array}[0];")

    body = _TG_DECL_RE.sub(tg_decl, body)
    body = _TG_SCALAR_RE.sub(tg_scalar, body)
    body = _rewrite_pointers(body)
    body = _ATTR_RE.sub("", body)
    leftover = re.search(r"\bthreadgroup\s+\w+\s+\w+\s*\[", body)
    if leftover:
        raise TranslateError(f"unsupported threadgroup declaration near {leftover.group(0)!r}")
    entries = [_entry(k) for k in kernels]
    return Translation(body + "\n" + "\n".join(entries), tuple(kernels))


def _entry(k: KernelSig) -> str:
    args = []
    for p in k.params:
        if p.kind == "attr":
            enum = ATTRIBUTES[p.attr or ""]
            args.append(f"porter_rt::attr_as<{p.type}>::get(porter_rt::{enum}, t)")
        elif p.pointer:
            t = ("const " if p.const else "") + p.type
            shadow = ("" if p.const else
                      f", 0, -1, porter_rt::dev_shadow({p.index}, nbytes[{p.index}])")
            args.append(f"porter_rt::dev_ptr<{t}>(({t}*)bufs[{p.index}], "
                        f"nbytes[{p.index}] / (long long)sizeof({t}), \"{p.name}\"{shadow})")
        else:
            args.append(f"*(const {p.type}*)bufs[{p.index}]")
    call = f"{k.name}(" + ", ".join(args) + ");"
    return (
        f'extern "C" int porter_launch_{k.name}(void** bufs, const long long* nbytes, '
        "const unsigned* ngroups, const unsigned* tpt, long long tg_limit, "
        "char* err, int errlen) {\n"
        "    (void)bufs; (void)nbytes;\n"
        "    return porter_rt::launch(ngroups, tpt, tg_limit, err, errlen, "
        "[&](porter_rt::Thread* t) {\n"
        "        (void)t;\n"
        f"        {call}\n"
        "    });\n"
        "}\n"
    )
