/*
 * PML Sandbox guest: the C glue between the wazero host and QuickJS.
 *
 * Built as a wasm32-wasi *reactor*. The host calls pml_init() once, snapshots
 * linear memory, and restores that snapshot into a fresh instance for every
 * execution, which then calls pml_run() exactly once and is discarded. An
 * execution of a session instead starts from the memory the session's
 * previous execution left (the host saves and restores it), and calls
 * pml_run() once more in that realm.
 *
 * quickjs.c is compiled as part of this translation unit (a unity build) so
 * the glue can reseed the context's Math.random state after a snapshot
 * restore; QuickJS has no public API for that, and without it every restored
 * instance would produce the same "random" sequence.
 *
 * Host-driven stepping: the guest never blocks inside an import. pml_run
 * starts the script and returns as soon as it cannot progress (no job to
 * run, its promise pending); the host waits for a call to finish and hands
 * the answer in with pml_resume, which settles that call, runs what it
 * unblocked and returns the same way. Between steps the wasm stack is
 * empty: the whole state of the run is linear memory plus the host's
 * bookkeeping.
 *
 * Exports: pml_init, pml_run, pml_resume, pml_inbox (where the host writes
 * an answer), pml_alloc, pml_free, and pml_parse (compile without running;
 * at the end of this file).
 *
 * Host imports (module "pml"):
 *   start_call(tool_index, args, line, col) -> id
 *                                           starts a tool call; never blocks.
 *                                           line and col are where the script
 *                                           made it (call_site), 0 when unknown
 *   log(level, msg) -> keep                console output; 0 = stop sending
 *   fault(doc) -> id                       keeps an error the prelude raises
 *                                           for the host, so the host can
 *                                           tell later whether it was edited
 *   poll() -> budget                       check-in: traps when the run must
 *                                           stop, else the loop budget
 *   resolve(server, tool) -> index         a name the run's tool list lacks
 *                                           (dynamic access, mcp[name]): its
 *                                           new index, or -1; with an empty
 *                                           tool, 1 when the server has tools
 *                                           to resolve, else -1
 *   out_of_memory(size)                    the JS heap cannot grow by size
 *                                           bytes: traps, ending the run as
 *                                           LIMIT_EXCEEDED (memory)
 *
 * The run ends by a trap, never by a JS exception: once the deadline has
 * passed, the host traps at the guest's next contact (any import). The
 * guest contacts it often enough: QuickJS's interrupt handler calls poll,
 * and the build (loopcheck.awk) makes every loop's back edges count down a budget
 * and call poll when it runs out, so C code looping over a huge array-like
 * is stopped too, and the host's garbage collector is never kept waiting.
 */
struct JSRuntime;
static void pml_after_gc(struct JSRuntime *r);

#include "quickjs.c"

/* quickjs.c forbids plain malloc for its own code; the glue needs it. */
#undef malloc
#undef free
#undef realloc

#define IMPORT(name) __attribute__((import_module("pml"), import_name(name)))

IMPORT("start_call")
int32_t host_start_call(int32_t tool_index, const char *args, int32_t args_len, int32_t line, int32_t col);
IMPORT("log")
int32_t host_log(int32_t level, const char *msg, int32_t msg_len);
IMPORT("fault")
int32_t host_fault(const char *doc, int32_t doc_len);
IMPORT("poll")
int32_t host_poll(void);
IMPORT("resolve")
int32_t host_resolve(const char *server, int32_t server_len, const char *tool, int32_t tool_len);
IMPORT("out_of_memory")
void host_out_of_memory(int32_t size);

/* A profiling build (build.sh with PML_GUEST_PROFILE=1) marks where each
 * phase of a run begins, for the host to count them apart
 * (internal/guest/profile.go numbers them); the shipped guest has no such
 * import and no marks. */
#ifdef PML_PROFILE
IMPORT("mark")
void host_mark(int32_t phase);
#define PML_MARK(phase) host_mark(phase)
#else
#define PML_MARK(phase) ((void)0)
#endif
enum { PHASE_GUEST_SETUP = 3, PHASE_COMPILE, PHASE_RUN, PHASE_GUEST_RESULT };

extern const char pml_prelude[];
extern const unsigned int pml_prelude_len;

/* Bytes of free heap the snapshot keeps ready (see pml_init). */
#define PML_HEAP_HEADROOM (8 << 20)

static JSRuntime *rt;
static JSContext *ctx;
/* Functions returned by the prelude, kept across the snapshot. */
static JSValue fn_setup, fn_finish, fn_fail;
/* The running script's promise, between steps. */
static JSValue script_promise;
static int32_t script_mem_limit;
/* pml_run's flags for the run under way. */
static int32_t run_flags;
/* flags bit 2: the run is an execution of a session, whose realm the host
 * saves once it has returned (see step). */
#define PML_SESSION 4
/* Where the host writes an answer for pml_resume: most fit the static
 * buffer; a longer one gets a buffer of its own from pml_inbox. */
static char inbox_small[4096];
static char *inbox = inbox_small;

/* The handler never asks QuickJS to raise "interrupted": that exception
 * needs memory (a script at its heap limit would get a catchable
 * out-of-memory error instead) and scripts could observe it. The host traps
 * instead. */
static int interrupt_handler(JSRuntime *r, void *opaque) {
    (void)r;
    (void)opaque;
    host_poll();
    return 0;
}

/* Every allocation of the JS runtime goes through these: QuickJS's own,
 * except that a failure (past the run's memory limit, or linear memory
 * exhausted) never returns. QuickJS does not survive its allocation
 * failures well: a failing built-in can leave an array's length past its
 * storage (later reads go out of bounds), throw null when even the error
 * object cannot be made, or (reported) hand the script a value whose typeof
 * is "unknown". So the run ends at the first one, by
 * a trap, like a run past its deadline; the host reports LIMIT_EXCEEDED
 * (memory). */
static void pml_out_of_memory(size_t size) {
    host_out_of_memory(size > INT32_MAX ? INT32_MAX : (int32_t)size);
    abort(); /* not reached: the host traps */
}

/* The usable size of an allocation, which QuickJS's accounting adds up
 * for every malloc, free and realloc: malloc_usable_size, a call into the
 * libc, was ~30 calls per awaited tool call. wasi-libc's malloc is
 * dlmalloc (32-bit, no footers, no mmap), whose in-use chunk has its size
 * in the word before the memory, with flags in the low 3 bits, and 4
 * bytes of it overhead. pml_init checks this against malloc_usable_size
 * over a range of sizes before the runtime allocates anything, and keeps
 * to the libc's function if any differs. */
static int usable_inline;

/* The chunk's head word, read through volatile: it lies outside the
 * allocation, and the compiler may assume a read of memory before what
 * malloc returned yields nothing defined. */
static inline size_t dl_usable(const void *p) {
    const volatile uint32_t *head = (const volatile uint32_t *)((uintptr_t)p - 4);
    return (*head & ~(uint32_t)7) - 4;
}

static inline size_t pml_usable_size(const void *p) {
    if (likely(usable_inline))
        return dl_usable(p);
    return malloc_usable_size((void *)p);
}

static void usable_check(void) {
    static const size_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64, 65, 100,
                                   127, 128, 129, 255, 256, 257, 500, 1000, 1024, 4095, 4096, 4097, 10000, 65536,
                                   100000, 262144, 1 << 20};
    void *ps[sizeof(sizes) / sizeof(sizes[0])];
    int ok = 1;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        ps[i] = malloc(sizes[i]);
        if (!ps[i]) {
            ok = 0;
            continue;
        }
        size_t u = dl_usable(ps[i]);
        if (u != malloc_usable_size(ps[i]) || u < sizes[i])
            ok = 0;
        /* and after a realloc, which may grow in place */
        void *q = realloc(ps[i], sizes[i] + 3);
        if (!q) {
            ok = 0;
            continue;
        }
        ps[i] = q;
        u = dl_usable(q);
        if (u != malloc_usable_size(q))
            ok = 0;
    }
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        free(ps[i]);
    usable_inline = ok;
}

/* QuickJS's js_def_malloc, js_def_free and js_def_realloc (same
 * accounting, same limit), with pml_usable_size, and a failure that
 * never returns. */
static void *pml_js_malloc(JSMallocState *s, size_t size) {
    void *p = NULL;
    if (likely(s->malloc_size + size <= s->malloc_limit))
        p = malloc(size);
    if (unlikely(!p))
        pml_out_of_memory(size);
    s->malloc_count++;
    s->malloc_size += pml_usable_size(p) + MALLOC_OVERHEAD;
    return p;
}

static void pml_js_free(JSMallocState *s, void *ptr) {
    if (!ptr)
        return;
    s->malloc_count--;
    s->malloc_size -= pml_usable_size(ptr) + MALLOC_OVERHEAD;
    free(ptr);
}

static void *pml_js_realloc(JSMallocState *s, void *ptr, size_t size) {
    if (!ptr)
        return size == 0 ? NULL : pml_js_malloc(s, size);
    size_t old_size = pml_usable_size(ptr);
    if (size == 0) {
        s->malloc_count--;
        s->malloc_size -= old_size + MALLOC_OVERHEAD;
        free(ptr);
        return NULL;
    }
    void *p = NULL;
    if (likely(s->malloc_size + size - old_size <= s->malloc_limit))
        p = realloc(ptr, size);
    if (unlikely(!p))
        pml_out_of_memory(size);
    s->malloc_size += pml_usable_size(p) - old_size;
    return p;
}

/* Called by QuickJS's js_trigger_gc (patched in by build.sh) after each
 * automatic collection, which has set the next at 1.5x the live heap. Past
 * the run's memory limit that next collection would never come, and cyclic
 * garbage would fill the heap while the live data fits: the run would end
 * out of memory it has. So the next collection comes once half the room
 * left under the limit is used. */
static void pml_after_gc(JSRuntime *r) {
    size_t size = r->malloc_state.malloc_size, limit = r->malloc_state.malloc_limit;
    if (limit > size && r->malloc_gc_threshold > size + (limit - size) / 2)
        r->malloc_gc_threshold = size + (limit - size) / 2;
}

static const JSMallocFunctions pml_malloc_funcs = {
    pml_js_malloc,
    pml_js_free,
    pml_js_realloc,
    js_def_malloc_usable_size,
};

/* ---- Calls in flight ---------------------------------------------------
 *
 * A tool call is made here, not in the prelude: the script calls a native
 * function per tool (magic = the tool's index), which serialises the
 * arguments, makes a bare promise (no executor, no resolving functions: the
 * glue settles it itself) and starts the call with the host. What each
 * call's answer settles is kept in a table by call id (the host's), out of
 * reach of every script: the promise the script awaits, or a timer's
 * callbacks. Calls past the in-flight cap wait in a queue, started as
 * earlier ones finish, so Promise.all over many calls just works. All of it
 * lives in linear memory, so a suspension or a session's saved state keeps
 * it, and in JS memory (js_malloc), so it counts against the run's limit. */
enum { SLOT_EMPTY = 0, SLOT_CALL, SLOT_BUILTIN, SLOT_TIMER };
#define SLOT_DELETED (-1)
typedef struct {
    int32_t id;  /* 0: empty, SLOT_DELETED: a tombstone */
    int32_t kind;
    JSValue a;   /* the promise; a timer's fire callback */
    JSValue b;   /* a timer's drop callback */
} pml_slot;
/* Open addressing by id (ids are consecutive per run but can lie far
 * apart: a timer started first may outlive thousands of calls). */
static pml_slot *slots;
static uint32_t slots_mask; /* capacity - 1; 0 before the first call */
static uint32_t slots_used; /* live entries and tombstones */
static uint32_t slots_live;

typedef struct {
    int32_t index;
    JSValue args;    /* a string */
    JSValue promise;
    int32_t line, col; /* where the script made the call (call_site) */
} pml_queued;
static pml_queued *queue;
static uint32_t queue_head, queue_tail, queue_cap;

static int32_t inflight;      /* capped calls started and not settled */
static int32_t inflight_cap = 16;
/* The prelude's helpers for the rare paths: the Error a host failure
 * becomes, and the rejection for arguments that are not JSON. */
static JSValue fn_host_error, fn_bad_args;
/* "{}", the arguments of a call made without any. */
static JSValue empty_args;
/* The run's mcp object, read by the global `mcp` getter. */
static JSValue mcp_object;
/* What mcp_object is built from when the script first reads `mcp`
 * (native_mcp): the run's tool list and whether the host resolves misses.
 * Most scripts of a fresh sandbox that never read it pay nothing for the
 * proxies and closures of its servers. */
static JSValue mcp_tools, fn_build_mcp;
static int mcp_resolving;
/* The run's tool list as the host wrote it (JSON), parsed into mcp_tools on
 * the first read of `mcp`: a script that never reads it never parses it. */
static char *mcp_tools_src;
static size_t mcp_tools_src_len;
/* A script ran in this realm (a session's next execution finds it set). */
static int realm_used;

static uint32_t slot_hash(int32_t id) { return (uint32_t)id * 2654435761u; }

static void slots_insert(pml_slot *tab, uint32_t mask, pml_slot v) {
    uint32_t i = slot_hash(v.id) & mask;
    while (tab[i].id != 0 && tab[i].id != SLOT_DELETED)
        i = (i + 1) & mask;
    tab[i] = v;
}

/* slot_put keeps what call id's answer settles. */
static void slot_put(int32_t id, int32_t kind, JSValue a, JSValue b) {
    if ((slots_used + 1) * 4 > (slots_mask + 1) * 3 || slots_mask == 0) {
        /* Rehash into a table twice the live entries (at least 16). */
        uint32_t n = 16;
        while (n < (slots_live + 1) * 2)
            n *= 2;
        pml_slot *t = js_mallocz_rt(rt, n * sizeof(pml_slot));
        if (slots) {
            for (uint32_t i = 0; i <= slots_mask; i++)
                if (slots[i].id > 0)
                    slots_insert(t, n - 1, slots[i]);
            js_free_rt(rt, slots);
        }
        slots = t;
        slots_mask = n - 1;
        slots_used = slots_live;
    }
    slots_insert(slots, slots_mask, (pml_slot){id, kind, a, b});
    slots_used++;
    slots_live++;
}

/* slot_take removes call id's entry into *out; 0 when there is none. */
static int slot_take(int32_t id, pml_slot *out) {
    if (!slots || id <= 0)
        return 0;
    for (uint32_t i = slot_hash(id) & slots_mask;; i = (i + 1) & slots_mask) {
        if (slots[i].id == id) {
            *out = slots[i];
            slots[i].id = SLOT_DELETED;
            slots[i].a = slots[i].b = JS_UNDEFINED;
            slots_live--;
            return 1;
        }
        if (slots[i].id == 0)
            return 0;
    }
}

/* ---- Where a call was made ----------------------------------------------
 *
 * Each call goes to the host with its call site: the line and column
 * QuickJS records for the call expression (its opening parenthesis) in the
 * innermost frame of the run's own script, past native frames (Array's map,
 * Function's call) and the prelude's. The host keys what a person decides
 * about "this call site" on it (internal/executor: grants), so it must name
 * one place of this run's script and nothing else: a frame of other code
 * (eval, new Function, a function an earlier execution of a session
 * defined) gives 0, 0, and so does a call with no script frame at all (a
 * promise job). It lives in the bytecode's debug table, in linear memory,
 * so a suspended run resumed elsewhere reports the same sites. A small
 * cache keeps a loop's calls from scanning the table each time. */
static JSAtom atom_main, atom_prelude;
/* The bytecode of every function the run's script defines (pml_run's
 * function and those it holds, sorted), for a session's run only. */
static JSFunctionBytecode **script_fns;
static uint32_t script_fns_len, script_fns_cap;
#define SITE_CACHE 64
typedef struct {
    JSFunctionBytecode *b;
    uint32_t pc;
    int32_t line, col;
} pml_site;
/* Allocated on a run's first call: a run that calls nothing (and a fresh
 * sandbox's snapshot) never touches it. */
static pml_site *site_cache;

/* sites_reset forgets what a session's previous execution cached: it
 * writes nothing in a fresh sandbox, whose pages stay the snapshot's. */
static void sites_reset(void) {
    if (site_cache) {
        js_free_rt(rt, site_cache);
        site_cache = NULL;
    }
    if (script_fns) {
        js_free_rt(rt, script_fns);
        script_fns = NULL;
        script_fns_len = script_fns_cap = 0;
    }
}

/* script_fns_add adds b and the functions it defines (its constants; each
 * function is the constant of one parent). The depth is the script's
 * nesting, which the host bounds before the guest sees it. */
static void script_fns_add(JSFunctionBytecode *b) {
    if (script_fns_len == script_fns_cap) {
        uint32_t cap = script_fns_cap ? script_fns_cap * 2 : 16;
        JSFunctionBytecode **n = js_realloc_rt(rt, script_fns, cap * sizeof(*n));
        if (!n)
            pml_out_of_memory(cap * sizeof(*n)); /* not reached: traps */
        script_fns = n;
        script_fns_cap = cap;
    }
    script_fns[script_fns_len++] = b;
    for (int i = 0; i < b->cpool_count; i++)
        if (JS_VALUE_GET_TAG(b->cpool[i]) == JS_TAG_FUNCTION_BYTECODE)
            script_fns_add(JS_VALUE_GET_PTR(b->cpool[i]));
}

static int ptr_cmp(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
    return x < y ? -1 : x > y;
}

/* in_script reports whether b is a function of the run's script. Only a
 * session's realm holds the functions of other scripts (its earlier
 * executions'), all named main.js too. */
static int in_script(JSFunctionBytecode *b) {
    if (!(run_flags & PML_SESSION))
        return 1;
    return bsearch(&b, script_fns, script_fns_len, sizeof(*script_fns), ptr_cmp) != NULL;
}

static void call_site(int32_t *line, int32_t *col) {
    *line = *col = 0;
    for (JSStackFrame *sf = rt->current_stack_frame; sf; sf = sf->prev_frame) {
        if (sf->js_mode & JS_MODE_BACKTRACE_BARRIER)
            return;
        if (JS_VALUE_GET_TAG(sf->cur_func) != JS_TAG_OBJECT)
            return;
        JSObject *p = JS_VALUE_GET_OBJ(sf->cur_func);
        if (!js_class_has_bytecode(p->class_id))
            continue; /* a native: the call came through it */
        JSFunctionBytecode *b = p->u.func.function_bytecode;
        if (!b->has_debug || !sf->cur_pc)
            return;
        if (b->debug.filename == atom_prelude)
            continue;
        if (b->debug.filename != atom_main || !in_script(b))
            return;
        uint32_t pc = (uint32_t)(sf->cur_pc - b->byte_code_buf - 1);
        if (!site_cache)
            site_cache = js_mallocz_rt(rt, SITE_CACHE * sizeof(pml_site));
        pml_site *c = &site_cache[((uintptr_t)b / 8 * 31 + pc) % SITE_CACHE];
        if (c->b != b || c->pc != pc) {
            int cn;
            int ln = find_line_num(ctx, b, pc, &cn);
            *c = (pml_site){b, pc, ln, cn};
        }
        *line = c->line;
        *col = c->col;
        return;
    }
}

/* start_bytes hands a call with its arguments' JSON (UTF-8) and its call
 * site to the host and keeps what its answer settles. Takes a, b. */
static void start_bytes(int32_t index, const char *s, size_t len, int32_t kind, JSValue a, JSValue b, int32_t line,
                        int32_t col) {
    if (kind == SLOT_CALL)
        inflight++;
    int32_t id = host_start_call(index, s, (int32_t)len, line, col);
    slot_put(id, kind, a, b);
}

/* start is start_bytes for arguments held as a string. Takes args. */
static void start(int32_t index, JSValue args, int32_t kind, JSValue a, JSValue b, int32_t line, int32_t col) {
    size_t al;
    const char *s = JS_ToCStringLen(ctx, &al, args);
    if (!s)
        pml_out_of_memory(al); /* not reached: converting a string only fails for memory, which traps */
    start_bytes(index, s, al, kind, a, b, line, col);
    JS_FreeCString(ctx, s);
    JS_FreeValue(ctx, args);
}

/* ---- Arguments as JSON, the short way ----------------------------------
 *
 * JSON.stringify (JS_JSONStringify) was most of a call's cost: a wrapper
 * object, a key array per object, a stack array, a toJSON lookup and a
 * string per key, and a JS string that is then copied into UTF-8. Most
 * arguments are small trees of plain objects, dense arrays, Latin-1
 * strings, numbers, booleans and null, for which json_fast writes the same
 * bytes JSON.stringify's string would encode to, straight into a buffer.
 * It only reads what no script code can observe being read (own data
 * properties, shapes, prototypes' own properties): anything else (a
 * getter, a toJSON anywhere on the way, a proxy, an exotic or wide-char
 * string, undefined, a function, a symbol value, a BigInt, an index-like key
 * on a plain object, nesting past JSON_FAST_DEPTH, which includes cycles) makes it
 * give up before any effect, and JS_JSONStringify does it all, as before. */
#define JSON_FAST_DEPTH 32
static char *jbuf;       /* js_malloc'd, so it counts against the run's memory */
static size_t jbuf_len, jbuf_cap;

static int jbuf_grow(size_t need) {
    size_t cap = jbuf_cap ? jbuf_cap + jbuf_cap / 2 : 256;
    if (cap < jbuf_len + need)
        cap = jbuf_len + need + (jbuf_len + need) / 2;
    char *n = js_realloc_rt(rt, jbuf, cap);
    if (!n)
        return -1;
    jbuf = n;
    jbuf_cap = cap;
    return 0;
}

static inline int jbuf_put(const char *s, size_t n) {
    if (jbuf_len + n > jbuf_cap && jbuf_grow(n))
        return -1;
    memcpy(jbuf + jbuf_len, s, n);
    jbuf_len += n;
    return 0;
}

/* One byte stored, not copied: memcpy is a call of pml_copy (the
 * build's checked memory.copy). */
static inline int jbuf_putc(char c) {
    if (jbuf_len + 1 > jbuf_cap && jbuf_grow(1))
        return -1;
    jbuf[jbuf_len++] = c;
    return 0;
}

/* jq_len is how many bytes json_fast_quote writes for a Latin-1
 * character: 1 for printable ASCII but '"' and '\\', 2 for those, the
 * short escapes (\b \t \n \f \r) and a character past ASCII (its UTF-8),
 * 6 for another control character (\u00XX). */
static const uint8_t jq_len[256] = {
    [0 ... 31] = 6, [32 ... 127] = 1, [128 ... 255] = 2,
    ['\b'] = 2, ['\t'] = 2, ['\n'] = 2, ['\f'] = 2, ['\r'] = 2, ['"'] = 2, ['\\'] = 2,
};

/* json_fast_quote writes a Latin-1 string quoted as JS_ToQuotedString
 * does, encoded as UTF-8 (what JS_ToCStringLen makes of it). */
static int json_fast_quote(JSString *str) {
    static const char hex[] = "0123456789abcdef";
    if (str->is_wide_char)
        return -1;
    uint32_t n = str->len;
    const uint8_t *s = str->u.str8;
    /* Room for exactly what it writes: never more memory than
     * JSON.stringify's own string would take. */
    size_t need = 2;
    for (uint32_t i = 0; i < n; i++)
        need += jq_len[s[i]];
    if (jbuf_len + need > jbuf_cap && jbuf_grow(need))
        return -1;
    char *o = jbuf + jbuf_len;
    *o++ = '"';
    if (need == (size_t)n + 2) {
        /* Nothing to escape or encode, as most strings. */
        memcpy(o, s, n);
        o += n;
        *o++ = '"';
        jbuf_len = (size_t)(o - jbuf);
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x80) {
            *o++ = (char)(0xc0 | (c >> 6));
            *o++ = (char)(0x80 | (c & 0x3f));
            continue;
        }
        switch (c) {
        case '\t': *o++ = '\\'; *o++ = 't'; continue;
        case '\r': *o++ = '\\'; *o++ = 'r'; continue;
        case '\n': *o++ = '\\'; *o++ = 'n'; continue;
        case '\b': *o++ = '\\'; *o++ = 'b'; continue;
        case '\f': *o++ = '\\'; *o++ = 'f'; continue;
        case '"': case '\\': *o++ = '\\'; *o++ = (char)c; continue;
        }
        if (c < 32) {
            *o++ = '\\'; *o++ = 'u'; *o++ = '0'; *o++ = '0';
            *o++ = hex[c >> 4]; *o++ = hex[c & 15];
            continue;
        }
        *o++ = (char)c;
    }
    *o++ = '"';
    jbuf_len = (size_t)(o - jbuf);
    return 0;
}

/* chain_plain_without reports whether q and every object on its prototype
 * chain is an ordinary object or array (no proxy, nothing exotic) without
 * an own property atom: reading atom from it then runs no code and finds
 * nothing. */
static int chain_plain_without(JSObject *q, JSAtom atom) {
    for (; q; q = q->shape->proto) {
        if (q->class_id != JS_CLASS_OBJECT && q->class_id != JS_CLASS_ARRAY)
            return 0;
        JSProperty *pr;
        if (find_own_property(&pr, q, atom))
            return 0;
    }
    return 1;
}

/* json_fast_protos_plain reports whether no object on p's prototype chain
 * could run code or supply a toJSON when JSON.stringify reads p's toJSON:
 * each is an ordinary object or array without one. */
static int json_fast_protos_plain(JSObject *p) { return chain_plain_without(p->shape->proto, JS_ATOM_toJSON); }

/* ring_keep keeps a reference to sh in the ring of n shapes, in place of
 * the oldest (whose reference goes). */
static void ring_keep(JSShape **ring, uint32_t *next, uint32_t n, JSShape *sh) {
    JSShape *old = ring[*next];
    ring[*next] = js_dup_shape(sh);
    *next = (*next + 1) % n;
    if (old)
        js_free_shape(rt, old);
}

/* The shapes of the last few argument objects json_fast wrote. A script
 * makes its arguments afresh for each call, typically with an object
 * literal ({text: t}), whose shape QuickJS finds among the live ones when
 * one object of the same keys is still alive, and otherwise copies from
 * the empty object's and grows one property at a time, to free it again
 * when the arguments die after the call. A reference kept here keeps the
 * shape alive from one call to the next, so the next call's literal finds
 * it. Kept only: a shape that QuickJS hashes (one it finds again), of
 * plain objects (Object.prototype, which is alive anyway), of at most
 * JF_KEYS string keys, none over JF_KEY_MAX bytes (a kept shape keeps its
 * keys' memory; a symbol key is never kept alive by it). A kept shape is
 * shared, so QuickJS copies it before changing any object's. */
#define JF_SHAPES 4
#define JF_KEYS 16
#define JF_KEY_MAX 64
static JSShape *jf_shapes[JF_SHAPES];
static uint32_t jf_shapes_next;
/* The shape of an empty plain object, kept from pml_init on: each call's
 * arguments literal starts from it, and JS_NewObject would otherwise
 * make it again whenever no empty plain object was alive. */
static JSShape *empty_shape;

static void jf_shape_keep(JSShape *sh) {
    for (int i = 0; i < JF_SHAPES; i++)
        if (jf_shapes[i] == sh)
            return;
    if (!sh->is_hashed || sh->prop_count > JF_KEYS || sh->proto != JS_VALUE_GET_OBJ(ctx->class_proto[JS_CLASS_OBJECT]))
        return;
    JSShapeProperty *prs = get_shape_prop(sh);
    for (int j = 0; j < sh->prop_count; j++) {
        JSAtom atom = prs[j].atom;
        if (atom == JS_ATOM_NULL || __JS_AtomIsTaggedInt(atom))
            continue;
        JSAtomStruct *as = rt->atom_array[atom];
        if (as->atom_type != JS_ATOM_TYPE_STRING || as->len > JF_KEY_MAX)
            return;
    }
    ring_keep(jf_shapes, &jf_shapes_next, JF_SHAPES, sh);
}

static int json_fast_value(JSValueConst v, int depth) {
    char num[32];
    switch (JS_VALUE_GET_TAG(v)) {
    case JS_TAG_NULL:
        return jbuf_put("null", 4);
    case JS_TAG_BOOL:
        return JS_VALUE_GET_BOOL(v) ? jbuf_put("true", 4) : jbuf_put("false", 5);
    case JS_TAG_INT: {
        /* By hand: snprintf was a fifth of a small call's arguments. */
        int32_t i = JS_VALUE_GET_INT(v);
        uint32_t u = i < 0 ? 0u - (uint32_t)i : (uint32_t)i;
        char *e = num + sizeof(num), *b = e;
        do {
            *--b = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (i < 0)
            *--b = '-';
        return jbuf_put(b, (size_t)(e - b));
    }
    case JS_TAG_FLOAT64: {
        double d = JS_VALUE_GET_FLOAT64(v);
        if (!isfinite(d))
            return jbuf_put("null", 4);
        /* ToString, as JSON.stringify writes a number (ASCII). */
        JSValue s = JS_ToString(ctx, v);
        if (JS_IsException(s))
            return -1;
        JSString *str = JS_VALUE_GET_STRING(s);
        int r = str->is_wide_char ? -1 : jbuf_put((const char *)str->u.str8, str->len);
        JS_FreeValue(ctx, s);
        return r;
    }
    case JS_TAG_STRING:
        return json_fast_quote(JS_VALUE_GET_STRING(v));
    case JS_TAG_OBJECT:
        break;
    default:
        return -1;
    }
    if (depth >= JSON_FAST_DEPTH)
        return -1;
    JSObject *p = JS_VALUE_GET_OBJ(v);
    if (!json_fast_protos_plain(p))
        return -1;
    JSShape *sh = p->shape;
    JSShapeProperty *prs = get_shape_prop(sh);
    if (p->class_id == JS_CLASS_ARRAY) {
        if (!p->fast_array || JS_VALUE_GET_TAG(p->prop[0].u.value) != JS_TAG_INT ||
            (uint32_t)JS_VALUE_GET_INT(p->prop[0].u.value) != p->u.array.count)
            return -1;
        /* An own toJSON on the array itself. */
        JSProperty *pr;
        if (find_own_property(&pr, p, JS_ATOM_toJSON))
            return -1;
        if (jbuf_putc('['))
            return -1;
        for (uint32_t i = 0; i < p->u.array.count; i++) {
            if (i > 0 && jbuf_putc(','))
                return -1;
            if (json_fast_value(p->u.array.u.values[i], depth + 1))
                return -1;
        }
        return jbuf_putc(']');
    }
    if (p->class_id != JS_CLASS_OBJECT || p->is_exotic)
        return -1;
    if (jbuf_putc('{'))
        return -1;
    int first = 1;
    for (int i = 0; i < sh->prop_count; i++, prs++) {
        JSAtom atom = prs->atom;
        if (atom == JS_ATOM_NULL)
            continue;
        if (__JS_AtomIsTaggedInt(atom) || atom == JS_ATOM_toJSON)
            return -1;
        JSAtomStruct *as = rt->atom_array[atom];
        if (as->atom_type != JS_ATOM_TYPE_STRING || !(prs->flags & JS_PROP_ENUMERABLE))
            continue; /* symbols and non-enumerable properties: not keys */
        if ((prs->flags & JS_PROP_TMASK) != JS_PROP_NORMAL)
            return -1;
        /* An index-like string key ("1") is ordered before the others. */
        if (as->len > 0 && as->len <= 10 && !as->is_wide_char && as->u.str8[0] >= '0' && as->u.str8[0] <= '9')
            return -1;
        if (!first && jbuf_putc(','))
            return -1;
        first = 0;
        if (json_fast_quote(as) || jbuf_putc(':'))
            return -1;
        if (json_fast_value(p->prop[i].u.value, depth + 1))
            return -1;
    }
    jf_shape_keep(sh);
    return jbuf_putc('}');
}

/* json_fast writes v as JSON into jbuf (jbuf_len bytes); -1 to leave it to
 * JS_JSONStringify, nothing having been observed. */
static int json_fast(JSValueConst v) {
    jbuf_len = 0;
    return json_fast_value(v, 0);
}

/* jbuf_trim lets go of a buffer a large argument grew. */
static void jbuf_trim(void) {
    if (jbuf_cap > 4096) {
        js_free_rt(rt, jbuf);
        jbuf = NULL;
        jbuf_cap = 0;
    }
    jbuf_len = 0;
}

/* ---- Answers as values, the short way ----------------------------------
 *
 * JS_ParseJSON of a tool's answer was a sixth of a small call's guest time:
 * a token per character class, a string allocated per key before it
 * becomes an atom, and every number, even `3`, through the general decimal
 * conversion (js_atof, js_atod). Most answers are small documents of plain
 * keys, short ASCII strings and small integers, which json_read builds
 * directly, with the calls json_parse_value makes (JS_NewObject and
 * JS_DefinePropertyValue(C_W_E) per key in document order, so a repeated
 * key replaces the value where the key first stood; JS_NewArray and
 * JS_DefinePropertyValueUint32(C_W_E) per element), so the value is the one
 * JSON.parse makes: keys are made atoms as JS_ValueToAtom would make them
 * (JS_NewAtomLen: "10" an integer atom, "007" a string one, an existing
 * atom found without an allocation), an integer of at most 15 digits is
 * exact as a double and goes through JS_NewFloat64 as js_atof's result
 * does (an int when it fits, -0 a double). It reads only: objects, arrays,
 * strings of printable ASCII without escapes, such integers (no fraction,
 * no exponent), true, false, null and JSON whitespace, nested at most
 * JSON_READ_DEPTH deep. Anything else anywhere in the text (an escape, a
 * byte past ASCII, a fraction, a long number, malformed JSON) drops what it
 * built, which nothing could have observed, and JS_ParseJSON reads the
 * whole text, as before (and words the SyntaxError). */
#define JSON_READ_DEPTH 32
enum { JR_OK = 0, JR_NOT_READ = 1, JR_EXCEPTION = -1 };

/* Byte classes for the scans: JSON whitespace, and the characters of a
 * plain string (printable ASCII but '"' and '\\'). A byte-at-a-time scan
 * with a compare per class was most of json_read's time. The text ends
 * in a NUL (pml_resume puts it after the answer), in neither class, so a
 * scan stops there at the latest without comparing against the end. */
enum { JR_WS = 1, JR_PLAIN = 2 };
static const uint8_t jr_class[256] = {
    [' '] = JR_WS | JR_PLAIN, ['\n'] = JR_WS, ['\r'] = JR_WS, ['\t'] = JR_WS,
    [0x21] = JR_PLAIN, [0x23 ... 0x5b] = JR_PLAIN, [0x5d ... 0x7e] = JR_PLAIN,
};

/* jr_space skips JSON whitespace; *end is NUL. */
static inline const uint8_t *jr_space(const uint8_t *p, const uint8_t *end) {
    (void)end;
    while (jr_class[*p] & JR_WS)
        p++;
    return p;
}

/* jr_plain_string returns the end of a string whose characters are
 * printable ASCII but '"' and '\\' (its closing quote), starting past the
 * opening one; NULL for any other string, or none. *end is NUL. */
static inline const uint8_t *jr_plain_string(const uint8_t *p, const uint8_t *end) {
    while (jr_class[*p] & JR_PLAIN)
        p++;
    return p < end && *p == '"' ? p : NULL;
}

/* ---- Answer objects of a known shape ------------------------------------
 *
 * An object JSON.parse makes gets its shape one property at a time: the
 * empty object's shape is copied for the first key, then grown in place,
 * its property array reallocated as it grows, and each key made an atom
 * (a string allocated for a key no live atom has). When the object dies,
 * so do the shape and those atoms, so a script calling the same tool in a
 * loop paid for all of it again on every answer. jr_shapes keeps the
 * shapes of the last few objects json_read made (a reference each: the
 * shape, its atoms and its prototype, Object.prototype, stay alive), and
 * an object whose keys are those of a kept shape, in the same order, is
 * made with that shape at once (JS_NewObjectFromShape) and its values put
 * in place. The object is the one JS_NewObject and a JS_DefinePropertyValue
 * (C_W_E) per key would make: same prototype, same properties in the same
 * order with the same flags; a shape is not observable. A key matches a
 * kept shape's atom when its bytes are the atom's string: JS_NewAtomLen
 * would have found that very atom (atoms are unique per string). Only
 * shapes of keys that JS_NewAtomLen makes string atoms of are kept: no
 * key starting with a digit (it may become an integer atom), none longer
 * than JR_KEY_MAX bytes (a kept shape keeps its keys' memory), no
 * repeated key (its object has fewer properties than members), at most
 * JR_KEYS. A kept shape is never changed in place: QuickJS copies a shape
 * shared by more than one holder before changing an object's. */
#define JR_KEYS 16
#define JR_KEY_MAX 64
#define JR_SHAPES 8
typedef struct {
    const uint8_t *k;
    uint32_t len;
    JSValue v;
} jr_member;
static JSShape *jr_shapes[JR_SHAPES];
static uint32_t jr_shapes_next;

/* jr_shape_find returns the kept shape whose keys are m's, or NULL. */
static JSShape *jr_shape_find(const jr_member *m, int n) {
    for (int i = 0; i < JR_SHAPES; i++) {
        JSShape *sh = jr_shapes[i];
        if (!sh || sh->prop_count != n)
            continue;
        JSShapeProperty *prs = get_shape_prop(sh);
        int j;
        for (j = 0; j < n; j++) {
            JSAtomStruct *as = rt->atom_array[prs[j].atom];
            if (as->len != m[j].len || memcmp(as->u.str8, m[j].k, m[j].len))
                break;
        }
        if (j == n)
            return sh;
    }
    return NULL;
}

/* jr_shape_keep keeps sh, the shape of an object jr_object made of n
 * members, when it may be found again (see above). */
static void jr_shape_keep(JSShape *sh, int n) {
    if (n == 0 || sh->prop_count != n || !sh->is_hashed ||
        sh->proto != JS_VALUE_GET_OBJ(ctx->class_proto[JS_CLASS_OBJECT]))
        return;
    JSShapeProperty *prs = get_shape_prop(sh);
    for (int j = 0; j < n; j++) {
        JSAtom atom = prs[j].atom;
        if (__JS_AtomIsTaggedInt(atom) || (prs[j].flags & (JS_PROP_TMASK | JS_PROP_C_W_E)) != JS_PROP_C_W_E)
            return;
        JSAtomStruct *as = rt->atom_array[atom];
        if (as->atom_type != JS_ATOM_TYPE_STRING || as->is_wide_char || as->len > JR_KEY_MAX ||
            (as->len > 0 && as->u.str8[0] >= '0' && as->u.str8[0] <= '9'))
            return;
    }
    ring_keep(jr_shapes, &jr_shapes_next, JR_SHAPES, sh);
}

/* jr_define defines obj's member of key k (len bytes) as v, as JSON.parse
 * does (writable, enumerable, configurable): 0, or -1 with the exception
 * pending. v is taken either way. */
static int jr_define(JSValueConst obj, const uint8_t *k, uint32_t len, JSValue v) {
    JSAtom key = JS_NewAtomLen(ctx, (const char *)k, len);
    if (key == JS_ATOM_NULL) {
        JS_FreeValue(ctx, v);
        return -1;
    }
    int r = JS_DefinePropertyValue(ctx, obj, key, v, JS_PROP_C_W_E);
    JS_FreeAtom(ctx, key);
    return r < 0 ? -1 : 0;
}

/* jr_object makes the object of n members read (their values taken),
 * or JS_EXCEPTION (the values freed). */
static JSValue jr_object(jr_member *m, int n) {
    JSShape *sh = jr_shape_find(m, n);
    if (sh) {
        JSValue obj = JS_NewObjectFromShape(ctx, js_dup_shape(sh), JS_CLASS_OBJECT);
        if (JS_IsException(obj)) {
            for (int i = 0; i < n; i++)
                JS_FreeValue(ctx, m[i].v);
            return obj;
        }
        JSProperty *pr = JS_VALUE_GET_OBJ(obj)->prop;
        for (int i = 0; i < n; i++)
            pr[i].u.value = m[i].v;
        return obj;
    }
    JSValue obj = JS_NewObject(ctx);
    int i = 0;
    if (JS_IsException(obj))
        goto fail;
    for (; i < n; i++) {
        if (jr_define(obj, m[i].k, m[i].len, m[i].v)) {
            i++;
            goto fail;
        }
    }
    jr_shape_keep(JS_VALUE_GET_OBJ(obj)->shape, n);
    return obj;
fail:
    for (; i < n; i++)
        JS_FreeValue(ctx, m[i].v);
    JS_FreeValue(ctx, obj);
    return JS_EXCEPTION;
}

/* jr_literal reads the literal word at *pp as v. */
static int jr_literal(const uint8_t **pp, const uint8_t *end, const char *word, JSValue v, JSValue *out) {
    size_t n = strlen(word);
    if ((size_t)(end - *pp) < n || memcmp(*pp, word, n))
        return JR_NOT_READ;
    *out = v;
    *pp += n;
    return JR_OK;
}

/* jr_value reads the value at *pp (not whitespace) into *out and moves *pp
 * past it: JR_OK; JR_NOT_READ when it is not one json_read takes;
 * JR_EXCEPTION when the JS API failed (the exception is pending). Nothing
 * is left allocated but *out. */
static int jr_value(const uint8_t **pp, const uint8_t *end, int depth, JSValue *out) {
    const uint8_t *p = *pp;
    if (p >= end)
        return JR_NOT_READ;
    switch (*p) {
    case '"': {
        const uint8_t *e = jr_plain_string(p + 1, end);
        if (!e)
            return JR_NOT_READ;
        JSValue s = js_new_string8_len(ctx, (const char *)p + 1, (int)(e - p - 1));
        if (JS_IsException(s))
            return JR_EXCEPTION;
        *out = s;
        *pp = e + 1;
        return JR_OK;
    }
    case '-': case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9': {
        int neg = *p == '-';
        if (neg)
            p++;
        const uint8_t *d = p;
        int64_t n = 0;
        if (p < end && *p == '0') {
            p++;
        } else {
            while (p < end && *p >= '0' && *p <= '9') {
                if (p - d >= 15)
                    return JR_NOT_READ;
                n = n * 10 + (*p++ - '0');
            }
        }
        if (p == d)
            return JR_NOT_READ;
        /* A fraction, an exponent, a digit after a leading 0: js_atof's. */
        if (p < end && (*p == '.' || *p == 'e' || *p == 'E' || (*p >= '0' && *p <= '9')))
            return JR_NOT_READ;
        *out = JS_NewFloat64(ctx, neg ? -(double)n : (double)n);
        *pp = p;
        return JR_OK;
    }
    case 't':
        return jr_literal(pp, end, "true", JS_TRUE, out);
    case 'f':
        return jr_literal(pp, end, "false", JS_FALSE, out);
    case 'n':
        return jr_literal(pp, end, "null", JS_NULL, out);
    case '[': {
        if (depth >= JSON_READ_DEPTH)
            return JR_NOT_READ;
        JSValue arr = JS_NewArray(ctx);
        if (JS_IsException(arr))
            return JR_EXCEPTION;
        p = jr_space(p + 1, end);
        if (p < end && *p == ']') {
            *out = arr;
            *pp = p + 1;
            return JR_OK;
        }
        for (uint32_t idx = 0;; idx++) {
            JSValue el;
            int r = jr_value(&p, end, depth + 1, &el);
            if (r != JR_OK) {
                JS_FreeValue(ctx, arr);
                return r;
            }
            if (JS_DefinePropertyValueUint32(ctx, arr, idx, el, JS_PROP_C_W_E) < 0) {
                JS_FreeValue(ctx, arr);
                return JR_EXCEPTION;
            }
            p = jr_space(p, end);
            if (p < end && *p == ',') {
                p = jr_space(p + 1, end);
                continue;
            }
            if (p < end && *p == ']')
                break;
            JS_FreeValue(ctx, arr);
            return JR_NOT_READ;
        }
        *out = arr;
        *pp = p + 1;
        return JR_OK;
    }
    case '{': {
        if (depth >= JSON_READ_DEPTH)
            return JR_NOT_READ;
        /* The first JR_KEYS members are kept until the object ends, so
         * that one with a known shape is made whole (jr_object); past
         * them, the object is made and each member defined as read. */
        jr_member m[JR_KEYS];
        int n = 0;
        JSValue obj = JS_UNDEFINED;
        p = jr_space(p + 1, end);
        if (p < end && *p == '}') {
            obj = JS_NewObject(ctx);
            if (JS_IsException(obj))
                return JR_EXCEPTION;
            *out = obj;
            *pp = p + 1;
            return JR_OK;
        }
        int r = JR_NOT_READ;
        for (;;) {
            if (p >= end || *p != '"')
                break;
            const uint8_t *k = p + 1, *e = jr_plain_string(k, end);
            if (!e)
                break;
            p = jr_space(e + 1, end);
            if (p >= end || *p != ':')
                break;
            p = jr_space(p + 1, end);
            JSValue v;
            r = jr_value(&p, end, depth + 1, &v);
            if (r != JR_OK)
                break;
            r = JR_NOT_READ;
            if (JS_IsUndefined(obj) && n < JR_KEYS) {
                m[n++] = (jr_member){k, (uint32_t)(e - k), v};
            } else {
                if (JS_IsUndefined(obj)) {
                    obj = jr_object(m, n);
                    n = 0;
                    if (JS_IsException(obj)) {
                        JS_FreeValue(ctx, v);
                        return JR_EXCEPTION;
                    }
                }
                if (jr_define(obj, k, (uint32_t)(e - k), v)) {
                    r = JR_EXCEPTION;
                    break;
                }
            }
            p = jr_space(p, end);
            if (p < end && *p == ',') {
                p = jr_space(p + 1, end);
                continue;
            }
            if (p < end && *p == '}') {
                if (JS_IsUndefined(obj)) {
                    obj = jr_object(m, n);
                    if (JS_IsException(obj))
                        return JR_EXCEPTION;
                }
                *out = obj;
                *pp = p + 1;
                return JR_OK;
            }
            r = JR_NOT_READ;
            break;
        }
        for (int i = 0; i < n; i++)
            JS_FreeValue(ctx, m[i].v);
        JS_FreeValue(ctx, obj);
        return r;
    }
    }
    return JR_NOT_READ;
}

/* json_read reads the len bytes at in as a whole JSON document into *out
 * (see above): JR_OK, JR_NOT_READ for JS_ParseJSON to read it, or
 * JR_EXCEPTION as JS_ParseJSON fails (the exception pending). in[len]
 * must be NUL: the scans stop there. */
static int json_read(const char *in, size_t len, JSValue *out) {
    /* JS_ParseJSON fails with "stack overflow" where the stack is short
     * (a run with a tiny stack limit); json_read reads nothing where
     * JS_ParseJSON might not have room for all its levels. */
    if (js_check_stack_overflow(rt, 64 << 10))
        return JR_NOT_READ;
    const uint8_t *end = (const uint8_t *)in + len;
    const uint8_t *p = jr_space((const uint8_t *)in, end);
    JSValue v;
    int r = jr_value(&p, end, 0, &v);
    if (r != JR_OK)
        return r;
    if (jr_space(p, end) != end) {
        JS_FreeValue(ctx, v);
        return JR_NOT_READ;
    }
    *out = v;
    return JR_OK;
}

static void queue_push(int32_t index, JSValue args, JSValue promise, int32_t line, int32_t col) {
    if (queue_tail == queue_cap) {
        if (queue_head > 0) {
            memmove(queue, queue + queue_head, (queue_tail - queue_head) * sizeof(pml_queued));
            queue_tail -= queue_head;
            queue_head = 0;
        } else {
            queue_cap = queue_cap ? queue_cap * 2 : 64;
            queue = js_realloc_rt(rt, queue, queue_cap * sizeof(pml_queued));
        }
    }
    queue[queue_tail++] = (pml_queued){index, args, promise, line, col};
}

/* pml_new_promise makes a pending promise the glue settles itself: what
 * new Promise makes, without the executor and resolving functions. */
static JSValue pml_new_promise(void) {
    JSValue obj = js_create_from_ctor(ctx, JS_UNDEFINED, JS_CLASS_PROMISE);
    if (JS_IsException(obj))
        return obj;
    JSPromiseData *s = js_mallocz(ctx, sizeof(*s));
    if (!s) {
        JS_FreeValue(ctx, obj);
        return JS_EXCEPTION;
    }
    s->promise_state = JS_PROMISE_PENDING;
    s->is_handled = FALSE;
    init_list_head(&s->promise_reactions[0]);
    init_list_head(&s->promise_reactions[1]);
    s->promise_result = JS_UNDEFINED;
    JS_SetOpaque(obj, s);
    return obj;
}

/* then_absent reports whether reading v's then would give undefined
 * without running any code: v and every object on its prototype chain is
 * an ordinary object or array (no proxy, no getter called on the way)
 * without an own then, as most answers are (plain objects and arrays,
 * Object.prototype and Array.prototype). Anything else is left to
 * JS_GetProperty, a then a script defined on a prototype included. */
static int then_absent(JSValueConst v) { return chain_plain_without(JS_VALUE_GET_OBJ(v), JS_ATOM_then); }

/* pml_settle resolves or rejects promise with v, as its resolving
 * functions would: a thenable is followed (a script may have put a then on
 * Object.prototype). */
static void pml_settle(JSValueConst promise, JSValueConst v, int is_reject) {
    if (!is_reject && JS_IsObject(v) && !then_absent(v)) {
        JSValue then = JS_GetProperty(ctx, v, JS_ATOM_then);
        if (JS_IsException(then)) {
            JSValue e = JS_GetException(ctx);
            reject_promise(ctx, promise, e);
            JS_FreeValue(ctx, e);
            return;
        }
        if (JS_IsFunction(ctx, then)) {
            JSValueConst args[3] = {promise, v, then};
            JS_EnqueueJob(ctx, js_promise_resolve_thenable_job, 3, args);
            JS_FreeValue(ctx, then);
            return;
        }
        JS_FreeValue(ctx, then);
    }
    fulfill_or_reject_promise(ctx, promise, v, is_reject);
}

/* A tool of the run (magic: its index): mcp.server.tool(args) -> promise. */
static JSValue native_tool_call(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv, int magic,
                                JSValue *data) {
    JSValueConst a = argc > 0 ? argv[0] : JS_UNDEFINED;
    JSValue args;
    int32_t line, col;
    call_site(&line, &col);
    if (inflight < inflight_cap && !JS_IsUndefined(a) && json_fast(a) == 0) {
        JSValue p = pml_new_promise();
        if (JS_IsException(p)) {
            jbuf_trim();
            return p;
        }
        start_bytes(magic, jbuf, jbuf_len, SLOT_CALL, JS_DupValue(c, p), JS_UNDEFINED, line, col);
        jbuf_trim();
        return p;
    }
    jbuf_trim();
    if (JS_IsUndefined(a)) {
        args = JS_DupValue(c, empty_args);
    } else {
        args = JS_JSONStringify(c, a, JS_UNDEFINED, JS_UNDEFINED);
        if (JS_IsException(args) || JS_IsUndefined(args)) {
            /* Not JSON: the prelude words the rejection. */
            JSValueConst bad[3] = {JS_NewInt32(c, magic), a, JS_UNDEFINED};
            JSValue exc = JS_UNDEFINED;
            if (JS_IsException(args)) {
                exc = JS_GetException(c);
                bad[2] = exc;
            }
            JSValue r = JS_Call(c, fn_bad_args, JS_UNDEFINED, 3, bad);
            JS_FreeValue(c, exc);
            return r;
        }
    }
    JSValue p = pml_new_promise();
    if (JS_IsException(p)) {
        JS_FreeValue(c, args);
        return p;
    }
    if (inflight < inflight_cap)
        start(magic, args, SLOT_CALL, JS_DupValue(c, p), JS_UNDEFINED, line, col);
    else
        queue_push(magic, args, JS_DupValue(c, p), line, col);
    return p;
}

/* native.tool(index, name) -> the function that calls tool index, named
 * name. */
static JSValue native_tool(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    int32_t index;
    if (JS_ToInt32(c, &index, argv[0]))
        return JS_EXCEPTION;
    JSValue f = JS_NewCFunctionData(c, native_tool_call, 1, index, 0, NULL);
    if (JS_IsException(f))
        return f;
    if (JS_DefinePropertyValue(c, f, JS_ATOM_name, JS_DupValue(c, argv[1]), JS_PROP_CONFIGURABLE) < 0) {
        JS_FreeValue(c, f);
        return JS_EXCEPTION;
    }
    return f;
}

/* native.builtin(index, argsJSON) -> promise: a tools.* built-in, not
 * counted against the in-flight cap. */
static JSValue native_builtin(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    int32_t index;
    if (JS_ToInt32(c, &index, argv[0]))
        return JS_EXCEPTION;
    JSValue args = JS_ToString(c, argv[1]);
    if (JS_IsException(args))
        return args;
    JSValue p = pml_new_promise();
    if (JS_IsException(p)) {
        JS_FreeValue(c, args);
        return p;
    }
    start(index, args, SLOT_BUILTIN, JS_DupValue(c, p), JS_UNDEFINED, 0, 0);
    return p;
}

/* native.timer(argsJSON, fire, drop): a host-side sleep (the built-in of
 * index -1) that calls fire when it ends, drop when it fails. */
static JSValue native_timer(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    JSValue args = JS_ToString(c, argv[0]);
    if (JS_IsException(args))
        return args;
    start(-1, args, SLOT_TIMER, JS_DupValue(c, argv[1]), JS_DupValue(c, argv[2]), 0, 0);
    return JS_UNDEFINED;
}

/* The global `mcp`'s getter: the run's tools, built on the first read. */
static JSValue native_mcp(JSContext *c, JSValueConst this_val) {
    if (JS_IsUndefined(mcp_object)) {
        if (mcp_tools_src) {
            JSValue t = JS_ParseJSON(c, mcp_tools_src, mcp_tools_src_len, "tools.json");
            if (JS_IsException(t))
                return t;
            js_free(c, mcp_tools_src);
            mcp_tools_src = NULL;
            set_value(c, &mcp_tools, t);
        }
        JSValue a[2] = {mcp_tools, JS_NewBool(c, mcp_resolving)};
        JSValue o = JS_Call(c, fn_build_mcp, JS_UNDEFINED, 2, (JSValueConst *)a);
        if (JS_IsException(o))
            return o;
        mcp_object = o;
        JS_FreeValue(c, mcp_tools);
        mcp_tools = JS_UNDEFINED;
    }
    return JS_DupValue(c, mcp_object);
}

/* native.setup(tools, resolving, cap): what this run's calls need; the mcp
 * object itself waits for its first read. */
static JSValue native_setup(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    int32_t cap;
    if (JS_ToInt32(c, &cap, argv[2]))
        return JS_EXCEPTION;
    set_value(c, &mcp_object, JS_UNDEFINED);
    set_value(c, &mcp_tools, JS_DupValue(c, argv[0]));
    mcp_resolving = JS_ToBool(c, argv[1]);
    if (cap > 0)
        inflight_cap = cap;
    return JS_UNDEFINED;
}

/* calls_reset forgets the calls a previous execution of a session left in
 * flight in this realm: their promises never settle (the host reported
 * them). */
static void calls_reset(void) {
    if (slots) {
        for (uint32_t i = 0; i <= slots_mask; i++) {
            if (slots[i].id > 0) {
                JS_FreeValue(ctx, slots[i].a);
                JS_FreeValue(ctx, slots[i].b);
            }
        }
        js_free_rt(rt, slots);
    }
    slots = NULL;
    slots_mask = slots_used = slots_live = 0;
    for (uint32_t i = queue_head; i < queue_tail; i++) {
        JS_FreeValue(ctx, queue[i].args);
        JS_FreeValue(ctx, queue[i].promise);
    }
    queue_head = queue_tail = 0;
    inflight = 0;
}

/* native.log(level, message) -> keep sending (bool) */
static JSValue native_log(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    int32_t level;
    size_t ml;
    if (JS_ToInt32(c, &level, argv[0]))
        return JS_EXCEPTION;
    const char *m = JS_ToCStringLen(c, &ml, argv[1]);
    if (!m)
        return JS_EXCEPTION;
    int32_t keep = host_log(level, m, (int32_t)ml);
    JS_FreeCString(c, m);
    return JS_NewBool(c, keep);
}

/* native.fault(errorJSON) -> id */
static JSValue native_fault(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    size_t dl;
    const char *d = JS_ToCStringLen(c, &dl, argv[0]);
    if (!d)
        return JS_EXCEPTION;
    JSValue ret = JS_NewInt32(c, host_fault(d, (int32_t)dl));
    JS_FreeCString(c, d);
    return ret;
}

/* native.resolve(server, tool) -> index, or -1 */
static JSValue native_resolve(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    size_t sl, tl;
    const char *s = JS_ToCStringLen(c, &sl, argv[0]);
    if (!s)
        return JS_EXCEPTION;
    const char *t = JS_ToCStringLen(c, &tl, argv[1]);
    if (!t) {
        JS_FreeCString(c, s);
        return JS_EXCEPTION;
    }
    JSValue ret = JS_NewInt32(c, host_resolve(s, (int32_t)sl, t, (int32_t)tl));
    JS_FreeCString(c, s);
    JS_FreeCString(c, t);
    return ret;
}

__attribute__((export_name("pml_alloc"))) void *pml_alloc(int32_t n) { return malloc(n > 0 ? n : 1); }

__attribute__((export_name("pml_free"))) void pml_free(void *p) { free(p); }

/* pml_init builds the runtime, the context and the prelude. Returns 0 on
 * success. Everything it creates lives in linear memory and is captured by the
 * host's snapshot. */
__attribute__((export_name("pml_init"))) int32_t pml_init(void) {
    usable_check();
    rt = JS_NewRuntime2(&pml_malloc_funcs, NULL);
    if (!rt)
        return 1;
    /* QuickJS's default (1 MiB) equals the linked stack, which would put the
     * limit below address 0 and make every call "overflow". pml_run sets
     * the per-execution value. */
    JS_SetMaxStackSize(rt, 512 * 1024);
    ctx = JS_NewContext(rt);
    if (!ctx)
        return 2;
    atom_main = JS_NewAtom(ctx, "main.js");
    atom_prelude = JS_NewAtom(ctx, "prelude.js");
    JSValue prelude = JS_Eval(ctx, pml_prelude, pml_prelude_len, "prelude.js", JS_EVAL_TYPE_GLOBAL);
    if (JS_IsException(prelude))
        return 3;
    JSValue native = JS_NewObject(ctx);
    JS_SetPropertyStr(ctx, native, "tool", JS_NewCFunction(ctx, native_tool, "tool", 2));
    JS_SetPropertyStr(ctx, native, "builtin", JS_NewCFunction(ctx, native_builtin, "builtin", 2));
    JS_SetPropertyStr(ctx, native, "timer", JS_NewCFunction(ctx, native_timer, "timer", 3));
    JS_SetPropertyStr(ctx, native, "setup", JS_NewCFunction(ctx, native_setup, "setup", 3));
    JS_SetPropertyStr(ctx, native, "mcp", JS_NewCFunction2(ctx, (JSCFunction *)native_mcp, "get mcp", 0, JS_CFUNC_getter, 0));
    JS_SetPropertyStr(ctx, native, "log", JS_NewCFunction(ctx, native_log, "log", 2));
    JS_SetPropertyStr(ctx, native, "fault", JS_NewCFunction(ctx, native_fault, "fault", 1));
    JS_SetPropertyStr(ctx, native, "resolve", JS_NewCFunction(ctx, native_resolve, "resolve", 2));
    JSValue api = JS_Call(ctx, prelude, JS_UNDEFINED, 1, (JSValueConst *)&native);
    JS_FreeValue(ctx, prelude);
    JS_FreeValue(ctx, native);
    if (JS_IsException(api))
        return 4;
    fn_setup = JS_GetPropertyStr(ctx, api, "setup");
    fn_finish = JS_GetPropertyStr(ctx, api, "finish");
    fn_fail = JS_GetPropertyStr(ctx, api, "fail");
    fn_host_error = JS_GetPropertyStr(ctx, api, "hostError");
    fn_bad_args = JS_GetPropertyStr(ctx, api, "badArgs");
    fn_build_mcp = JS_GetPropertyStr(ctx, api, "buildMCP");
    mcp_tools = JS_UNDEFINED;
    empty_args = JS_NewString(ctx, "{}");
    mcp_object = JS_UNDEFINED;
    JSValue empty = JS_NewObject(ctx);
    if (JS_IsException(empty))
        return 5;
    empty_shape = js_dup_shape(JS_VALUE_GET_OBJ(empty)->shape);
    JS_FreeValue(ctx, empty);
    JS_FreeValue(ctx, api);
    JS_RunGC(rt);
    /* Heap headroom in the snapshot: malloc's free top chunk. A run that
     * stays within it never grows linear memory, so the host can reset its
     * instance for the next run in place (a grown one is discarded). The
     * pages cost nothing until written: instances map the snapshot
     * copy-on-write. */
    void *volatile headroom = malloc(PML_HEAP_HEADROOM); /* volatile: the compiler may not drop the pair */
    free(headroom);
    /* A collection walks every object of the runtime, prelude and
     * intrinsics included (~100 us). Most scripts finish long before they
     * allocate a few megabytes, so the first collection waits until then;
     * the instance is discarded afterwards anyway. */
    JS_SetGCThreshold(rt, rt->malloc_state.malloc_size + (4 << 20));
    return 0;
}

/* Output of pml_run: a malloc'd JSON document, returned as (ptr << 32 | len). */
static int64_t pack(const char *p, size_t len) { return ((int64_t)(uintptr_t)p << 32) | (int64_t)(uint32_t)len; }

static int64_t emit_string(JSValue s) {
    size_t len;
    const char *str = JS_ToCStringLen(ctx, &len, s);
    if (!str)
        return 0;
    char *out = malloc(len);
    if (out)
        memcpy(out, str, len);
    JS_FreeCString(ctx, str);
    return out ? pack(out, len) : 0;
}

static int64_t emit_static(const char *s) {
    size_t len = strlen(s);
    char *out = malloc(len);
    if (!out)
        return 0;
    memcpy(out, s, len);
    return pack(out, len);
}

/* emit_value writes {"ok":true,"value":v} when json_fast can write v:
 * the packed document, 0 when out of memory, PML_NOT_FAST when v needs
 * finish() (undefined, functions, getters, toJSON...). */
#define PML_NOT_FAST (-2)
static int64_t emit_value(JSValueConst v) {
    static const char head[] = "{\"ok\":true,\"value\":";
    int r = json_fast(v);
    if (r || jbuf_putc('}')) {
        jbuf_trim();
        return PML_NOT_FAST;
    }
    size_t n = sizeof(head) - 1 + jbuf_len;
    char *out = malloc(n);
    if (out) {
        memcpy(out, head, sizeof(head) - 1);
        memcpy(out + sizeof(head) - 1, jbuf, jbuf_len);
    }
    jbuf_trim();
    return out ? pack(out, n) : 0;
}

/* Turn the pending exception into the output document via the prelude. */
static int64_t emit_exception(void) {
    JSValue exc = JS_GetException(ctx);
    JSValue doc = JS_Call(ctx, fn_fail, JS_UNDEFINED, 1, (JSValueConst *)&exc);
    JS_FreeValue(ctx, exc);
    if (JS_IsException(doc)) {
        JS_FreeValue(ctx, JS_GetException(ctx));
        return emit_static("{\"ok\":false,\"error\":{\"code\":\"SANDBOX_ERROR\",\"message\":\"could not report the script's error\"}}");
    }
    int64_t r = emit_string(doc);
    JS_FreeValue(ctx, doc);
    return r;
}

/* What a step returns when the script is waiting for the host: never a
 * packed document (linear memory stays below 2 GiB, so those are
 * non-negative) nor 0 (out of memory producing the document). */
#define PML_WAITING (-1)

/* step runs every pending job, then reports: the output document once the
 * script's promise has settled, PML_WAITING while it waits for a call. */
static int64_t step(void) {
    JSContext *c;
    int r;
    while ((r = JS_ExecutePendingJob(rt, &c)) > 0) {
    }
    if (r < 0)
        return emit_exception();
    JSPromiseStateEnum st = JS_PromiseState(ctx, script_promise);
    if (st == JS_PROMISE_PENDING)
        return PML_WAITING;
    PML_MARK(PHASE_GUEST_RESULT);
    JSValue v = JS_PromiseResult(ctx, script_promise);
    /* Give the reporting code room even if the script exhausted its heap. */
    if (script_mem_limit > 0)
        JS_SetMemoryLimit(rt, (size_t)script_mem_limit + (1 << 20));
    /* A value json_fast writes (plain data, nothing a script could
     * observe, and so nothing finish() would refuse) needs no JavaScript:
     * the document is written here, as finish() would write it. A
     * session's run goes through finish(), which keeps its bindings. */
    if (st == JS_PROMISE_FULFILLED && !(run_flags & PML_SESSION)) {
        int64_t out = emit_value(v);
        if (out != PML_NOT_FAST) {
            JS_FreeValue(ctx, v);
            return out;
        }
    }
    JSValue doc = JS_Call(ctx, st == JS_PROMISE_FULFILLED ? fn_finish : fn_fail, JS_UNDEFINED, 1, (JSValueConst *)&v);
    JS_FreeValue(ctx, v);
    if (JS_IsException(doc))
        return emit_exception();
    int64_t out = emit_string(doc);
    JS_FreeValue(ctx, doc);
    if (run_flags & PML_SESSION) {
        /* The host saves this realm for the session's next execution:
         * cyclic garbage collected now is memory the next one reuses
         * instead of growing past, so the saved state grows with the data
         * kept, not with the executions run. */
        JS_FreeValue(ctx, script_promise);
        script_promise = JS_UNDEFINED;
        JS_RunGC(rt);
    }
    return out;
}

/* pml_run starts one script. cfg is a JSON document prepared by the host
 * (tools, args, limits, globals); code is the body of an async function. It
 * returns the output document, or PML_WAITING (see step). */
__attribute__((export_name("pml_run"))) int64_t pml_run(const char *cfg, int32_t cfg_len, const char *code,
                                                         int32_t code_len, int64_t seed, int32_t mem_limit,
                                                         int32_t stack_size, int32_t flags) {
    PML_MARK(PHASE_GUEST_SETUP);
    /* A session's next execution runs in the realm the previous one left
     * (restored by the host): its promise goes. */
    JS_FreeValue(ctx, script_promise);
    script_promise = JS_UNDEFINED;
    calls_reset();
    run_flags = flags;
    sites_reset();
    ctx->random_state = seed ? (uint64_t)seed : 1;
    JS_UpdateStackTop(rt);
    JS_SetMaxStackSize(rt, (size_t)stack_size);
    /* flags bit 0 turns deadline polling off; only benchmarks use it, to
     * measure what the polling costs. */
    if (!(flags & 1))
        JS_SetInterruptHandler(rt, interrupt_handler, NULL);

    /* No configuration: the request asks for nothing but the snapshot's
     * defaults (internal/guest's encodeConfig), which is what setup() would
     * leave in a realm that never ran a script: no tools, args null, the
     * default caps. A realm that ran one (a session's) goes through
     * setup() as ever. */
    /* After the document, a NUL and the tool list (JSON holds no raw NUL). */
    const char *tools = cfg_len > 0 ? memchr(cfg, 0, (size_t)cfg_len) : NULL;
    int32_t tools_len = 0;
    if (tools) {
        tools_len = cfg_len - (int32_t)(tools - cfg) - 1;
        cfg_len = (int32_t)(tools - cfg);
        tools++;
    }
    int defaults = cfg_len == 0 && !realm_used;
    realm_used = 1;
    JSValue conf = JS_UNDEFINED;
    if (defaults) {
        set_value(ctx, &mcp_tools, JS_NewArray(ctx));
        mcp_resolving = 0;
    } else {
        conf = cfg_len == 0 ? JS_NewObject(ctx) : JS_ParseJSON(ctx, cfg, cfg_len, "config.json");
        if (JS_IsException(conf))
            return emit_exception();
    }
    if (mcp_tools_src) {
        js_free(ctx, mcp_tools_src);
        mcp_tools_src = NULL;
    }
    if (tools_len > 0) {
        mcp_tools_src = js_malloc(ctx, (size_t)tools_len + 1);
        if (!mcp_tools_src) {
            JS_FreeValue(ctx, conf);
            return emit_exception();
        }
        memcpy(mcp_tools_src, tools, (size_t)tools_len);
        mcp_tools_src[tools_len] = 0;
        mcp_tools_src_len = (size_t)tools_len;
    }
    /* Memory limit after the config is in, so a tool list never counts
     * against the script; it is set before any user code is parsed. */
    script_mem_limit = mem_limit;
    if (mem_limit > 0)
        JS_SetMemoryLimit(rt, (size_t)mem_limit);

    /* The wrapper keeps user line numbers: line 1 of the script is line 1.
     * flags bit 1: the script declares its own `args` at top level, which
     * the parameter would make a SyntaxError; it runs without (the input is
     * also globalThis.args). Both heads are as long, so columns agree. */
    static const char head_args[] = "(async function (args) {";
    static const char head_none[] = "(async function ()     {";
    static const char tail[] = "\n})";
    const char *head = (flags & 2) ? head_none : head_args;
    _Static_assert(sizeof(head_args) == sizeof(head_none), "the wrapper heads must be as long");
    size_t head_len = sizeof(head_args) - 1;
    size_t src_len = head_len + (size_t)code_len + sizeof(tail) - 1;
    char *src = malloc(src_len + 1);
    if (!src)
        return emit_static("{\"ok\":false,\"error\":{\"code\":\"LIMIT_EXCEEDED\",\"limit\":\"memory\",\"message\":\"out of memory loading the script\"}}");
    memcpy(src, head, head_len);
    memcpy(src + head_len, code, code_len);
    memcpy(src + head_len + code_len, tail, sizeof(tail));

    /* Every value is freed once used: a fresh sandbox is thrown away
     * whole, but a session's realm lives on, and what one execution leaks
     * the next would carry. */
    JSValue args = defaults ? JS_NULL : JS_Call(ctx, fn_setup, JS_UNDEFINED, 1, (JSValueConst *)&conf);
    JS_FreeValue(ctx, conf);
    if (JS_IsException(args)) {
        free(src);
        return emit_exception();
    }
    PML_MARK(PHASE_COMPILE);
    JSValue fn = JS_Eval(ctx, src, src_len, "main.js", JS_EVAL_TYPE_GLOBAL);
    free(src);
    PML_MARK(PHASE_RUN);
    if (JS_IsException(fn)) {
        JS_FreeValue(ctx, args);
        return emit_exception();
    }
    if ((flags & PML_SESSION) && JS_VALUE_GET_TAG(fn) == JS_TAG_OBJECT && js_class_has_bytecode(JS_VALUE_GET_OBJ(fn)->class_id)) {
        script_fns_add(JS_VALUE_GET_OBJ(fn)->u.func.function_bytecode);
        qsort(script_fns, script_fns_len, sizeof(*script_fns), ptr_cmp);
    }
    script_promise = JS_Call(ctx, fn, JS_UNDEFINED, 1, (JSValueConst *)&args);
    JS_FreeValue(ctx, fn);
    JS_FreeValue(ctx, args);
    if (JS_IsException(script_promise))
        return emit_exception();
    return step();
}

/* pml_inbox returns where the host writes an answer of len bytes (plus
 * the NUL pml_resume puts after it): the static buffer for most answers,
 * whose address the host learns once (pml_inbox(0)) and writes to
 * directly; a buffer of its own, freed once read, for a longer one (0 when
 * out of memory). */
__attribute__((export_name("pml_inbox"))) char *pml_inbox(int32_t len) {
    if (inbox != inbox_small)
        free(inbox);
    inbox = inbox_small;
    if (len >= (int32_t)sizeof(inbox_small))
        inbox = malloc((size_t)len + 1);
    return inbox;
}

/* pml_resume delivers the answer to call id (ok or not; len bytes of JSON
 * in the inbox: the static one when shorter than it), runs what it
 * unblocked and returns like pml_run. */
__attribute__((export_name("pml_resume"))) int64_t pml_resume(int32_t id, int32_t ok, int32_t len) {
    PML_MARK(PHASE_RUN);
    char *in = len < (int32_t)sizeof(inbox_small) ? inbox_small : inbox;
    if (!in)
        return emit_static("{\"ok\":false,\"error\":{\"code\":\"LIMIT_EXCEEDED\",\"limit\":\"memory\",\"message\":\"out of memory receiving a tool result\"}}");
    in[len] = 0;
    int raw = 0;
    JSValue v = JS_UNDEFINED;
    /* The static inbox's answer, most often read by json_read. */
    int got = in == inbox_small ? json_read(in, (size_t)len, &v) : JR_NOT_READ;
    if (got == JR_NOT_READ)
        v = JS_ParseJSON(ctx, in, len, "tool-result.json");
    else if (got == JR_EXCEPTION)
        v = JS_EXCEPTION;
    if (in != inbox_small) {
        free(inbox);
        inbox = inbox_small;
    }
    if (JS_IsException(v)) {
        /* Malformed host JSON, or a result nested past the stack limit:
         * reject the call with the exception instead of aborting the whole
         * script. (Running out of memory while parsing ends the run.) */
        ok = 0;
        raw = 1;
        v = JS_GetException(ctx);
    }
    pml_slot sl;
    if (!slot_take(id, &sl)) {
        JS_FreeValue(ctx, v);
        return step();
    }
    if (sl.kind == SLOT_CALL) {
        inflight--;
        while (queue_head < queue_tail && inflight < inflight_cap) {
            pml_queued q = queue[queue_head++];
            start(q.index, q.args, SLOT_CALL, q.promise, JS_UNDEFINED, q.line, q.col);
        }
        if (queue_head == queue_tail)
            queue_head = queue_tail = 0;
    }
    int failed = 0;
    if (sl.kind == SLOT_TIMER) {
        JSValue r = JS_Call(ctx, ok ? sl.a : sl.b, JS_UNDEFINED, 0, NULL);
        failed = JS_IsException(r);
        JS_FreeValue(ctx, r);
    } else if (ok || raw) {
        pml_settle(sl.a, v, !ok);
    } else {
        /* The host's error document becomes the Error the script sees,
         * kept under id so the host can tell it later unchanged. */
        JSValueConst hv[2] = {v, JS_NewInt32(ctx, id)};
        JSValue err = JS_Call(ctx, fn_host_error, JS_UNDEFINED, 2, hv);
        if (JS_IsException(err))
            failed = 1;
        else
            pml_settle(sl.a, err, 1);
        JS_FreeValue(ctx, err);
    }
    JS_FreeValue(ctx, sl.a);
    JS_FreeValue(ctx, sl.b);
    JS_FreeValue(ctx, v);
    if (failed)
        return emit_exception();
    return step();
}

/* ---- Parsing without running: pml_parse -------------------------------
 *
 * The host reads every script before the guest does (internal/prescan
 * bounds its cost, internal/analysis lists its tools) and must never refuse
 * one QuickJS reads. pml_parse gives the host's tests QuickJS's own verdict
 * to hold those checks to: it compiles the script exactly as pml_run wraps
 * it and runs none of it, not even the wrapper. It returns an output
 * document like pml_run's: {"ok":true,"value":null} when the code is one
 * function body; the engine's SyntaxError otherwise, or a ScriptError when
 * the code closes the wrapper's body and goes on at top level (which
 * pml_run would run, and the host refuses). Limits as for pml_run; the
 * host traps past the deadline or the memory limit as in a run. */
__attribute__((export_name("pml_parse"))) int64_t pml_parse(const char *code, int32_t code_len, int32_t mem_limit,
                                                           int32_t stack_size) {
    JS_UpdateStackTop(rt);
    JS_SetMaxStackSize(rt, (size_t)stack_size);
    JS_SetInterruptHandler(rt, interrupt_handler, NULL);
    script_mem_limit = mem_limit;
    if (mem_limit > 0)
        JS_SetMemoryLimit(rt, (size_t)mem_limit);

    /* pml_run's wrapper, byte for byte. */
    static const char head[] = "(async function (args) {";
    static const char tail[] = "\n})";
    size_t src_len = sizeof(head) - 1 + (size_t)code_len + sizeof(tail) - 1;
    char *src = malloc(src_len + 1);
    if (!src)
        return emit_static("{\"ok\":false,\"error\":{\"code\":\"LIMIT_EXCEEDED\",\"limit\":\"memory\",\"message\":\"out of memory loading the script\"}}");
    memcpy(src, head, sizeof(head) - 1);
    memcpy(src + sizeof(head) - 1, code, code_len);
    memcpy(src + sizeof(head) - 1 + code_len, tail, sizeof(tail));

    JSValue obj = JS_Eval(ctx, src, src_len, "main.js", JS_EVAL_TYPE_GLOBAL | JS_EVAL_FLAG_COMPILE_ONLY);
    free(src);
    if (JS_IsException(obj))
        return emit_exception();
    /* The program compiled; it is the wrapper alone when its first function
     * (the wrapper: functions the program defines after it come later in
     * its constant pool) ends at the wrapper's last brace. Its source is
     * kept from `async` to that brace: all but the outer parentheses. */
    int whole = 0;
    if (JS_VALUE_GET_TAG(obj) == JS_TAG_FUNCTION_BYTECODE) {
        JSFunctionBytecode *b = JS_VALUE_GET_PTR(obj);
        if (b->cpool_count > 0 && JS_VALUE_GET_TAG(b->cpool[0]) == JS_TAG_FUNCTION_BYTECODE) {
            JSFunctionBytecode *fn = JS_VALUE_GET_PTR(b->cpool[0]);
            whole = fn->has_debug && fn->debug.source_len == (int)src_len - 2;
        }
    }
    JS_FreeValue(ctx, obj);
    if (!whole)
        return emit_static("{\"ok\":false,\"error\":{\"code\":\"SCRIPT_ERROR\",\"message\":\"SyntaxError: the code closes the function body it is wrapped in\"}}");
    return emit_static("{\"ok\":true,\"value\":null}");
}
