"""Probe: softmax over odd-width 16-bit rows, looped, masked (as now) vs aligned interior."""
import triton
import triton.language as tl


@triton.jit
def sm_masked(x_ptr, y_ptr, s, n, BLOCK: tl.constexpr, LANES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * s
    m_lane = tl.full([LANES], float('-inf'), tl.float32)
    s_lane = tl.zeros([LANES], tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + cols, mask=cols < n, other=float('-inf')).to(tl.float32)
        g = tl.reshape(x, [BLOCK // LANES, LANES])
        m_new = tl.maximum(m_lane, tl.max(g, axis=0))
        m_sh = tl.where(m_new > float('-inf'), m_new, 0.0)
        p = tl.exp2((g - m_sh[None, :]) * 1.4426950408889634)
        s_lane = s_lane * tl.exp2((m_lane - m_sh) * 1.4426950408889634) + tl.sum(p, axis=0)
        m_lane = m_new
    m = tl.max(m_lane, axis=0)
    tot = tl.sum(s_lane * tl.exp2((m_lane - m) * 1.4426950408889634), axis=0)
    inv = 1.0 / tot
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + cols, mask=cols < n, other=float('-inf')).to(tl.float32)
        y = tl.exp2((x - m) * 1.4426950408889634) * inv
        tl.store(y_ptr + base + cols, y.to(y_ptr.dtype.element_ty), mask=cols < n)


@triton.jit
def sm_aligned(x_ptr, y_ptr, s, n, BLOCK: tl.constexpr, LANES: tl.constexpr, VEC: tl.constexpr):
    # Blocks start at the row's first VEC-aligned element: the interior is loaded unmasked,
    # 16 bytes at a time; the head (< VEC elements) and the tail masked.
    row = tl.program_id(0).to(tl.int64)
    base = row * s
    p0 = tl.multiple_of((base + VEC - 1) // VEC * VEC, VEC)
    h = p0 - base  # head elements: columns [0, h)
    n_full = (n - h) // BLOCK
    t0 = h + n_full * BLOCK  # tail: columns [t0, n)
    ar = tl.arange(0, BLOCK)
    hv = tl.arange(0, VEC)
    # head and tail first, into one (max, sum) pair each
    xh = tl.load(x_ptr + base + hv, mask=hv < h, other=float('-inf')).to(tl.float32)
    xt = tl.load(x_ptr + p0 + n_full * BLOCK + ar, mask=t0 + ar < n, other=float('-inf')).to(tl.float32)
    m_ht = tl.maximum(tl.max(xh, axis=0), tl.max(xt, axis=0))
    m_ht_sh = tl.where(m_ht > float('-inf'), m_ht, 0.0)
    s_ht = tl.sum(tl.exp2((xh - m_ht_sh) * 1.4426950408889634), axis=0) + \
        tl.sum(tl.exp2((xt - m_ht_sh) * 1.4426950408889634), axis=0)
    m_lane = tl.full([LANES], float('-inf'), tl.float32)
    s_lane = tl.zeros([LANES], tl.float32)
    for k in range(0, n_full):
        x = tl.load(x_ptr + p0 + k * BLOCK + ar).to(tl.float32)
        g = tl.reshape(x, [BLOCK // LANES, LANES])
        m_new = tl.maximum(m_lane, tl.max(g, axis=0))
        m_sh = tl.where(m_new > float('-inf'), m_new, 0.0)
        p = tl.exp2((g - m_sh[None, :]) * 1.4426950408889634)
        s_lane = s_lane * tl.exp2((m_lane - m_sh) * 1.4426950408889634) + tl.sum(p, axis=0)
        m_lane = m_new
    m = tl.maximum(tl.max(m_lane, axis=0), m_ht)
    tot = tl.sum(s_lane * tl.exp2((m_lane - m) * 1.4426950408889634), axis=0) + \
        s_ht * tl.exp2((m_ht_sh - m) * 1.4426950408889634)
    inv = 1.0 / tot
    yh = tl.exp2((xh - m) * 1.4426950408889634) * inv
    tl.store(y_ptr + base + hv, yh.to(y_ptr.dtype.element_ty), mask=hv < h)
    yt = tl.exp2((xt - m) * 1.4426950408889634) * inv
    tl.store(y_ptr + p0 + n_full * BLOCK + ar, yt.to(y_ptr.dtype.element_ty), mask=t0 + ar < n)
    for k in range(0, n_full):
        x = tl.load(x_ptr + p0 + k * BLOCK + ar).to(tl.float32)
        y = tl.exp2((x - m) * 1.4426950408889634) * inv
        tl.store(y_ptr + p0 + k * BLOCK + ar, y.to(y_ptr.dtype.element_ty))


@triton.jit
def lse_masked(x_ptr, out_ptr, s, n, BLOCK: tl.constexpr, LANES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * s
    m_lane = tl.full([LANES], float('-inf'), tl.float32)
    s_lane = tl.zeros([LANES], tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + cols, mask=cols < n, other=float('-inf')).to(tl.float32)
        g = tl.reshape(x, [BLOCK // LANES, LANES])
        m_new = tl.maximum(m_lane, tl.max(g, axis=0))
        m_sh = tl.where(m_new > float('-inf'), m_new, 0.0)
        p = tl.exp2((g - m_sh[None, :]) * 1.4426950408889634)
        s_lane = s_lane * tl.exp2((m_lane - m_sh) * 1.4426950408889634) + tl.sum(p, axis=0)
        m_lane = m_new
    m = tl.max(m_lane, axis=0)
    tot = tl.sum(s_lane * tl.exp2((m_lane - m) * 1.4426950408889634), axis=0)
    tl.store(out_ptr + row, m + tl.log(tot))


@triton.jit
def lse_aligned(x_ptr, out_ptr, s, n, BLOCK: tl.constexpr, LANES: tl.constexpr, VEC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * s
    p0 = tl.multiple_of((base + VEC - 1) // VEC * VEC, VEC)
    h = p0 - base
    n_full = (n - h) // BLOCK
    t0 = h + n_full * BLOCK
    ar = tl.arange(0, BLOCK)
    hv = tl.arange(0, VEC)
    xh = tl.load(x_ptr + base + hv, mask=hv < h, other=float('-inf')).to(tl.float32)
    xt = tl.load(x_ptr + p0 + n_full * BLOCK + ar, mask=t0 + ar < n, other=float('-inf')).to(tl.float32)
    m_ht = tl.maximum(tl.max(xh, axis=0), tl.max(xt, axis=0))
    m_ht_sh = tl.where(m_ht > float('-inf'), m_ht, 0.0)
    s_ht = tl.sum(tl.exp2((xh - m_ht_sh) * 1.4426950408889634), axis=0) + \
        tl.sum(tl.exp2((xt - m_ht_sh) * 1.4426950408889634), axis=0)
    m_lane = tl.full([LANES], float('-inf'), tl.float32)
    s_lane = tl.zeros([LANES], tl.float32)
    for k in range(0, n_full):
        x = tl.load(x_ptr + p0 + k * BLOCK + ar).to(tl.float32)
        g = tl.reshape(x, [BLOCK // LANES, LANES])
        m_new = tl.maximum(m_lane, tl.max(g, axis=0))
        m_sh = tl.where(m_new > float('-inf'), m_new, 0.0)
        p = tl.exp2((g - m_sh[None, :]) * 1.4426950408889634)
        s_lane = s_lane * tl.exp2((m_lane - m_sh) * 1.4426950408889634) + tl.sum(p, axis=0)
        m_lane = m_new
    m = tl.maximum(tl.max(m_lane, axis=0), m_ht)
    tot = tl.sum(s_lane * tl.exp2((m_lane - m) * 1.4426950408889634), axis=0) + \
        s_ht * tl.exp2((m_ht_sh - m) * 1.4426950408889634)
    tl.store(out_ptr + row, m + tl.log(tot))
