// The subset of the Metal Shading Language that porter emits, as C++17 for the CPU, plus the
// runtime that executes a dispatch: every thread of a threadgroup is a user-space fiber, so
// threadgroup_barrier and the SIMD-group functions mean what they mean on an Apple GPU.
//
// Rules the runtime enforces (a broken rule ends the dispatch with an error naming it):
//  - a SIMD-group is 32 consecutive threads of the threadgroup's linear index; its collective
//    functions (simd_sum, simd_max, simd_shuffle_down, ...) combine the *active* lanes only:
//    lanes past the end of the threadgroup or that returned are inactive, and a shuffle that
//    reads an inactive lane gets poison (all bits set: NaN for floats), as undefined on the GPU;
//  - threadgroup_barrier must be reached by every thread of the threadgroup that has not
//    returned, and by all of them (a thread that returned while others wait is divergence);
//    threads stuck at different collectives are reported as a deadlock, never hang;
//  - threadgroup memory is bounds-checked on every access, starts as poison, and a read of an
//    element no thread wrote, or that another thread wrote since the last barrier (a race), is
//    an error. Threads run highest index first between barriers, so a missing barrier between
//    a write and another thread's read shows as a race;
//  - device buffers are bounds-checked against the tensor's storage, and a cast to a vector
//    type checks the alignment of the address.
// This file is C++ for g++/clang on Linux or macOS; it is never given to a Metal compiler.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <csignal>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include <vector>

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;
typedef _Float16 half;

// ---------------------------------------------------------------------------------------------
// bfloat: 16-bit brain float, stored as the top half of a float; round to nearest even.
struct bfloat {
    uint16_t bits;
    bfloat() = default;
    bfloat(float f) {  // NOLINT: implicit, as in MSL
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            bits = uint16_t((u >> 16) | 0x40u);  // quiet NaN
        } else {
            u += 0x7fffu + ((u >> 16) & 1u);
            bits = uint16_t(u >> 16);
        }
    }
    bfloat(double d) : bfloat(float(d)) {}
    bfloat(int i) : bfloat(float(i)) {}
    bfloat(half h) : bfloat(float(h)) {}
    operator float() const {
        uint32_t u = uint32_t(bits) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
};

// ---------------------------------------------------------------------------------------------
// the runtime: fibers, threadgroups, collectives
namespace porter_rt {

enum State { RUNNABLE, AT_BARRIER, AT_SIMD, DONE };
enum SimdOp {
    OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AND, OP_OR, OP_XOR, OP_BROADCAST, OP_BROADCAST_FIRST,
    OP_SHUFFLE, OP_SHUFFLE_DOWN, OP_SHUFFLE_UP, OP_SHUFFLE_XOR, OP_PREFIX_EXCL_SUM,
    OP_PREFIX_INCL_SUM, OP_ALL, OP_ANY, OP_SIMD_BARRIER, OP_IS_FIRST, OP_MATRIX
};
static const char* const OP_NAMES[] = {
    "simd_sum", "simd_product", "simd_max", "simd_min", "simd_and", "simd_or", "simd_xor",
    "simd_broadcast", "simd_broadcast_first", "simd_shuffle", "simd_shuffle_down",
    "simd_shuffle_up", "simd_shuffle_xor", "simd_prefix_exclusive_sum",
    "simd_prefix_inclusive_sum", "simd_all", "simd_any", "simdgroup_barrier", "simd_is_first",
    "a simdgroup_matrix function"};

constexpr int SIMD_WIDTH = 32;
constexpr size_t STACK_BYTES = 128 * 1024;
constexpr int SLOT = 64;  // bytes of a collective's operand (a 4-wide vector of 8-byte lanes)

struct Thread;
typedef void (*CombineFn)(Thread** lanes, int nlanes);

// A fiber's saved context. On x86-64 a 20-instruction switch (callee-saved registers, MXCSR
// and the x87 control word: the SysV ABI's preserved state) instead of swapcontext, which makes
// a signal-mask system call per switch; elsewhere ucontext. Build with -DPORTER_UCONTEXT to
// force ucontext.
#if defined(__x86_64__) && !defined(PORTER_UCONTEXT)
#define PORTER_FAST_SWITCH 1
extern "C" void porter_rt_swap(void** save_sp, void* load_sp);
asm(R"(
    .text
    .p2align 4
    .hidden porter_rt_swap
    .globl porter_rt_swap
    .type porter_rt_swap,@function
porter_rt_swap:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size porter_rt_swap,.-porter_rt_swap
)");
struct Ctx { void* sp; };
inline void switch_ctx(Ctx* from, Ctx* to) { porter_rt_swap(&from->sp, to->sp); }
inline void init_ctx(Ctx* c, unsigned char* stack, size_t bytes, void (*entry)()) {
    uintptr_t top = (uintptr_t)(stack + bytes) & ~uintptr_t(15);
    uint64_t* sp = (uint64_t*)top;
    *--sp = 0;  // fake return address of entry (it never returns)
    *--sp = (uint64_t)(uintptr_t)entry;  // where the first switch's `ret` goes
    for (int i = 0; i < 6; ++i) *--sp = 0;  // rbp rbx r12 r13 r14 r15
    *--sp = 0x037F00001F80ull;  // MXCSR 0x1F80 (low word), x87 control word 0x037F
    c->sp = sp;
}
#else
struct Ctx { ucontext_t uc; };
inline void switch_ctx(Ctx* from, Ctx* to) { swapcontext(&from->uc, &to->uc); }
inline void init_ctx(Ctx* c, unsigned char* stack, size_t bytes, void (*entry)()) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = bytes;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, entry, 0);
}
#endif

struct Thread {
    Ctx ctx;
    State st;
    uint32_t tid;  // linear index in the threadgroup
    uint32_t pos[3];  // thread_position_in_threadgroup
    // consecutive atomic reads of one address that found it unchanged (a spin-wait, see atomics)
    uint64_t spins;
    const void* spin_at;
    // the pending collective
    int op;
    unsigned size;
    int64_t arg;
    CombineFn combine;
    alignas(16) unsigned char in[SLOT];
    alignas(16) unsigned char out[SLOT];
};

struct TgAlloc {
    int site;
    size_t bytes;
    unsigned char* data;
    struct Shadow* shadow;
};

struct Shadow {
    uint32_t writer;  // linear thread index of the last write
    uint32_t epoch;  // threadgroup barrier interval of the last write
    uint32_t sepoch;  // the writer's SIMD-group barrier interval at the write
    uint8_t init;
    uint32_t pend_reader;  // 1 + the thread that read it before any write (0: none)
    uint32_t pend_epoch;
};

// Who last wrote each byte of a writable device buffer in this dispatch: threadgroup (linear,
// 32 bits), thread (12 bits), barrier interval (19 bits), and a valid bit; 0 = not written.
struct DevShadow {
    uint64_t* s = nullptr;
    long long nbytes = 0;
};

struct Pending {
    Shadow* s;
    const char* name;
    long long idx;
    uint32_t reader;
    long long d1, d2;
};

// "tile[3][7]" for element k of a threadgroup array whose inner dimensions are d1 and d2 (0 when
// it has fewer): race and uninitialized-read messages name the element as the source indexes it.
struct Label {
    char s[96];
    Label(const char* name, long long k, long long d1, long long d2) {
        if (d1 == 0) std::snprintf(s, sizeof s, "%s[%lld]", name, k);
        else if (d2 == 0) std::snprintf(s, sizeof s, "%s[%lld][%lld]", name, k / d1, k % d1);
        else std::snprintf(s, sizeof s, "%s[%lld][%lld][%lld]", name, k / (d1 * d2),
                           (k / d2) % d1, k % d2);
    }
};

struct Group {
    Ctx sched;
    std::vector<Thread> threads;
    uint32_t n;
    uint32_t tpt[3], ngroups[3], tg_pos[3];
    uint32_t epoch;
    std::vector<uint32_t> sepoch;  // per SIMD-group
    std::vector<TgAlloc> allocs;
    std::vector<Pending> pending;  // reads of never-written threadgroup memory, not yet judged
    std::vector<struct DevShadow> dev_shadows;  // per writable buffer, for the whole dispatch
    size_t tg_bytes, tg_limit;
    Thread* cur;
    bool failed;
    char err[2048];
    void* fn;
    void (*thunk)(void* fn, Thread* t);
};

inline Group*& current() {
    static thread_local Group* g = nullptr;
    return g;
}

inline Thread* me() { return current()->cur; }

inline void yield_to_scheduler() {
    Group* g = current();
    Thread* t = g->cur;
    switch_ctx(&t->ctx, &g->sched);
}

[[noreturn]] inline void fail(const char* fmt, ...) {
    Group* g = current();
    if (!g->failed) {
        int used = 0;
        if (g->cur != nullptr) {
            used = std::snprintf(g->err, sizeof g->err,
                                 "threadgroup (%u,%u,%u) thread (%u,%u,%u) [simdgroup %u lane %u]: ",
                                 g->tg_pos[0], g->tg_pos[1], g->tg_pos[2], g->cur->pos[0],
                                 g->cur->pos[1], g->cur->pos[2], g->cur->tid / SIMD_WIDTH,
                                 g->cur->tid % SIMD_WIDTH);
        }
        va_list ap;
        va_start(ap, fmt);
        std::vsnprintf(g->err + used, sizeof g->err - used, fmt, ap);
        va_end(ap);
        g->failed = true;
    }
    // never resumed: the scheduler sees `failed` and abandons the dispatch
    for (;;) yield_to_scheduler();
}

// -- threadgroup memory ----------------------------------------------------------------------
template <class T>
struct tg_ref {
    T* p;
    Shadow* s;
    const char* name;
    long long idx;  // in the whole array, row-major
    long long d1 = 0, d2 = 0;  // the array's inner dimensions, to name the element

    void check_read() const {
        Group* g = current();
        Thread* t = g->cur;
        if (!s->init) {
            // Not an error yet: if another thread writes it before the next barrier this was a
            // race (a missing barrier); if nobody does, an uninitialized read. Decided at the
            // write, or at the barrier / the end of the threadgroup.
            if (s->pend_reader == 0) {
                s->pend_reader = t->tid + 1;
                s->pend_epoch = g->epoch;
                g->pending.push_back(Pending{s, name, idx, t->tid, d1, d2});
            }
            return;
        }
        if (s->writer != t->tid && s->epoch == g->epoch) {
            bool same_sg = s->writer / SIMD_WIDTH == t->tid / SIMD_WIDTH;
            if (!same_sg || s->sepoch == g->sepoch[t->tid / SIMD_WIDTH])
                fail("data race on threadgroup memory %s: written by thread %u and read by "
                     "thread %u with no threadgroup_barrier between (missing barrier)",
                     Label(name, idx, d1, d2).s, s->writer, t->tid);
        }
    }
    void note_write() const {
        Group* g = current();
        Thread* t = g->cur;
        if (s->pend_reader != 0 && s->pend_epoch == g->epoch && s->pend_reader - 1 != t->tid)
            fail("data race on threadgroup memory %s: read by thread %u before thread %u "
                 "wrote it, with no threadgroup_barrier between (missing barrier)",
                 Label(name, idx, d1, d2).s, s->pend_reader - 1, t->tid);
        if (s->init && s->writer != t->tid && s->epoch == g->epoch) {
            bool same_sg = s->writer / SIMD_WIDTH == t->tid / SIMD_WIDTH;
            if (!same_sg || s->sepoch == g->sepoch[t->tid / SIMD_WIDTH])
                fail("data race on threadgroup memory %s: written by threads %u and %u with "
                     "no threadgroup_barrier between", Label(name, idx, d1, d2).s, s->writer,
                     t->tid);
        }
        s->writer = t->tid;
        s->epoch = g->epoch;
        s->sepoch = g->sepoch[t->tid / SIMD_WIDTH];
        s->init = 1;
    }
    operator T() const {
        check_read();
        return *p;
    }
    T get() const { return T(*this); }
    const tg_ref& operator=(const T& v) const {
        note_write();
        *p = v;
        return *this;
    }
    const tg_ref& operator=(const tg_ref& o) const { return *this = T(o); }
    template <class U> const tg_ref& operator+=(const U& v) const { return *this = T(get() + v); }
    template <class U> const tg_ref& operator-=(const U& v) const { return *this = T(get() - v); }
    template <class U> const tg_ref& operator*=(const U& v) const { return *this = T(get() * v); }
    template <class U> const tg_ref& operator/=(const U& v) const { return *this = T(get() / v); }
};

template <class T>
struct tg_ptr {
    T* data;
    Shadow* sh;
    long long n;  // elements from data
    long long off;
    const char* name;
    template <class I> tg_ref<T> operator[](I i) const {
        long long k = off + (long long)i;
        if (k < 0 || k >= n)
            fail("threadgroup array %s[%lld] indexed at %lld: out of bounds (a threadgroup array "
                 "smaller than the threads that write it?)", name, n, k);
        return tg_ref<T>{data + k, sh + k, name, k};
    }
    tg_ref<T> operator*() const { return (*this)[0]; }
    template <class I> tg_ptr operator+(I i) const { return tg_ptr{data, sh, n, off + (long long)i, name}; }
    template <class I> tg_ptr operator-(I i) const { return tg_ptr{data, sh, n, off - (long long)i, name}; }
};

// A threadgroup array of one to three dimensions, or one row (plane) of a larger one: each index
// is checked against its own dimension, so tile[r][33] of a float tile[32][33] is an error even
// though the flat element exists (on the GPU it would silently be tile[r + 1][0]).
template <class T, long long N, long long... Rest>
struct tg_array {
    static constexpr long long STRIDE = (1LL * ... * Rest);  // elements per index of this dimension
    T* data;  // the allocation
    Shadow* sh;
    const char* name;
    long long off;  // where this (sub)array starts in the allocation
    int dim;  // 0 for the array itself, 1 for a row of it, ...
    long long dims[3];  // the whole array's dimensions (0: none)

    template <class I> auto operator[](I i) const {
        long long k = (long long)i;
        if (k < 0 || k >= N) {
            if (dims[1] == 0)  // one-dimensional: the wording the 1-D checks always had
                fail("threadgroup array %s[%lld] indexed at %lld: out of bounds (a threadgroup "
                     "array smaller than the threads that write it?)", name, N, k);
            char shape[64];
            int used = 0;
            for (int d = 0; d < 3 && dims[d]; ++d)
                used += std::snprintf(shape + used, sizeof shape - used, "[%lld]", dims[d]);
            fail("threadgroup array %s%s indexed at %lld in dimension %d: out of bounds",
                 name, shape, k, dim + 1);
        }
        if constexpr (sizeof...(Rest) == 0) {
            return tg_ref<T>{data + off + k, sh + off + k, name, off + k, dims[1], dims[2]};
        } else {
            return tg_array<T, Rest...>{data, sh, name, off + k * STRIDE, dim + 1,
                                        {dims[0], dims[1], dims[2]}};
        }
    }
    // the last dimension decays to a pointer, bounded by it (a row of a 2-D array is one row)
    template <long long M = sizeof...(Rest), class = typename std::enable_if<M == 0>::type>
    operator tg_ptr<T>() const { return tg_ptr<T>{data + off, sh + off, N, 0, name}; }
    template <class I, long long M = sizeof...(Rest), class = typename std::enable_if<M == 0>::type>
    tg_ptr<T> operator+(I i) const { return tg_ptr<T>{data + off, sh + off, N, (long long)i, name}; }
};

template <class T, long long... Dims>
tg_array<T, Dims...> tg_decl(int site, const char* name) {
    static_assert(sizeof...(Dims) >= 1 && sizeof...(Dims) <= 3, "1 to 3 dimensions");
    const long long n = (1LL * ... * Dims);
    const long long shape[3] = {Dims...};
    tg_array<T, Dims...> a{nullptr, nullptr, name, 0, 0, {shape[0], 0, 0}};
    for (size_t d = 1; d < sizeof...(Dims); ++d) a.dims[d] = shape[d];
    Group* g = current();
    for (auto& al : g->allocs)
        if (al.site == site) { a.data = (T*)al.data; a.sh = al.shadow; return a; }
    size_t bytes = sizeof(T) * size_t(n);
    g->tg_bytes += bytes;
    if (g->tg_limit && g->tg_bytes > g->tg_limit)
        fail("threadgroup memory %zu bytes (with %s[%lld]) > the device's %zu", g->tg_bytes, name,
             n, g->tg_limit);
    unsigned char* data = (unsigned char*)std::malloc(bytes ? bytes : 1);
    std::memset(data, 0xff, bytes);  // poison: NaN for floats, -1 for integers
    Shadow* sh = (Shadow*)std::calloc(size_t(n) ? size_t(n) : 1, sizeof(Shadow));
    g->allocs.push_back(TgAlloc{site, bytes, data, sh});
    a.data = (T*)data;
    a.sh = sh;
    return a;
}

// -- device memory ---------------------------------------------------------------------------
inline DevShadow* dev_shadow(size_t index, long long nbytes) {
    Group* g = current();
    if (g->dev_shadows.size() <= index) g->dev_shadows.resize(index + 1);
    DevShadow& d = g->dev_shadows[index];
    if (d.s == nullptr && nbytes > 0) {
        d.s = (uint64_t*)std::calloc(size_t(nbytes), sizeof(uint64_t));
        d.nbytes = d.s ? nbytes : 0;
    }
    return &d;
}

// An element of a writable device buffer: reads and writes are checked against the other
// threads of the dispatch. Two threadgroups touching one element (one writing) is a race, as
// threadgroups are not ordered; two threads of one threadgroup, one writing, with no barrier
// between, too.
template <class T>
struct dev_ref {
    T* p;
    DevShadow* sh;
    long long byte;
    const char* name;

    void note(bool write) const {
        if (sh == nullptr || sh->s == nullptr) return;
        Group* g = current();
        Thread* t = g->cur;
        uint64_t tg = g->tg_pos[0] + uint64_t(g->ngroups[0]) *
                      (g->tg_pos[1] + uint64_t(g->ngroups[1]) * g->tg_pos[2]);
        uint64_t ep = g->epoch & 0x7FFFFu;
        uint64_t stamp = (tg << 32) | (uint64_t(t->tid & 0xFFFu) << 20) | (ep << 1) | 1u;
        for (long long b = byte; b < byte + (long long)sizeof(T); ++b) {
            if (b < 0 || b >= sh->nbytes) continue;
            uint64_t prev = sh->s[b];
            if (prev != 0 && prev != stamp) {
                uint64_t ptg = prev >> 32, ptid = (prev >> 20) & 0xFFFu, pep = (prev >> 1) & 0x7FFFFu;
                if (ptg != tg)
                    fail("device buffer %s byte %lld: %s by threadgroup %llu after threadgroup "
                         "%llu wrote it in the same dispatch (threadgroups are not ordered: "
                         "overlapping tiles, or an index past the threadgroup's own range)",
                         name, b, write ? "written" : "read", (unsigned long long)tg,
                         (unsigned long long)ptg);
                if (ptid != t->tid && pep == ep)
                    fail("device buffer %s byte %lld: %s by thread %u after thread %llu wrote it "
                         "with no threadgroup_barrier between (race)", name, b,
                         write ? "written" : "read", t->tid, (unsigned long long)ptid);
            }
            if (write) sh->s[b] = stamp;
        }
    }
    operator T() const {
        note(false);
        return *p;
    }
    const dev_ref& operator=(T v) const {  // by value: a volatile or a proxy source converts
        note(true);
        *p = v;
        return *this;
    }
    const dev_ref& operator=(const dev_ref& o) const { return *this = T(o); }
    template <class U> const dev_ref& operator+=(const U& v) const { return *this = T(T(*this) + v); }
    template <class U> const dev_ref& operator-=(const U& v) const { return *this = T(T(*this) - v); }
    template <class U> const dev_ref& operator*=(const U& v) const { return *this = T(T(*this) * v); }
    template <class U> const dev_ref& operator/=(const U& v) const { return *this = T(T(*this) / v); }
};

template <class T>
struct dev_ptr {
    T* base;
    long long n;  // elements valid from base
    long long off;
    const char* name;
    long long misaligned;  // byte offset of a misaligned vector view (-1: aligned)
    DevShadow* sh;  // writable buffers: who wrote what (nullptr: not tracked)
    long long sh_base;  // byte offset of `base` in the buffer the shadow covers
    dev_ptr() : base(nullptr), n(0), off(0), name("?"), misaligned(-1), sh(nullptr), sh_base(0) {}
    dev_ptr(T* b, long long count, const char* nm, long long o = 0, long long mis = -1,
            DevShadow* shadow = nullptr, long long shadow_base = 0)
        : base(b), n(count), off(o), name(nm), misaligned(mis), sh(shadow), sh_base(shadow_base) {}
    template <class U, class = typename std::enable_if<std::is_same<const U, T>::value>::type>
    dev_ptr(const dev_ptr<U>& o)  // T* -> const T*
        : base(o.base), n(o.n), off(o.off), name(o.name), misaligned(o.misaligned), sh(o.sh),
          sh_base(o.sh_base) {}
    template <class I> long long at(I i) const {
        long long k = off + (long long)i;
        if (misaligned >= 0)
            fail("device buffer %s accessed as a %zu-byte type at byte offset %lld: misaligned "
                 "(needs %zu-byte alignment; vector loads need aligned rows)", name, sizeof(T),
                 misaligned + k * (long long)sizeof(T), alignof(T));
        if (k < 0 || k >= n)
            fail("device buffer %s read or written at element %lld: out of bounds (it holds %lld)",
                 name, k, n);
        return k;
    }
    template <class I> decltype(auto) operator[](I i) const {
        long long k = at(i);
        if constexpr (std::is_const<T>::value) {
            return (base[k]);
        } else {
            return dev_ref<T>{&base[k], sh, sh_base + k * (long long)sizeof(T), name};
        }
    }
    decltype(auto) operator*() const { return (*this)[0]; }
    template <class I> dev_ptr operator+(I i) const {
        return dev_ptr(base, n, name, off + (long long)i, misaligned, sh, sh_base); }
    template <class I> dev_ptr operator-(I i) const {
        return dev_ptr(base, n, name, off - (long long)i, misaligned, sh, sh_base); }
    template <class I> dev_ptr& operator+=(I i) { off += (long long)i; return *this; }
};

// (device const float4*)(p): a view of the same bytes as U. A misaligned view is an error only
// when it is accessed (forming the pointer is harmless on the GPU).
template <class U, class T>
dev_ptr<U> dev_cast(const dev_ptr<T>& p) {
    long long byte_off = p.off * (long long)sizeof(T);
    uintptr_t addr = (uintptr_t)((const unsigned char*)p.base + byte_off);
    long long total = p.n * (long long)sizeof(T);
    long long remaining = byte_off >= 0 ? (total - byte_off) / (long long)sizeof(U) : 0;
    bool bad = addr % alignof(U) != 0 || p.misaligned >= 0;
    return dev_ptr<U>((U*)addr, remaining < 0 ? 0 : remaining, p.name, 0, bad ? byte_off : -1,
                      p.sh, p.sh_base + byte_off);
}

// -- atomics ---------------------------------------------------------------------------------
// A thread's fiber switches only at a barrier or a SIMD-group function, and threadgroups run one
// after another, so each atomic function below (a plain read-modify-write with no switch inside)
// is atomic with respect to every other thread of the dispatch: std::atomic would add nothing.
// Atomic accesses are not race-checked (racing is what they are for).
template <class T> struct atomic_cell { T v; };  // no operators: only the atomic functions reach it

// The element an atomic function acts on; `s` is its shadow in threadgroup memory (nullptr in a
// device buffer, which the host initialized).
template <class T> struct atomic_addr {
    T* p;
    Shadow* s;
    const char* name;
    long long idx, d1, d2;
};

// &counter[i] and &hist[i]: the element's address (its bounds were checked by the subscript).
template <class T> atomic_addr<T> operator&(const dev_ref<atomic_cell<T>>& r) {
    return {&r.p->v, nullptr, r.name, r.byte / (long long)sizeof(T), 0, 0};
}
template <class T> atomic_addr<T> operator&(const tg_ref<atomic_cell<T>>& r) {
    return {&r.p->v, r.s, r.name, r.idx, r.d1, r.d2};
}
// `counter` or `counter + i` (a pointer) and `hist` (an array) stand for their first element.
template <class T> atomic_addr<T> atomic_at(const atomic_addr<T>& a) { return a; }
template <class T> atomic_addr<T> atomic_at(const dev_ptr<atomic_cell<T>>& p) { return &p[0]; }
template <class T> atomic_addr<T> atomic_at(const tg_ptr<atomic_cell<T>>& p) { return &p[0]; }
template <class T, long long N>
atomic_addr<T> atomic_at(const tg_array<atomic_cell<T>, N>& a) { return &a[0]; }

// Before reading an atomic: threadgroup memory starts undefined, so it must have been stored to
// (by atomic_store_explicit, then a threadgroup_barrier before the other threads' updates).
template <class T> void atomic_read(const atomic_addr<T>& a, const char* fn) {
    if (a.s != nullptr && !a.s->init)
        fail("%s on threadgroup memory %s, which no thread stored to first (threadgroup memory "
             "starts undefined: atomic_store_explicit it, then threadgroup_barrier, before "
             "other threads update it)", fn, Label(a.name, a.idx, a.d1, a.d2).s);
}
template <class T> void atomic_wrote(const atomic_addr<T>& a) {
    if (a.s != nullptr) a.s->init = 1;
    me()->spins = 0;
}

// A thread that keeps reading an atomic nobody changes is waiting for another thread. Here that
// other thread never runs (no switch inside a loop), and on a GPU threads have no forward-progress
// guarantee either: after SPIN_LIMIT such reads in a row the dispatch fails instead of hanging.
constexpr uint64_t SPIN_LIMIT = uint64_t(1) << 24;
template <class T> void atomic_spun(const atomic_addr<T>& a, const char* fn) {
    Thread* t = me();
    t->spins = t->spin_at == (const void*)a.p ? t->spins + 1 : 1;
    t->spin_at = a.p;
    if (t->spins > SPIN_LIMIT)
        fail("%s of %s returned the same value %llu times in a row: a spin-wait on another "
             "thread, which the executor cannot run (a threadgroup's threads switch only at "
             "barriers, threadgroups run one after another) and a GPU does not guarantee",
             fn, Label(a.name, a.idx, a.d1, a.d2).s, (unsigned long long)SPIN_LIMIT);
}

// Integer atomic adds wrap around (computed unsigned: no signed overflow); float ones round.
template <class T> T atomic_add(T a, T b, bool subtract) {
    if constexpr (std::is_integral<T>::value) {
        typedef typename std::make_unsigned<T>::type U;
        return T(subtract ? U(a) - U(b) : U(a) + U(b));
    } else {
        return subtract ? a - b : a + b;
    }
}

// -- collectives -----------------------------------------------------------------------------
inline void arrive(int op, unsigned size, int64_t arg, CombineFn fn) {
    Thread* t = me();
    t->op = op;
    t->size = size;
    t->arg = arg;
    t->combine = fn;
    t->st = AT_SIMD;
    yield_to_scheduler();
}

template <class T> T poison() {
    T v;
    std::memset((void*)&v, 0xff, sizeof(T));
    return v;
}

}  // namespace porter_rt

// ---------------------------------------------------------------------------------------------
// fast:: math with the error Apple documents, not libm's. The bounds are the Metal Shading
// Language Specification's, version 4 (2025-10-23; 4.1 has the same section 8.4): Table 8.2
// "Accuracy of single-precision operations and functions with fast math enabled". Each function
// returns the exact result (computed in double) moved by a deterministic fraction of its bound,
// so a kernel that passes only with libm's precision fails here as it can on a Mac, and every
// run gives the same bits. What the table states, and how it is applied:
//   exp, exp2      <= 3 + floor(fabs(2 * x)) ulp
//   log            x in [0.5, 2]: absolute error <= 2^-21; other x > 0: <= 3 ulp; x <= 0: undefined
//   log2           x in [0.5, 2]: absolute error <= 2^-22; other x > 0: <= 2 ulp; x <= 0: undefined
//   rsqrt          <= 2 ulp
//   sqrt           "implemented as x * rsqrt(x) with special cases handled correctly"
//   sin, cos       x in [-pi, pi]: absolute error <= 2^-13, "and larger otherwise" (no bound
//                  given: the in-range bound is used everywhere, so outside it this is lenient)
//   tanh           "implemented as (t - 1.0) / (t + 1.0), where t = exp(2.0 * x)", with the fast
//                  exp and the fast division (x / y <= 2.5 ulp for y in [2^-126, 2^126]): NaN
//                  once exp(2x) overflows (x > ~44), as the formula gives
//   pow, powr      "implemented as exp2(y * log2(x))", undefined for x = 0 and y = 0
// Undefined results are poison (NaN), as elsewhere in the executor.
namespace porter_rt {
namespace fm {

enum Fn : uint32_t { F_EXP = 1, F_EXP2, F_LOG, F_LOG2, F_RSQRT, F_SIN, F_COS, F_DIV };

// A number in [-1, 1) from the function and its argument bits (splitmix64's finalizer): the
// same call always makes the same error, neighbouring inputs do not share one.
inline double noise(Fn fn, float a, float b = 0.0f) {
    uint32_t ua, ub;
    std::memcpy(&ua, &a, 4);
    std::memcpy(&ub, &b, 4);
    uint64_t h = ((uint64_t(ua) << 32) | ub) ^ (uint64_t(fn) * 0x9E3779B97F4A7C15ull);
    h ^= h >> 30; h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27; h *= 0x94D049BB133111EBull;
    h ^= h >> 31;
    return double(h >> 11) * 0x1p-52 - 1.0;
}

// One ulp of a float in the binade of r (the specification's definition, section 8.4).
inline double ulp(double r) {
    int e = r == 0.0 ? -126 : std::ilogb(r);
    return std::ldexp(1.0, (e < -126 ? -126 : e) - 23);
}

// The exact r moved by u * k ulp, less the half ulp the rounding to float adds.
inline float ulps(double r, double k, double u) {
    if (r == 0.0 || !std::isfinite(r)) return float(r);
    return float(r + u * (k - 0.5) * ulp(r));
}
inline float absolute(double r, double err, double u) {
    if (!std::isfinite(r)) return float(r);
    return float(r + u * (err - 0.5 * ulp(r)));
}

inline float exp(float x) {
    return ulps(std::exp(double(x)), 3.0 + std::floor(std::fabs(2.0 * x)), noise(F_EXP, x));
}
inline float exp2(float x) {
    return ulps(std::exp2(double(x)), 3.0 + std::floor(std::fabs(2.0 * x)), noise(F_EXP2, x));
}
inline float log(float x) {
    if (!(x > 0.0f)) return poison<float>();
    double r = std::log(double(x));
    return x >= 0.5f && x <= 2.0f ? absolute(r, 0x1p-21, noise(F_LOG, x))
                                  : ulps(r, 3.0, noise(F_LOG, x));
}
// log2 for pow, where x = 0 is defined (-inf, so pow(0, y > 0) = 0) and x < 0 gives NaN
inline float log2_of(float x) {
    if (!(x > 0.0f) || std::isinf(x)) return std::log2(x);
    double r = std::log2(double(x));
    return x >= 0.5f && x <= 2.0f ? absolute(r, 0x1p-22, noise(F_LOG2, x))
                                  : ulps(r, 2.0, noise(F_LOG2, x));
}
inline float log2(float x) { return x > 0.0f ? log2_of(x) : poison<float>(); }
inline float rsqrt(float x) { return ulps(1.0 / std::sqrt(double(x)), 2.0, noise(F_RSQRT, x)); }
inline float sqrt(float x) {
    if (!(x > 0.0f) || std::isinf(x)) return std::sqrt(x);  // 0, -0, inf, negative, NaN
    return x * rsqrt(x);
}
inline float sin(float x) { return absolute(std::sin(double(x)), 0x1p-13, noise(F_SIN, x)); }
inline float cos(float x) { return absolute(std::cos(double(x)), 0x1p-13, noise(F_COS, x)); }
inline float divide(float a, float b) {
    float m = std::fabs(b);
    if (!(m >= 0x1p-126f && m <= 0x1p126f)) return a / b;  // no bound stated outside
    return ulps(double(a) / double(b), 2.5, noise(F_DIV, a, b));
}
inline float tanh(float x) {
    float t = exp(2.0f * x);
    return divide(t - 1.0f, t + 1.0f);
}
inline float pow(float x, float y) {
    if (x == 0.0f && y == 0.0f) return poison<float>();
    return exp2(y * log2_of(x));
}

}  // namespace fm
}  // namespace porter_rt

// ---------------------------------------------------------------------------------------------
// MSL types and functions
namespace metal {

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };

template <class T, int N> struct vec;
template <class T> struct vec<T, 2> {
    union { struct { T x, y; }; T v_[2]; };
    vec() = default;
    explicit vec(T s) : x(s), y(s) {}
    vec(T a, T b) : x(a), y(b) {}
    template <class U> explicit vec(const vec<U, 2>& o) : x(T(o.x)), y(T(o.y)) {}
    T& operator[](int i) { return v_[i]; }
    const T& operator[](int i) const { return v_[i]; }
};
template <class T> struct vec<T, 3> {
    union { struct { T x, y, z; }; T v_[4]; };
    vec() = default;
    explicit vec(T s) : x(s), y(s), z(s) {}
    vec(T a, T b, T c) : x(a), y(b), z(c) {}
    template <class U> explicit vec(const vec<U, 3>& o) : x(T(o.x)), y(T(o.y)), z(T(o.z)) {}
    T& operator[](int i) { return v_[i]; }
    const T& operator[](int i) const { return v_[i]; }
};
template <class T> struct alignas(sizeof(T) * 4) vec<T, 4> {
    union { struct { T x, y, z, w; }; T v_[4]; };
    vec() = default;
    explicit vec(T s) : x(s), y(s), z(s), w(s) {}
    vec(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {}
    template <class U> explicit vec(const vec<U, 4>& o) : x(T(o.x)), y(T(o.y)), z(T(o.z)), w(T(o.w)) {}
    T& operator[](int i) { return v_[i]; }
    const T& operator[](int i) const { return v_[i]; }
};

#define PORTER_VEC_BINOP(OP)                                                              \
    template <class T, int N> vec<T, N> operator OP(const vec<T, N>& a, const vec<T, N>& b) { \
        vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = T(a[i] OP b[i]); return r; }          \
    template <class T, int N> vec<T, N> operator OP(const vec<T, N>& a, T b) {                \
        vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = T(a[i] OP b); return r; }             \
    template <class T, int N> vec<T, N> operator OP(T a, const vec<T, N>& b) {                \
        vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = T(a OP b[i]); return r; }             \
    template <class T, int N, class U> vec<T, N>& operator OP##=(vec<T, N>& a, const U& b) {  \
        a = a OP b; return a; }
PORTER_VEC_BINOP(+)
PORTER_VEC_BINOP(-)
PORTER_VEC_BINOP(*)
PORTER_VEC_BINOP(/)
#undef PORTER_VEC_BINOP
template <class T, int N> vec<T, N> operator-(const vec<T, N>& a) {
    vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = T(-a[i]); return r; }

typedef vec<float, 2> float2; typedef vec<float, 3> float3; typedef vec<float, 4> float4;
typedef vec<half, 2> half2; typedef vec<half, 3> half3; typedef vec<half, 4> half4;
typedef vec<bfloat, 2> bfloat2; typedef vec<bfloat, 3> bfloat3; typedef vec<bfloat, 4> bfloat4;
typedef vec<int, 2> int2; typedef vec<int, 3> int3; typedef vec<int, 4> int4;
typedef vec<uint, 2> uint2; typedef vec<uint, 3> uint3; typedef vec<uint, 4> uint4;
typedef vec<ushort, 2> ushort2; typedef vec<ushort, 3> ushort3;
typedef vec<ulong, 2> ulong2;

// math: float, half, bfloat (computed in float, as the GPU's half ALUs round per operation)
#define PORTER_UNARY(NAME, EXPR)                                                         \
    inline float NAME(float x) { return EXPR; }                                          \
    inline half NAME(half x) { float xf = float(x); { float x = xf; return half(EXPR); } } \
    inline bfloat NAME(bfloat x) { float xf = float(x); { float x = xf; return bfloat(EXPR); } } \
    template <class T, int N> vec<T, N> NAME(const vec<T, N>& v) {                       \
        vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = NAME(v[i]); return r; }
PORTER_UNARY(exp, std::exp(x))
PORTER_UNARY(exp2, std::exp2(x))
PORTER_UNARY(log, std::log(x))
PORTER_UNARY(log2, std::log2(x))
PORTER_UNARY(sqrt, std::sqrt(x))
PORTER_UNARY(rsqrt, 1.0f / std::sqrt(x))
PORTER_UNARY(fabs, std::fabs(x))
PORTER_UNARY(tanh, std::tanh(x))
PORTER_UNARY(sin, std::sin(x))
PORTER_UNARY(cos, std::cos(x))
PORTER_UNARY(floor, std::floor(x))
PORTER_UNARY(ceil, std::ceil(x))
PORTER_UNARY(round, std::round(x))
PORTER_UNARY(trunc, std::trunc(x))
PORTER_UNARY(sign, (x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x != x ? 0.0f : 0.0f))))
#undef PORTER_UNARY
inline float abs(float x) { return std::fabs(x); }
inline int abs(int x) { return x < 0 ? -x : x; }
inline long abs(long x) { return x < 0 ? -x : x; }

#define PORTER_BINARY(NAME, EXPR)                                                           \
    inline float NAME(float a, float b) { return EXPR; }                                    \
    inline half NAME(half ah, half bh) { float a = float(ah), b = float(bh); return half(EXPR); } \
    inline bfloat NAME(bfloat ah, bfloat bh) { float a = float(ah), b = float(bh); return bfloat(EXPR); }
PORTER_BINARY(fmax, std::fmax(a, b))
PORTER_BINARY(fmin, std::fmin(a, b))
PORTER_BINARY(pow, std::pow(a, b))
PORTER_BINARY(powr, std::pow(a, b))
PORTER_BINARY(copysign, std::copysign(a, b))
PORTER_BINARY(fmod, std::fmod(a, b))
#undef PORTER_BINARY
template <class T, int N> vec<T, N> fmax(const vec<T, N>& a, const vec<T, N>& b) {
    vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = fmax(a[i], b[i]); return r; }
template <class T, int N> vec<T, N> fmin(const vec<T, N>& a, const vec<T, N>& b) {
    vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = fmin(a[i], b[i]); return r; }
inline float max(float a, float b) { return std::fmax(a, b); }
inline float min(float a, float b) { return std::fmin(a, b); }
inline half max(half a, half b) { return half(std::fmax(float(a), float(b))); }
inline half min(half a, half b) { return half(std::fmin(float(a), float(b))); }
inline bfloat max(bfloat a, bfloat b) { return bfloat(std::fmax(float(a), float(b))); }
inline bfloat min(bfloat a, bfloat b) { return bfloat(std::fmin(float(a), float(b))); }
template <class T, class = typename std::enable_if<std::is_integral<T>::value>::type>
T max(T a, T b) { return a > b ? a : b; }
template <class T, class = typename std::enable_if<std::is_integral<T>::value>::type>
T min(T a, T b) { return a < b ? a : b; }
template <class T, int N> vec<T, N> max(const vec<T, N>& a, const vec<T, N>& b) { return fmax(a, b); }
template <class T, int N> vec<T, N> min(const vec<T, N>& a, const vec<T, N>& b) { return fmin(a, b); }
inline float fma(float a, float b, float c) { return std::fma(a, b, c); }
inline float clamp(float x, float lo, float hi) { return std::fmin(std::fmax(x, lo), hi); }
template <class T, class = typename std::enable_if<std::is_integral<T>::value>::type>
T clamp(T x, T lo, T hi) { return x < lo ? lo : (x > hi ? hi : x); }
inline float mix(float a, float b, float t) { return a + (b - a) * t; }
inline float select(float a, float b, bool c) { return c ? b : a; }
inline bool isnan(float x) { return std::isnan(x); }
inline bool isinf(float x) { return std::isinf(x); }
inline bool isfinite(float x) { return std::isfinite(x); }
template <class T, class U> T as_type(const U& u) {
    static_assert(sizeof(T) == sizeof(U), "as_type needs types of one size");
    T t; std::memcpy((void*)&t, (const void*)&u, sizeof(T)); return t;
}
namespace precise { using metal::exp; using metal::log; using metal::tanh; using metal::sqrt;
                    using metal::rsqrt; using metal::exp2; using metal::log2; using metal::pow;
                    using metal::powr; using metal::sin; using metal::cos; }
// fast:: for float: libm's result moved by up to the error Apple allows (porter_rt::fm); half and
// bfloat have one variant in Metal (Table 8.3 of the specification), computed as above.
namespace fast {
#define PORTER_FAST(NAME)                                                                     \
    inline float NAME(float x) { return porter_rt::fm::NAME(x); }                             \
    inline half NAME(half x) { return metal::NAME(x); }                                       \
    inline bfloat NAME(bfloat x) { return metal::NAME(x); }                                   \
    template <class T, int N> vec<T, N> NAME(const vec<T, N>& v) {                            \
        vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = fast::NAME(v[i]); return r; }
PORTER_FAST(exp)
PORTER_FAST(exp2)
PORTER_FAST(log)
PORTER_FAST(log2)
PORTER_FAST(sqrt)
PORTER_FAST(rsqrt)
PORTER_FAST(tanh)
PORTER_FAST(sin)
PORTER_FAST(cos)
#undef PORTER_FAST
inline float pow(float x, float y) { return porter_rt::fm::pow(x, y); }
inline float powr(float x, float y) { return porter_rt::fm::pow(x, y); }
inline half pow(half x, half y) { return metal::pow(x, y); }
inline half powr(half x, half y) { return metal::powr(x, y); }
}  // namespace fast

// -- synchronisation -------------------------------------------------------------------------
inline void threadgroup_barrier(mem_flags) {
    porter_rt::Thread* t = porter_rt::me();
    t->st = porter_rt::AT_BARRIER;
    porter_rt::yield_to_scheduler();
}

// -- atomic functions ------------------------------------------------------------------------
// atomic_int, atomic_uint and atomic_float in device and threadgroup memory, through the
// atomic_*_explicit functions with memory_order_relaxed: the only order Metal's atomic functions
// take (the translator refuses the others, naming them, before this is compiled).
enum memory_order { memory_order_relaxed };
template <class T> using atomic = porter_rt::atomic_cell<T>;
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;

template <class P, class U> void atomic_store_explicit(const P& obj, U desired, memory_order) {
    auto a = porter_rt::atomic_at(obj);
    *a.p = decltype(+*a.p)(desired);
    porter_rt::atomic_wrote(a);
}
template <class P> auto atomic_load_explicit(const P& obj, memory_order) {
    auto a = porter_rt::atomic_at(obj);
    porter_rt::atomic_read(a, "atomic_load_explicit");
    porter_rt::atomic_spun(a, "atomic_load_explicit");
    return *a.p;
}
template <class P, class U> auto atomic_exchange_explicit(const P& obj, U desired, memory_order) {
    auto a = porter_rt::atomic_at(obj);
    porter_rt::atomic_read(a, "atomic_exchange_explicit");
    auto old = *a.p;
    *a.p = decltype(old)(desired);
    porter_rt::atomic_wrote(a);
    return old;
}
// Compares the bytes, as Metal does; never fails spuriously here (a "weak" one may on a GPU).
template <class P, class T, class U>
bool atomic_compare_exchange_weak_explicit(const P& obj, T* expected, U desired, memory_order,
                                           memory_order) {
    auto a = porter_rt::atomic_at(obj);
    static_assert(std::is_same<T, typename std::remove_reference<decltype(*a.p)>::type>::value,
                  "atomic_compare_exchange_weak_explicit: `expected` must point to the atomic's "
                  "value type");
    porter_rt::atomic_read(a, "atomic_compare_exchange_weak_explicit");
    if (std::memcmp(a.p, expected, sizeof(T)) == 0) {
        *a.p = T(desired);
        porter_rt::atomic_wrote(a);
        return true;
    }
    *expected = *a.p;
    porter_rt::atomic_spun(a, "atomic_compare_exchange_weak_explicit");
    return false;
}

#define PORTER_ATOMIC_RMW(NAME, NEW, INT_ONLY)                                                   \
    template <class P, class U> auto NAME(const P& obj, U operand, memory_order) {               \
        auto a = porter_rt::atomic_at(obj);                                                      \
        typedef decltype(+*a.p) T;                                                               \
        static_assert(!INT_ONLY || std::is_integral<T>::value,                                   \
                      #NAME ": Metal has it for atomic_int and atomic_uint, not atomic_float");  \
        porter_rt::atomic_read(a, #NAME);                                                        \
        const T old = *a.p, v = T(operand);                                                      \
        *a.p = T(NEW);                                                                           \
        porter_rt::atomic_wrote(a);                                                              \
        return old;                                                                              \
    }
PORTER_ATOMIC_RMW(atomic_fetch_add_explicit, porter_rt::atomic_add(old, v, false), false)
PORTER_ATOMIC_RMW(atomic_fetch_sub_explicit, porter_rt::atomic_add(old, v, true), false)
PORTER_ATOMIC_RMW(atomic_fetch_min_explicit, old < v ? old : v, true)
PORTER_ATOMIC_RMW(atomic_fetch_max_explicit, old > v ? old : v, true)
PORTER_ATOMIC_RMW(atomic_fetch_and_explicit, old & v, true)
PORTER_ATOMIC_RMW(atomic_fetch_or_explicit, old | v, true)
PORTER_ATOMIC_RMW(atomic_fetch_xor_explicit, old ^ v, true)
#undef PORTER_ATOMIC_RMW

// -- SIMD-group functions --------------------------------------------------------------------
namespace detail {
using porter_rt::Thread;
template <class T> T in_of(Thread* t) { T v; std::memcpy((void*)&v, t->in, sizeof(T)); return v; }
template <class T> void set_out(Thread* t, const T& v) { std::memcpy(t->out, (const void*)&v, sizeof(T)); }
template <class T> T add(const T& a, const T& b) { return T(a + b); }
template <class T> T mul(const T& a, const T& b) { return T(a * b); }
template <class T> T vmax(const T& a, const T& b) { return max(a, b); }
template <class T> T vmin(const T& a, const T& b) { return min(a, b); }
inline bool vmax(const bool& a, const bool& b) { return a || b; }
inline bool vmin(const bool& a, const bool& b) { return a && b; }
template <class T, int OP> void combine(Thread** lanes, int n) {
    // lanes: 32 slots, nullptr for inactive lanes; n: active count
    using porter_rt::poison;
    if (OP <= porter_rt::OP_XOR) {
        // pairwise tree over lane order: deterministic, and what a shuffle-based tree computes
        T vals[32]; bool have[32];
        for (int l = 0; l < 32; ++l) { have[l] = lanes[l] != nullptr; if (have[l]) vals[l] = in_of<T>(lanes[l]); }
        for (int s = 1; s < 32; s <<= 1)
            for (int l = 0; l + s < 32; l += 2 * s) {
                if (!have[l + s]) continue;
                if (!have[l]) { vals[l] = vals[l + s]; have[l] = true; continue; }
                if (OP == porter_rt::OP_SUM) vals[l] = add(vals[l], vals[l + s]);
                else if (OP == porter_rt::OP_PROD) vals[l] = mul(vals[l], vals[l + s]);
                else if (OP == porter_rt::OP_MAX) vals[l] = vmax(vals[l], vals[l + s]);
                else if (OP == porter_rt::OP_MIN) vals[l] = vmin(vals[l], vals[l + s]);
                else porter_rt::fail("bitwise SIMD-group reductions are not implemented here");
            }
        for (int l = 0; l < 32; ++l) if (lanes[l]) set_out(lanes[l], vals[0]);
        return;
    }
    for (int l = 0; l < 32; ++l) {
        Thread* t = lanes[l];
        if (!t) continue;
        int64_t a = t->arg;
        int src = l;
        switch (OP) {
            case porter_rt::OP_BROADCAST: case porter_rt::OP_SHUFFLE: src = int(a); break;
            case porter_rt::OP_BROADCAST_FIRST: { src = 0; while (src < 32 && !lanes[src]) ++src; break; }
            case porter_rt::OP_SHUFFLE_DOWN: src = l + int(a) < 32 ? l + int(a) : l; break;
            case porter_rt::OP_SHUFFLE_UP: src = l - int(a) >= 0 ? l - int(a) : l; break;
            case porter_rt::OP_SHUFFLE_XOR: src = l ^ int(a); break;
            default: break;
        }
        if (OP == porter_rt::OP_PREFIX_EXCL_SUM || OP == porter_rt::OP_PREFIX_INCL_SUM) {
            T acc = T(0);
            for (int k = 0; k < l + (OP == porter_rt::OP_PREFIX_INCL_SUM); ++k)
                if (lanes[k]) acc = add(acc, in_of<T>(lanes[k]));
            set_out(t, acc);
            continue;
        }
        if (src < 0 || src >= 32 || !lanes[src]) set_out(t, poison<T>());
        else set_out(t, in_of<T>(lanes[src]));
    }
}
template <class T, int OP> T collective(const T& v, int64_t arg = 0) {
    static_assert(sizeof(T) <= porter_rt::SLOT, "SIMD-group operand too large");
    Thread* t = porter_rt::me();
    std::memcpy(t->in, (const void*)&v, sizeof(T));
    porter_rt::arrive(OP, sizeof(T), arg, &combine<T, OP>);
    T r; std::memcpy((void*)&r, t->out, sizeof(T)); return r;
}
inline void combine_votes(Thread** lanes, int) {
    // simd_all / simd_any / simd_is_first on the active lanes
    bool all = true, any = false; int first = -1;
    for (int l = 0; l < 32; ++l) if (lanes[l]) { bool b = lanes[l]->in[0] != 0; all = all && b; any = any || b; if (first < 0) first = l; }
    for (int l = 0; l < 32; ++l) if (lanes[l]) {
        int op = lanes[l]->op;
        lanes[l]->out[0] = op == porter_rt::OP_ALL ? all : (op == porter_rt::OP_ANY ? any : l == first);
    }
}
inline bool vote(bool b, int op) {
    Thread* t = porter_rt::me();
    t->in[0] = b;
    porter_rt::arrive(op, 1, 0, &combine_votes);
    return t->out[0] != 0;
}
}  // namespace detail

template <class T> T simd_sum(T v) { return detail::collective<T, porter_rt::OP_SUM>(v); }
template <class T> T simd_product(T v) { return detail::collective<T, porter_rt::OP_PROD>(v); }
template <class T> T simd_max(T v) { return detail::collective<T, porter_rt::OP_MAX>(v); }
template <class T> T simd_min(T v) { return detail::collective<T, porter_rt::OP_MIN>(v); }
template <class T> T simd_broadcast(T v, ushort lane) { return detail::collective<T, porter_rt::OP_BROADCAST>(v, lane); }
template <class T> T simd_broadcast_first(T v) { return detail::collective<T, porter_rt::OP_BROADCAST_FIRST>(v); }
template <class T> T simd_shuffle(T v, ushort lane) { return detail::collective<T, porter_rt::OP_SHUFFLE>(v, lane); }
template <class T> T simd_shuffle_down(T v, ushort d) { return detail::collective<T, porter_rt::OP_SHUFFLE_DOWN>(v, d); }
template <class T> T simd_shuffle_up(T v, ushort d) { return detail::collective<T, porter_rt::OP_SHUFFLE_UP>(v, d); }
template <class T> T simd_shuffle_xor(T v, ushort m) { return detail::collective<T, porter_rt::OP_SHUFFLE_XOR>(v, m); }
template <class T> T simd_prefix_exclusive_sum(T v) { return detail::collective<T, porter_rt::OP_PREFIX_EXCL_SUM>(v); }
template <class T> T simd_prefix_inclusive_sum(T v) { return detail::collective<T, porter_rt::OP_PREFIX_INCL_SUM>(v); }
inline bool simd_all(bool b) { return detail::vote(b, porter_rt::OP_ALL); }
inline bool simd_any(bool b) { return detail::vote(b, porter_rt::OP_ANY); }
inline bool simd_is_first() { return detail::vote(true, porter_rt::OP_IS_FIRST); }
inline void simdgroup_barrier(mem_flags) {
    detail::vote(true, porter_rt::OP_SIMD_BARRIER);
}

// -- SIMD-group matrices (8x8) ---------------------------------------------------------------
// Every lane holds the whole matrix here (the GPU spreads it over the lanes); each function is
// a SIMD-group collective, so all active lanes of the SIMD-group must call it together, and a
// store writes each element once (lane l the elements l, l + 32, ...), so races with other
// SIMD-groups are still seen.
template <class T, int R, int C>
struct simdgroup_matrix {
    T v[R * C];
    simdgroup_matrix() = default;
    explicit simdgroup_matrix(T x) { for (int i = 0; i < R * C; ++i) v[i] = x; }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int R, int C>
simdgroup_matrix<T, R, C> make_filled_simdgroup_matrix(T x) { return simdgroup_matrix<T, R, C>(x); }

namespace detail {
inline void matrix_collective() { vote(true, porter_rt::OP_MATRIX); }
}  // namespace detail

template <class T, int R, int C, class P>
void simdgroup_load(simdgroup_matrix<T, R, C>& d, P src, ulong elements_per_row = C,
                    ulong2 origin = ulong2(0, 0), bool transpose = false) {
    detail::matrix_collective();
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            long long row = (long long)origin.y + (transpose ? c : r);
            long long col = (long long)origin.x + (transpose ? r : c);
            d.v[r * C + c] = T(src[row * (long long)elements_per_row + col]);
        }
}

template <class T, int R, int C, class P>
void simdgroup_store(const simdgroup_matrix<T, R, C>& m, P dst, ulong elements_per_row = C,
                     ulong2 origin = ulong2(0, 0), bool transpose = false) {
    detail::matrix_collective();
    uint lane = porter_rt::me()->tid % porter_rt::SIMD_WIDTH;
    for (int i = (int)lane; i < R * C; i += porter_rt::SIMD_WIDTH) {
        int r = i / C, c = i % C;
        long long row = (long long)origin.y + (transpose ? c : r);
        long long col = (long long)origin.x + (transpose ? r : c);
        dst[row * (long long)elements_per_row + col] = m.v[i];
    }
}

template <class T, int M, int K, int N>
void simdgroup_multiply_accumulate(simdgroup_matrix<T, M, N>& d,
                                   const simdgroup_matrix<T, M, K>& a,
                                   const simdgroup_matrix<T, K, N>& b,
                                   const simdgroup_matrix<T, M, N>& c) {
    detail::matrix_collective();
    simdgroup_matrix<T, M, N> r;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            float acc = float(c.v[i * N + j]);
            for (int k = 0; k < K; ++k) acc = std::fma(float(a.v[i * K + k]), float(b.v[k * N + j]), acc);
            r.v[i * N + j] = T(acc);
        }
    d = r;
}

template <class T, int M, int K, int N>
void simdgroup_multiply(simdgroup_matrix<T, M, N>& d, const simdgroup_matrix<T, M, K>& a,
                        const simdgroup_matrix<T, K, N>& b) {
    simdgroup_multiply_accumulate(d, a, b, simdgroup_matrix<T, M, N>(T(0)));
}

}  // namespace metal

// ---------------------------------------------------------------------------------------------
// the dispatch: threadgroups one after another, each threadgroup's threads as fibers
namespace porter_rt {

// One stack per thread of the largest threadgroup so far, each with an inaccessible guard page
// below it: a kernel that overflows its stack (huge local arrays) stops with SIGSEGV instead of
// silently overwriting the stack of the thread next to it.
struct StackPool {
    unsigned char* base = nullptr;
    size_t slots = 0;
    static size_t page() { return (size_t)sysconf(_SC_PAGESIZE); }
    static size_t slot_bytes() { return STACK_BYTES + page(); }
    unsigned char* stack(size_t i) const { return base + i * slot_bytes() + page(); }
    bool reserve(size_t n) {
        if (n <= slots) return true;
        if (base) munmap(base, slots * slot_bytes());
        void* p = mmap(nullptr, n * slot_bytes(), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) { base = nullptr; slots = 0; return false; }
        base = (unsigned char*)p;
        slots = n;
        for (size_t i = 0; i < n; ++i) mprotect(base + i * slot_bytes(), page(), PROT_NONE);
        return true;
    }
};

inline StackPool& stack_pool() {
    static thread_local StackPool pool;
    return pool;
}

// A fault in a guard page is named on stderr before the handler that was there before (Python's
// faulthandler, or the default action) takes the signal: the process still ends with SIGSEGV.
inline struct sigaction& saved_segv() {
    static struct sigaction s;
    return s;
}

inline void on_segv(int, siginfo_t* info, void*) {
    const StackPool& p = stack_pool();
    uintptr_t a = (uintptr_t)info->si_addr, b = (uintptr_t)p.base;
    if (p.base && a >= b && a < b + p.slots * StackPool::slot_bytes() &&
        (a - b) % StackPool::slot_bytes() < StackPool::page()) {
        static const char msg[] = "porter Metal executor: a kernel thread overflowed its 128 KiB "
                                  "stack (local arrays too large for the CPU executor)\n";
        ssize_t ignored = write(2, msg, sizeof msg - 1);
        (void)ignored;
    }
    sigaction(SIGSEGV, &saved_segv(), nullptr);  // returning re-faults into the previous handler
}

inline void guard_stack_faults() {
    static bool installed = false;
    if (!installed) {
        installed = true;
        struct sigaction sa;
        std::memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &saved_segv());
    }
    static thread_local bool alt = false;
    if (!alt) {  // a handler needs a stack of its own when the fault is a stack overflow
        alt = true;
        stack_t old;
        if (sigaltstack(nullptr, &old) == 0 && (old.ss_flags & SS_DISABLE)) {
            stack_t ss;
            ss.ss_size = 64 * 1024;
            ss.ss_sp = std::malloc(ss.ss_size);
            ss.ss_flags = 0;
            if (ss.ss_sp) sigaltstack(&ss, nullptr);
        }
    }
}

inline void fiber_main() {
    Group* g = current();
    Thread* t = g->cur;
    g->thunk(g->fn, t);
    t->st = DONE;
    switch_ctx(&t->ctx, &g->sched);  // never resumed
    std::abort();
}

// A read of threadgroup memory that no thread wrote before the barrier (or the end) closing its
// interval: report the first one.
inline bool judge_pending(Group& g, const char* when) {
    if (g.pending.empty()) return false;
    const Pending& p = g.pending[0];
    std::snprintf(g.err, sizeof g.err,
                  "threadgroup (%u,%u,%u): thread %u read threadgroup memory %s but no "
                  "thread wrote it before %s (uninitialized: fewer threads than the kernel "
                  "assumes, or a missing write)",
                  g.tg_pos[0], g.tg_pos[1], g.tg_pos[2], p.reader,
                  Label(p.name, p.idx, p.d1, p.d2).s, when);
    return true;
}

inline const char* state_name(State s) {
    switch (s) {
        case RUNNABLE: return "running";
        case AT_BARRIER: return "threadgroup_barrier";
        case AT_SIMD: return "a SIMD-group function";
        default: return "returned";
    }
}

// Returns 0, or 1 with `err` set.
inline int run_group(Group& g) {
    Thread* th = g.threads.data();
    const uint32_t n = g.n;
    const uint32_t nsg = (n + SIMD_WIDTH - 1) / SIMD_WIDTH;
    const StackPool& stacks = stack_pool();
    for (uint32_t i = 0; i < n; ++i) {
        Thread& t = th[i];
        t.tid = i;
        t.pos[0] = i % g.tpt[0];
        t.pos[1] = (i / g.tpt[0]) % g.tpt[1];
        t.pos[2] = i / (g.tpt[0] * g.tpt[1]);
        t.st = RUNNABLE;
        init_ctx(&t.ctx, stacks.stack(i), STACK_BYTES, fiber_main);
        t.spins = 0;
        t.spin_at = nullptr;
    }
    g.epoch = 1;
    g.sepoch.assign(nsg, 1);
    Thread* lanes[SIMD_WIDTH];
    for (;;) {
        bool progressed = false;
        // highest index first: a write another thread reads without a barrier is seen as a race
        for (uint32_t k = n; k-- > 0;) {
            if (th[k].st != RUNNABLE) continue;
            g.cur = &th[k];
            switch_ctx(&g.sched, &th[k].ctx);
            g.cur = nullptr;
            progressed = true;
            if (g.failed) return 1;
        }
        uint32_t live = 0, at_barrier = 0, done = 0;
        for (uint32_t sg = 0; sg < nsg; ++sg) {
            int active = 0, waiting = 0;
            for (int l = 0; l < SIMD_WIDTH; ++l) {
                uint32_t i = sg * SIMD_WIDTH + l;
                lanes[l] = nullptr;
                if (i >= n || th[i].st == DONE) continue;
                ++active;
                if (th[i].st == AT_SIMD) { ++waiting; lanes[l] = &th[i]; }
            }
            if (active == 0 || waiting != active) continue;
            int op = -1;
            for (int l = 0; l < SIMD_WIDTH; ++l) {
                if (!lanes[l]) continue;
                bool vote_mix = (lanes[l]->op == OP_ALL || lanes[l]->op == OP_ANY ||
                                 lanes[l]->op == OP_IS_FIRST);
                if (op < 0) op = lanes[l]->op;
                else if (lanes[l]->op != op && !vote_mix) {
                    std::snprintf(g.err, sizeof g.err,
                                  "threadgroup (%u,%u,%u) SIMD-group %u: divergent SIMD-group "
                                  "functions: lane %d called %s while another lane called %s",
                                  g.tg_pos[0], g.tg_pos[1], g.tg_pos[2], sg, l,
                                  OP_NAMES[lanes[l]->op], OP_NAMES[op]);
                    return 1;
                }
            }
            for (int l = 0; l < SIMD_WIDTH; ++l) if (lanes[l]) { g.cur = lanes[l]; break; }
            if (op == OP_SIMD_BARRIER) ++g.sepoch[sg];
            else {
                Thread* first = g.cur;
                first->combine(lanes, waiting);
                if (g.failed) return 1;
            }
            g.cur = nullptr;
            for (int l = 0; l < SIMD_WIDTH; ++l) if (lanes[l]) lanes[l]->st = RUNNABLE;
            progressed = true;
        }
        for (uint32_t i = 0; i < n; ++i) {
            if (th[i].st == DONE) { ++done; continue; }
            ++live;
            if (th[i].st == AT_BARRIER) ++at_barrier;
        }
        if (live == 0) return judge_pending(g, "the threadgroup finished") ? 1 : 0;
        if (at_barrier == live) {
            if (done > 0) {
                std::snprintf(g.err, sizeof g.err,
                              "threadgroup (%u,%u,%u): threadgroup_barrier reached by %u of %u "
                              "threads; the other %u returned before it (a barrier every thread "
                              "must reach is in divergent control flow)",
                              g.tg_pos[0], g.tg_pos[1], g.tg_pos[2], at_barrier, n, done);
                return 1;
            }
            if (judge_pending(g, "the next threadgroup_barrier")) return 1;
            ++g.epoch;
            for (uint32_t i = 0; i < n; ++i) th[i].st = RUNNABLE;
            continue;
        }
        if (!progressed) {
            uint32_t counts[4] = {0, 0, 0, 0};
            for (uint32_t i = 0; i < n; ++i) ++counts[th[i].st];
            std::snprintf(g.err, sizeof g.err,
                          "threadgroup (%u,%u,%u): deadlock: %u thread(s) wait at "
                          "threadgroup_barrier, %u at a SIMD-group function whose other lanes "
                          "never arrive, %u returned (threads diverged at a barrier or a "
                          "SIMD-group function)",
                          g.tg_pos[0], g.tg_pos[1], g.tg_pos[2], counts[AT_BARRIER],
                          counts[AT_SIMD], counts[DONE]);
            return 1;
        }
    }
}

struct Launch {
    uint32_t ngroups[3];
    uint32_t tpt[3];
    size_t tg_limit;
};

template <class F>
int launch(const uint32_t* ngroups, const uint32_t* tpt, long long tg_limit, char* err, int errlen, F&& f) {
    Group g;
    g.n = tpt[0] * tpt[1] * tpt[2];
    for (int d = 0; d < 3; ++d) { g.tpt[d] = tpt[d]; g.ngroups[d] = ngroups[d]; }
    if (g.n == 0 || g.n > 1024) {
        std::snprintf(err, errlen, "threads per threadgroup %u x %u x %u = %u: must be 1..1024",
                      tpt[0], tpt[1], tpt[2], g.n);
        return 1;
    }
    guard_stack_faults();
    if (!stack_pool().reserve(g.n)) {
        std::snprintf(err, errlen, "could not map stacks for %u threads", g.n);
        return 1;
    }
    g.threads.resize(g.n);
    g.tg_limit = tg_limit > 0 ? size_t(tg_limit) : 0;
    g.fn = (void*)&f;
    g.thunk = [](void* fn, Thread* t) { (*(typename std::remove_reference<F>::type*)fn)(t); };
    Group* saved = current();
    current() = &g;
    int rc = 0;
    for (uint32_t z = 0; z < ngroups[2] && rc == 0; ++z)
        for (uint32_t y = 0; y < ngroups[1] && rc == 0; ++y)
            for (uint32_t x = 0; x < ngroups[0] && rc == 0; ++x) {
                g.tg_pos[0] = x; g.tg_pos[1] = y; g.tg_pos[2] = z;
                g.failed = false;
                g.err[0] = 0;
                g.cur = nullptr;
                g.tg_bytes = 0;
                g.pending.clear();
                rc = run_group(g);
                for (auto& a : g.allocs) { std::free(a.data); std::free(a.shadow); }
                g.allocs.clear();
            }
    for (auto& d : g.dev_shadows) std::free(d.s);
    g.dev_shadows.clear();
    current() = saved;
    if (rc) std::snprintf(err, errlen, "%s", g.err);
    return rc;
}

// Attribute values for the current thread.
enum Attr {
    A_THREAD_POSITION_IN_GRID, A_THREADGROUP_POSITION_IN_GRID, A_THREAD_POSITION_IN_THREADGROUP,
    A_THREADS_PER_THREADGROUP, A_THREADGROUPS_PER_GRID, A_THREADS_PER_GRID,
    A_THREAD_INDEX_IN_THREADGROUP, A_THREAD_INDEX_IN_SIMDGROUP, A_SIMDGROUP_INDEX_IN_THREADGROUP,
    A_THREADS_PER_SIMDGROUP, A_SIMDGROUPS_PER_THREADGROUP
};

inline void attr3(Attr a, Thread* t, uint32_t out[3]) {
    Group* g = current();
    for (int d = 0; d < 3; ++d) {
        switch (a) {
            case A_THREAD_POSITION_IN_GRID: out[d] = g->tg_pos[d] * g->tpt[d] + t->pos[d]; break;
            case A_THREADGROUP_POSITION_IN_GRID: out[d] = g->tg_pos[d]; break;
            case A_THREAD_POSITION_IN_THREADGROUP: out[d] = t->pos[d]; break;
            case A_THREADS_PER_THREADGROUP: out[d] = g->tpt[d]; break;
            case A_THREADGROUPS_PER_GRID: out[d] = g->ngroups[d]; break;
            case A_THREADS_PER_GRID: out[d] = g->ngroups[d] * g->tpt[d]; break;
            case A_THREAD_INDEX_IN_THREADGROUP: out[d] = d == 0 ? t->tid : 0; break;
            case A_THREAD_INDEX_IN_SIMDGROUP: out[d] = d == 0 ? t->tid % SIMD_WIDTH : 0; break;
            case A_SIMDGROUP_INDEX_IN_THREADGROUP: out[d] = d == 0 ? t->tid / SIMD_WIDTH : 0; break;
            case A_THREADS_PER_SIMDGROUP: out[d] = d == 0 ? SIMD_WIDTH : 0; break;
            case A_SIMDGROUPS_PER_THREADGROUP: out[d] = d == 0 ? (g->n + SIMD_WIDTH - 1) / SIMD_WIDTH : 0; break;
        }
    }
}

template <class T> struct attr_as {
    static T get(Attr a, Thread* t) { uint32_t v[3]; attr3(a, t, v); return T(v[0]); }
};
template <class U> struct attr_as<metal::vec<U, 2>> {
    static metal::vec<U, 2> get(Attr a, Thread* t) { uint32_t v[3]; attr3(a, t, v); return metal::vec<U, 2>(U(v[0]), U(v[1])); }
};
template <class U> struct attr_as<metal::vec<U, 3>> {
    static metal::vec<U, 3> get(Attr a, Thread* t) { uint32_t v[3]; attr3(a, t, v); return metal::vec<U, 3>(U(v[0]), U(v[1]), U(v[2])); }
};

}  // namespace porter_rt

// Address spaces: `device`/`threadgroup` pointers are rewritten to checked types by the
// translator (targets/metal_exec/translate.py); what is left of the keywords means nothing here.
#define device
#define thread
#define constant const
#define kernel
#define PORTER_TG(T, NAME, SITE, ...) \
    auto NAME = porter_rt::tg_decl<T, __VA_ARGS__>(SITE, #NAME)
