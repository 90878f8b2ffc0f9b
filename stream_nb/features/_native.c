/*
 * stream_nb.features._native: TextFeaturizer's feature lists for a batch of texts, in C.
 *
 * The Python code in text.py is the definition; this module computes exactly the same list of
 * feature names for the configurations `TextFeaturizer._native_plan` accepts (token pattern
 * `(?u)\b\w+\b|[£$€]`, lowercase, word unigrams or unigrams and bigrams, optional OSB word pairs
 * and character n-grams, optional subject features, URL/e-mail placeholders, max_tokens, binary or
 * not), for texts stored one byte per
 * character (Latin-1, ASCII included), where lowercasing and `\w` are table look-ups. Every
 * other exact str (and one with a character the tables mark foreign) takes the wide path: the
 * same list over code points, lowered by str.lower, its names made as strs (see below), or,
 * looked up in a NameIndex, those of code points below 256 by their bytes, without a str. A str
 * subclass goes to the Python feature list (`fallback`). URL and e-mail spans are looked for
 * only in a segment that holds an anchor ('@', '://', 'www.'), as the Python path does: in a
 * one-byte segment by `scan_specials` (special_spans, held to specials.py) with each URL's
 * domain feature made here (text.py's `_url_domain`), in a wide one by the Python code (`spans`).
 *
 * With a vocabulary dict (name -> column), each name's column is looked up as the name is
 * made (-1 for a name not in it), saving the model a second pass over the names; the names not
 * in it come back as NewNames, whose strs are made only for the names somebody reads. Given also a
 * NameIndex and the vocabulary's names in column order, the names this module makes are looked
 * up in the index instead: a C hash table that mirrors that list, so a look-up costs one cache
 * line and no Python object, and the look-ups of a text overlap (prefetched together).
 *
 * Each text may bring extra names (a mail's '#...' evidence) that go after its own, looked up
 * the same way, so that a mail batch reaches the model by columns as a text batch does.
 *
 * Several feature views of one batch (`featurize_views`) read each text once: its segments are
 * lowered and tokenised (`text_tokens`), then each view's features are made of those tokens
 * (`text_grams`) and looked up in the view's own vocabulary, as `featurize` does for one view.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX >= 0x030C0000
#define READY(text) 0 /* every str is ready since 3.12 (PyUnicode_READY is deprecated) */
#else
#define READY(text) PyUnicode_READY(text)
#endif

/* Character classes, one byte per Latin-1 code; WORD and SIGN describe a lowercased byte,
 * FOREIGN an original one (its lowercase is not one Latin-1 character of the same range). */
enum { CH_WORD = 1, CH_SIGN = 2, CH_FOREIGN = 4 };

/* The outcome of featurising one text natively. */
enum { DONE = 0, FAILED = -1, FALL_BACK = 1 };

static const char SUBJECT_PREFIX[] = "#s:";
static const char CHAR_NGRAM_PREFIX[] = "#c:"; /* text.py's CHAR_NGRAM_PREFIX */
static const char TOO_MANY_NAMES[] = "featurize: too many new names in one batch";

/* A growable byte buffer. */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buffer;

/* A growable array of code points (the wide path's arena). */
typedef struct {
    Py_UCS4 *data;
    Py_ssize_t len, cap;
} WideBuffer;

/* A feature or token: bytes [start, start + len) of the arena (code points of the wide arena
 * on the wide path). */
typedef struct {
    Py_ssize_t start, len;
} Span;

typedef struct {
    Span *items;
    Py_ssize_t len, cap;
} SpanList;

/* A URL or e-mail address found in a segment: characters [start, end). */
typedef struct {
    Py_ssize_t start, end;
    int is_url; /* else an e-mail address */
} Special;

typedef struct {
    Special *items;
    Py_ssize_t len, cap;
} SpecialList;

/* A growable array of int64 (lengths, columns). */
typedef struct {
    int64_t *items;
    Py_ssize_t len, cap;
} IntList;

/* A plan's settings of what is made from a segment's tokens: each view's own (see `featurize_views`). */
typedef struct {
    int bigrams, binary;
    Py_ssize_t osb_window; /* OSB pairs at distances 2 .. osb_window - 1; < 3: none */
    Py_ssize_t char_min, char_max; /* character n-grams of min..max characters; char_min 0: none */
} Grams;

/* A wide text's feature as `view_wide` looks it up: its bytes at `narrowed` + at (-1: a name of
 * a code point beyond 255, looked up by its str) and their name_hash. */
typedef struct {
    Py_ssize_t at;
    uint64_t hash;
} Narrowed;

/* One call's configuration and scratch space (reused from text to text). */
typedef struct {
    const unsigned char *lower;   /* 256: the lowercase of each Latin-1 code */
    const unsigned char *classes; /* 256: CH_* flags */
    int subject, emails, urls, url_domains;
    Py_ssize_t max_tokens; /* -1: no limit */
    Grams g;               /* the view being made */
    PyObject *spans;       /* lowered segment -> [(start, end, placeholder, domain | None)] */
    Buffer arena;          /* every byte of the current text's lowered segments and features */
    Buffer padded;         /* scratch: one token padded with a space on each side (char n-grams) */
    WideBuffer wide;       /* the wide path's arena: code points (see `wide_text_tokens`) */
    WideBuffer wide_padded; /* the wide path's scratch for one padded token */
    SpanList tokens, domains, subject_features, features;
    /* the text's tokens, read once for every view: the subject line's (head_*) and the rest's
     * (tokens, domains); its lowered segments end at arena_mark (wide_mark on the wide path) */
    SpanList head_tokens, head_domains;
    int has_subject;
    Py_ssize_t arena_mark, wide_mark;
    SpecialList specials; /* a one-byte segment's URLs and e-mail addresses */
    Py_ssize_t *slots; /* dedupe table: index + 1 of a feature, 0 for an empty slot */
    Py_ssize_t n_slots; /* allocated */
    Py_ssize_t slots_used; /* the current text's table: slots[0 .. slots_used) */
    uint64_t *hashes; /* name_hash of each feature, once `hash_features` ran */
    Py_ssize_t hashes_cap;
    Buffer narrowed; /* `view_wide`: the bytes of each name of code points below 256 */
    Narrowed *narrowed_names; /* `view_wide`: feature i's place in `narrowed` and hash */
    Py_ssize_t narrowed_names_cap;
    Py_ssize_t *token_slots; /* `char_ngrams`' table of the tokens met: index + 1, 0 for an empty slot */
    Py_ssize_t token_slots_cap, token_slots_size; /* allocated; the current table's (a power of two) */
} Work;

/* Set while featurize_texts runs a stretch of plain texts without the GIL (`plain_run`): an
 * error there is noted in `detached_error` and raised once the GIL is held again. The buffers are
 * PyMem_Raw*'s, which need no GIL. */
static _Thread_local int detached;
enum { DETACHED_NO_MEMORY = 1, DETACHED_TOO_MANY_NAMES = 2 };
static _Thread_local int detached_error;

static void
no_memory(void)
{
    if (detached)
        detached_error = DETACHED_NO_MEMORY;
    else
        PyErr_NoMemory();
}

static int
grow(void **items, Py_ssize_t *cap, Py_ssize_t needed, size_t item_size)
{
    if (needed <= *cap)
        return 0;
    Py_ssize_t new_cap = *cap ? *cap : 64;
    while (new_cap < needed) {
        if (new_cap > PY_SSIZE_T_MAX / 2 / (Py_ssize_t)item_size) {
            no_memory();
            return -1;
        }
        new_cap *= 2;
    }
    void *grown = PyMem_RawRealloc(*items, (size_t)new_cap * item_size);
    if (grown == NULL) {
        no_memory();
        return -1;
    }
    *items = grown;
    *cap = new_cap;
    return 0;
}

/* Appends n bytes to the arena; their offset in *start. */
static int
arena_append(Work *w, const char *bytes, Py_ssize_t n, Py_ssize_t *start)
{
    if (grow((void **)&w->arena.data, &w->arena.cap, w->arena.len + n, 1) < 0)
        return -1;
    *start = w->arena.len;
    memcpy(w->arena.data + w->arena.len, bytes, (size_t)n);
    w->arena.len += n;
    return 0;
}

static int
span_push(SpanList *list, Py_ssize_t start, Py_ssize_t len)
{
    if (grow((void **)&list->items, &list->cap, list->len + 1, sizeof(Span)) < 0)
        return -1;
    list->items[list->len].start = start;
    list->items[list->len].len = len;
    list->len++;
    return 0;
}

static int
special_push(SpecialList *list, Py_ssize_t start, Py_ssize_t end, int is_url)
{
    if (grow((void **)&list->items, &list->cap, list->len + 1, sizeof(Special)) < 0)
        return -1;
    list->items[list->len].start = start;
    list->items[list->len].end = end;
    list->items[list->len].is_url = is_url;
    list->len++;
    return 0;
}

static int scan_specials(const unsigned char *t, Py_ssize_t n, int urls, int emails, SpecialList *out);

static int
int_push(IntList *list, int64_t value)
{
    if (grow((void **)&list->items, &list->cap, list->len + 1, sizeof(int64_t)) < 0)
        return -1;
    list->items[list->len++] = value;
    return 0;
}

/* The tokens of arena bytes [lo, hi) (a lowered segment), at most `remaining` of them (-1: all),
 * appended to w->tokens: runs of word characters, and each currency sign on its own. */
static int
tokenize(Work *w, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t remaining)
{
    const unsigned char *classes = w->classes;
    Py_ssize_t i = lo;
    const unsigned char *text = (const unsigned char *)w->arena.data; /* not grown in here */
    while (i < hi && remaining != 0) {
        unsigned char kind = classes[text[i]];
        if (kind & CH_WORD) {
            Py_ssize_t start = i;
            while (i < hi && (classes[text[i]] & CH_WORD))
                i++;
            if (span_push(&w->tokens, start, i - start) < 0)
                return -1;
        }
        else if (kind & CH_SIGN) {
            if (span_push(&w->tokens, i, 1) < 0)
                return -1;
            i++;
        }
        else {
            i++;
            continue;
        }
        if (remaining > 0)
            remaining--;
    }
    return 0;
}

static Py_ssize_t
remaining_tokens(Work *w)
{
    return w->max_tokens < 0 ? -1 : w->max_tokens - w->tokens.len;
}

static const char *
find_bytes(const char *haystack, Py_ssize_t n, const char *needle, Py_ssize_t m)
{
    for (const char *at = haystack; n >= m; ) {
        const char *first = memchr(at, needle[0], (size_t)(n - m + 1));
        if (first == NULL)
            return NULL;
        if (memcmp(first, needle, (size_t)m) == 0)
            return first;
        n -= (first - at) + 1;
        at = first + 1;
    }
    return NULL;
}

/* Room for `more` bytes past the arena's end and SLACK after them (the 16-byte copies below may
 * write, and read, up to that far), with the sum checked: NoMemory rather than an overflow. */
enum { SLACK = 32 };

static int
arena_reserve(Work *w, Py_ssize_t more)
{
    if (more < 0 || more > PY_SSIZE_T_MAX - SLACK - w->arena.len) {
        no_memory();
        return -1;
    }
    return grow((void **)&w->arena.data, &w->arena.cap, w->arena.len + more + SLACK, 1);
}

/* text.py's `_url_domain` of the URL at arena [start, end) (a lowered one-byte segment's), as
 * the feature "#url:<host>" appended to w->domains; nothing for an empty host:
 *
 *     rest = the URL after its first "://" (all of it without one)
 *     host = rest up to its first '/', '?', '#' or '\', after its last '@', before its first ':',
 *            without trailing '.', lowercased, without a leading "www." */
static int
push_url_domain(Work *w, Py_ssize_t start, Py_ssize_t end)
{
    static const char PREFIX[] = "#url:";
    const Py_ssize_t prefix = (Py_ssize_t)sizeof(PREFIX) - 1;
    const char *url = w->arena.data + start;
    Py_ssize_t n = end - start, lo = 0;
    const char *scheme = find_bytes(url, n, "://", 3);
    if (scheme != NULL)
        lo = scheme - url + 3;
    Py_ssize_t hi = lo;
    while (hi < n && url[hi] != '/' && url[hi] != '?' && url[hi] != '#' && url[hi] != '\\')
        hi++;
    for (Py_ssize_t k = hi; k > lo; k--)
        if (url[k - 1] == '@') {
            lo = k;
            break;
        }
    const char *colon = memchr(url + lo, ':', (size_t)(hi - lo));
    if (colon != NULL)
        hi = colon - url;
    while (hi > lo && url[hi - 1] == '.')
        hi--;
    /* the host is read from the arena: room first, then offsets (the arena may move) */
    if (arena_reserve(w, prefix + (hi - lo)) < 0)
        return -1;
    char *at = w->arena.data + w->arena.len;
    const unsigned char *host = (const unsigned char *)w->arena.data + start + lo;
    memcpy(at, PREFIX, (size_t)prefix);
    for (Py_ssize_t k = 0; k < hi - lo; k++)
        at[prefix + k] = (char)w->lower[host[k]];
    Py_ssize_t length = prefix + (hi - lo);
    if (hi - lo >= 4 && memcmp(at + prefix, "www.", 4) == 0) {
        memmove(at + prefix, at + prefix + 4, (size_t)(hi - lo - 4));
        length -= 4;
    }
    if (length == prefix) /* `host or None` */
        return 0;
    if (span_push(&w->domains, w->arena.len, length) < 0)
        return -1;
    w->arena.len += length;
    return 0;
}

/* `_tokens_with_placeholders` over the lowered segment at arena [base, base + n): the text
 * between its special spans (`scan_specials`, held to specials.py by the tests, as the Python
 * path's `_native_spans` finds them) is tokenised on its own, each span becomes its placeholder,
 * and a URL's domain feature goes to w->domains (url_domains). */
static int
tokens_with_placeholders(Work *w, Py_ssize_t base, Py_ssize_t n)
{
    if (scan_specials((const unsigned char *)w->arena.data + base, n, w->urls, w->emails, &w->specials) < 0)
        return FAILED;
    Py_ssize_t position = 0;
    for (Py_ssize_t k = 0; k < w->specials.len; k++) {
        Special special = w->specials.items[k];
        if (special.start > position && tokenize(w, base + position, base + special.start, remaining_tokens(w)) < 0)
            return FAILED;
        if (w->max_tokens >= 0 && w->tokens.len >= w->max_tokens)
            return DONE; /* the rest of the segment is beyond the token cap */
        const char *placeholder = special.is_url ? "#url" : "#email";
        Py_ssize_t start, length = (Py_ssize_t)strlen(placeholder);
        if (arena_append(w, placeholder, length, &start) < 0 || span_push(&w->tokens, start, length) < 0)
            return FAILED;
        if (special.is_url && w->url_domains && push_url_domain(w, base + special.start, base + special.end) < 0)
            return FAILED;
        position = special.end;
    }
    if (remaining_tokens(w) != 0 && tokenize(w, base + position, base + n, remaining_tokens(w)) < 0)
        return FAILED;
    return DONE;
}

/* `osb_window`'s word pairs of a segment's `tokens`, appended to `out`: for each distance
 * d = 2 .. osb_window - 1 in turn, every pair tokens[i], tokens[i + d] in order, as
 * "a <k> b" with k = d - 1 (text.py: f" <{distance - 1}> "). A distance the segment's tokens
 * do not span has no pairs. */
static int
osb_pairs(Work *w, const SpanList *tokens, SpanList *out)
{
    Py_ssize_t count = tokens->len;
    for (Py_ssize_t d = 2; d < w->g.osb_window && d < count; d++) {
        char skip[32]; /* " <k> ": at most 19 digits; read 16 bytes at a time below */
        memset(skip, 0, sizeof(skip));
        Py_ssize_t skip_len = (Py_ssize_t)snprintf(skip, sizeof(skip), " <%zd> ", d - 1);
        if (grow((void **)&out->items, &out->cap, out->len + (count - d), sizeof(Span)) < 0)
            return -1;
        for (Py_ssize_t i = 0; i + d < count; i++) {
            Span a = tokens->items[i], b = tokens->items[i + d];
            Py_ssize_t length = a.len + skip_len + b.len; /* both in one segment: no overflow */
            /* as for bigrams: room for 16-byte copies past the end, reads past a token inside the arena */
            if (arena_reserve(w, length) < 0)
                return -1;
            char *at = w->arena.data + w->arena.len;
            if (a.len <= 16 && b.len <= 16 && skip_len <= 16) { /* fixed-size copies; a read may overlap the write */
                memmove(at, w->arena.data + a.start, 16);
                memcpy(at + a.len, skip, 16);
                memmove(at + a.len + skip_len, w->arena.data + b.start, 16);
            }
            else {
                memcpy(at, w->arena.data + a.start, (size_t)a.len);
                memcpy(at + a.len, skip, (size_t)skip_len);
                memcpy(at + a.len + skip_len, w->arena.data + b.start, (size_t)b.len);
            }
            out->items[out->len].start = w->arena.len;
            out->items[out->len].len = length;
            out->len++;
            w->arena.len += length;
        }
    }
    return 0;
}

/* Whether a token is one of text.py's _PLACEHOLDERS ("#url", "#email", "#num"). */
static int
is_placeholder(const char *bytes, Py_ssize_t len)
{
    if (len < 4 || bytes[0] != '#')
        return 0;
    if (len == 4)
        return memcmp(bytes, "#url", 4) == 0 || memcmp(bytes, "#num", 4) == 0;
    return len == 6 && memcmp(bytes, "#email", 6) == 0;
}

/* `_char_ngrams` of a segment's `tokens`, appended to `out`: for each token that is not a
 * placeholder, in turn, the token padded with a space on each side, and its n-grams for
 * n = char_min .. min(char_max, padded length), by n and then by position, each prefixed
 * CHAR_NGRAM_PREFIX; a padded token shorter than char_min is one feature as it is. Lengths are
 * in characters, bytes here (one byte a character). */
static int first_tokens_begin(Work *w, const SpanList *tokens);
static int token_met_before(Work *w, const SpanList *tokens, Py_ssize_t t);

static int
char_ngrams(Work *w, const SpanList *tokens, SpanList *out)
{
    const Py_ssize_t prefix = (Py_ssize_t)sizeof(CHAR_NGRAM_PREFIX) - 1;
    /* a binary view keeps each name's first appearance only: a token met before made every
     * n-gram it would make, so its n-grams are not made again (the list deduplicated is the same) */
    int first_only = w->g.binary && tokens->len > 1;
    if (first_only && first_tokens_begin(w, tokens) < 0)
        return -1;
    for (Py_ssize_t t = 0; t < tokens->len; t++) {
        Span token = tokens->items[t];
        if (is_placeholder(w->arena.data + token.start, token.len) || (first_only && token_met_before(w, tokens, t)))
            continue;
        /* the padded token, in its own buffer with 16 bytes to spare: 16-byte reads stay inside it */
        Py_ssize_t length = token.len + 2;
        if (grow((void **)&w->padded.data, &w->padded.cap, length + 16, 1) < 0)
            return -1;
        char *padded = w->padded.data;
        padded[0] = ' ';
        memcpy(padded + 1, w->arena.data + token.start, (size_t)token.len);
        padded[length - 1] = ' ';
        memset(padded + length, 0, 16);
        if (length < w->g.char_min) {
            if (arena_reserve(w, prefix + length) < 0 || span_push(out, w->arena.len, prefix + length) < 0)
                return -1;
            char *at = w->arena.data + w->arena.len;
            memcpy(at, CHAR_NGRAM_PREFIX, (size_t)prefix);
            memcpy(at + prefix, padded, (size_t)length);
            w->arena.len += prefix + length;
            continue;
        }
        Py_ssize_t top = w->g.char_max < length ? w->g.char_max : length;
        for (Py_ssize_t n = w->g.char_min; n <= top; n++) {
            Py_ssize_t grams = length - n + 1, size = prefix + n;
            if (grams > (PY_SSIZE_T_MAX - SLACK - w->arena.len) / size) {
                no_memory();
                return -1;
            }
            if (arena_reserve(w, grams * size) < 0 ||
                grow((void **)&out->items, &out->cap, out->len + grams, sizeof(Span)) < 0)
                return -1;
            char *at = w->arena.data + w->arena.len;
            Span *spans = out->items + out->len;
            if (n <= 16) { /* fixed-size copies: each writes at most 16 bytes past its gram, into the slack */
                for (Py_ssize_t i = 0; i < grams; i++, at += size) {
                    memcpy(at, CHAR_NGRAM_PREFIX, 4); /* (its NUL overwritten by the gram) */
                    memcpy(at + prefix, padded + i, 16);
                    spans[i].start = w->arena.len + i * size;
                    spans[i].len = size;
                }
            }
            else {
                for (Py_ssize_t i = 0; i < grams; i++, at += size) {
                    memcpy(at, CHAR_NGRAM_PREFIX, (size_t)prefix);
                    memcpy(at + prefix, padded + i, (size_t)n);
                    spans[i].start = w->arena.len + i * size;
                    spans[i].len = size;
                }
            }
            out->len += grams;
            w->arena.len += grams * size;
        }
    }
    return 0;
}

/* The first half of `all_features_of`: the segment `source` (n characters) lowered into the
 * arena and its tokens and URL domains in w->tokens and w->domains. */
static int
segment_tokens(Work *w, const Py_UCS1 *source, Py_ssize_t n)
{
    w->tokens.len = 0;
    w->domains.len = 0;
    /* An empty segment has no tokens; the arena may not be allocated yet (no memchr on NULL). */
    if (n == 0)
        return DONE;
    Py_ssize_t base;
    if (grow((void **)&w->arena.data, &w->arena.cap, w->arena.len + n, 1) < 0)
        return FAILED;
    base = w->arena.len;
    unsigned char *lowered = (unsigned char *)w->arena.data + base;
    for (Py_ssize_t i = 0; i < n; i++)
        lowered[i] = w->lower[source[i]];
    w->arena.len += n;

    const char *text = (const char *)lowered;
    int special = (w->emails && memchr(text, '@', (size_t)n) != NULL) ||
                  (w->urls && (find_bytes(text, n, "://", 3) != NULL || find_bytes(text, n, "www.", 4) != NULL));
    if (special)
        return tokens_with_placeholders(w, base, n);
    return tokenize(w, base, base + n, w->max_tokens) < 0 ? FAILED : DONE;
}

/* The second half of `all_features_of`: the features of a segment's `tokens` and `domains` in
 * order, by w->g, appended to `out`: tokens, word bigrams, OSB pairs, URL domains, character n-grams. */
static int
segment_grams(Work *w, const SpanList *tokens, const SpanList *domains, SpanList *out)
{
    for (Py_ssize_t i = 0; i < tokens->len; i++)
        if (span_push(out, tokens->items[i].start, tokens->items[i].len) < 0)
            return FAILED;
    if (w->g.bigrams) {
        for (Py_ssize_t i = 0; i + 1 < tokens->len; i++) {
            Span a = tokens->items[i], b = tokens->items[i + 1];
            Py_ssize_t length = a.len + 1 + b.len;
            /* room for 16-byte copies past the end (and reads past a token, as long as it is in the arena) */
            if (grow((void **)&w->arena.data, &w->arena.cap, w->arena.len + length + 32, 1) < 0)
                return FAILED;
            char *at = w->arena.data + w->arena.len;
            if (a.len <= 16 && b.len <= 16) { /* fixed-size copies (inlined; a read may overlap the write) */
                memmove(at, w->arena.data + a.start, 16);
                at[a.len] = ' ';
                memmove(at + a.len + 1, w->arena.data + b.start, 16);
            }
            else {
                memcpy(at, w->arena.data + a.start, (size_t)a.len);
                at[a.len] = ' ';
                memcpy(at + a.len + 1, w->arena.data + b.start, (size_t)b.len);
            }
            if (span_push(out, w->arena.len, length) < 0)
                return FAILED;
            w->arena.len += length;
        }
    }
    if (w->g.osb_window > 2 && osb_pairs(w, tokens, out) < 0)
        return FAILED;
    for (Py_ssize_t i = 0; i < domains->len; i++)
        if (span_push(out, domains->items[i].start, domains->items[i].len) < 0)
            return FAILED;
    if (w->g.char_min > 0 && char_ngrams(w, tokens, out) < 0)
        return FAILED;
    return DONE;
}

/* The head's lists and the current ones trade places (their buffers with them). */
static void
swap_head(Work *w)
{
    SpanList tokens = w->head_tokens, domains = w->head_domains;
    w->head_tokens = w->tokens;
    w->head_domains = w->domains;
    w->tokens = tokens;
    w->domains = domains;
}

/* A text's tokens, read once for all its views (the first half of `feature_list`): a leading
 * "Subject:" line's in w->head_tokens/head_domains (w->has_subject), the rest's in w->tokens/domains.
 * FALL_BACK for a text the one-byte path does not take. */
static int
text_tokens(Work *w, PyObject *text)
{
    if (READY(text) < 0)
        return FAILED;
    if (PyUnicode_KIND(text) != PyUnicode_1BYTE_KIND)
        return FALL_BACK;
    const Py_UCS1 *data = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (!PyUnicode_IS_ASCII(text)) {
        for (Py_ssize_t i = 0; i < n; i++)
            if (w->classes[data[i]] & CH_FOREIGN)
                return FALL_BACK;
    }
    w->arena.len = 0;
    w->has_subject = w->subject && n >= 8;
    for (Py_ssize_t i = 0; w->has_subject && i < 8; i++)
        w->has_subject = w->lower[data[i]] == (unsigned char)"subject:"[i];
    Py_ssize_t body = 0;
    if (w->has_subject) {
        const Py_UCS1 *newline = memchr(data, '\n', (size_t)n);
        Py_ssize_t line_end = newline ? newline - data : n;
        body = newline ? line_end + 1 : n;
        int outcome = segment_tokens(w, data + 8, line_end - 8);
        if (outcome != DONE)
            return outcome;
        swap_head(w);
    }
    int outcome = segment_tokens(w, data + body, n - body);
    w->arena_mark = w->arena.len;
    return outcome;
}

/* `feature_list` up to deduplication, of the text `text_tokens` read, by w->g: w->features holds
 * its features in order, made in the arena past w->arena_mark (so each view starts there). */
static int
text_grams(Work *w)
{
    w->arena.len = w->arena_mark;
    w->features.len = 0;
    if (!w->has_subject)
        return segment_grams(w, &w->tokens, &w->domains, &w->features);
    w->subject_features.len = 0;
    int outcome = segment_grams(w, &w->head_tokens, &w->head_domains, &w->subject_features);
    if (outcome != DONE)
        return outcome;
    for (Py_ssize_t i = 0; i < w->subject_features.len; i++) {
        Span feature = w->subject_features.items[i];
        Py_ssize_t length = (Py_ssize_t)sizeof(SUBJECT_PREFIX) - 1 + feature.len;
        if (grow((void **)&w->arena.data, &w->arena.cap, w->arena.len + length, 1) < 0)
            return FAILED;
        char *at = w->arena.data + w->arena.len;
        memcpy(at, SUBJECT_PREFIX, sizeof(SUBJECT_PREFIX) - 1);
        memcpy(at + sizeof(SUBJECT_PREFIX) - 1, w->arena.data + feature.start, (size_t)feature.len);
        if (span_push(&w->features, w->arena.len, length) < 0)
            return FAILED;
        w->arena.len += length;
    }
    for (Py_ssize_t i = 0; i < w->subject_features.len; i++)
        if (span_push(&w->features, w->subject_features.items[i].start, w->subject_features.items[i].len) < 0)
            return FAILED;
    return segment_grams(w, &w->tokens, &w->domains, &w->features);
}

/* ---- The wide path: a text stored two or four bytes a character ---------------------------------
 *
 * The same feature list as above, made over code points: each segment lowercased by str.lower
 * itself (full case mapping: a character may lower to two, and a capital sigma's lowercase
 * depends on its neighbours), the segment's tokens the runs of characters that re's `\w` takes
 * (Py_UNICODE_ISALNUM or '_', as _sre's SRE_UNI_IS_WORD) and each of '£', '$', '€' on its own.
 * Features are spans of code points in w->wide; their strs are made at the end (a feature may
 * be stored one byte a character or not, which str canonicalises), deduplicated by a set as
 * `list(dict.fromkeys(...))` does. A view with a NameIndex makes no list (`view_wide`): the
 * spans are deduplicated by their code points, and a name of code points below 256 (the str
 * one byte a character) is looked up by its bytes as the one-byte path looks up its own. The
 * text's length bounds every span, so sizes cannot overflow before the allocator refuses them. */

static int
wide_reserve(Work *w, Py_ssize_t more)
{
    if (more < 0 || more > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(Py_UCS4) - w->wide.len) {
        no_memory();
        return -1;
    }
    return grow((void **)&w->wide.data, &w->wide.cap, w->wide.len + more, sizeof(Py_UCS4));
}

/* Appends the code points of `text` (a str) to w->wide; their offset in *start. */
static int
wide_append_str(Work *w, PyObject *text, Py_ssize_t *start)
{
    if (READY(text) < 0)
        return -1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (wide_reserve(w, n) < 0)
        return -1;
    *start = w->wide.len;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    for (Py_ssize_t i = 0; i < n; i++)
        w->wide.data[w->wide.len + i] = PyUnicode_READ(kind, data, i);
    w->wide.len += n;
    return 0;
}

/* Appends n ASCII bytes to w->wide as code points. */
static int
wide_append_ascii(Work *w, const char *ascii, Py_ssize_t n)
{
    if (wide_reserve(w, n) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        w->wide.data[w->wide.len + i] = (unsigned char)ascii[i];
    w->wide.len += n;
    return 0;
}

/* Appends the code points [start, start + n) of w->wide to its end (room reserved first, so the
 * source stays where it is). */
static int
wide_append_copy(Work *w, Py_ssize_t start, Py_ssize_t n)
{
    if (wide_reserve(w, n) < 0)
        return -1;
    memcpy(w->wide.data + w->wide.len, w->wide.data + start, (size_t)n * sizeof(Py_UCS4));
    w->wide.len += n;
    return 0;
}

static inline int
wide_is_word(Py_UCS4 c)
{
    return c == '_' || Py_UNICODE_ISALNUM(c);
}

static inline int
wide_is_sign(Py_UCS4 c)
{
    return c == '$' || c == 0xA3 || c == 0x20AC; /* [£$€] */
}

/* `tokenize` over code points [lo, hi) of w->wide. */
static int
wide_tokenize(Work *w, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t remaining)
{
    Py_ssize_t i = lo;
    while (i < hi && remaining != 0) {
        Py_UCS4 c = w->wide.data[i];
        if (wide_is_word(c)) {
            Py_ssize_t start = i;
            while (i < hi && wide_is_word(w->wide.data[i]))
                i++;
            if (span_push(&w->tokens, start, i - start) < 0)
                return -1;
        }
        else if (wide_is_sign(c)) {
            if (span_push(&w->tokens, i, 1) < 0)
                return -1;
            i++;
        }
        else {
            i++;
            continue;
        }
        if (remaining > 0)
            remaining--;
    }
    return 0;
}

/* Whether code points [lo, hi) of w->wide hold the ASCII `needle` (m bytes). */
static int
wide_contains(const Work *w, Py_ssize_t lo, Py_ssize_t hi, const char *needle, Py_ssize_t m)
{
    for (Py_ssize_t i = lo; i + m <= hi; i++) {
        Py_ssize_t k = 0;
        while (k < m && w->wide.data[i + k] == (unsigned char)needle[k])
            k++;
        if (k == m)
            return 1;
    }
    return 0;
}

/* Appends a str made by the Python code (a placeholder or a URL domain) as a span of `list`. */
static int
wide_push_python_string(Work *w, PyObject *text, SpanList *list)
{
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "special span placeholders and domains must be str");
        return -1;
    }
    Py_ssize_t start;
    if (wide_append_str(w, text, &start) < 0)
        return -1;
    return span_push(list, start, w->wide.len - start);
}

/* `tokens_with_placeholders` over the lowered segment `lowered`, stored at w->wide [base, base + n). */
static int
wide_tokens_with_placeholders(Work *w, PyObject *lowered, Py_ssize_t base, Py_ssize_t n)
{
    PyObject *found = PyObject_CallOneArg(w->spans, lowered);
    if (found == NULL)
        return -1;
    PyObject *spans = PySequence_Fast(found, "special spans must be a sequence");
    Py_DECREF(found);
    if (spans == NULL)
        return -1;
    int outcome = -1;
    Py_ssize_t position = 0;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(spans); k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(spans, k);
        Py_ssize_t start, end;
        PyObject *placeholder, *domain;
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "nnOO", &start, &end, &placeholder, &domain)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "a special span must be (start, end, placeholder, domain)");
            goto done;
        }
        if (start < 0 || end < start || end > n) {
            PyErr_Format(PyExc_ValueError, "special span (%zd, %zd) outside a segment of %zd characters",
                         start, end, n);
            goto done;
        }
        if (start > position && wide_tokenize(w, base + position, base + start, remaining_tokens(w)) < 0)
            goto done;
        if (w->max_tokens >= 0 && w->tokens.len >= w->max_tokens) {
            outcome = 0; /* the rest of the segment is beyond the token cap */
            goto done;
        }
        if (wide_push_python_string(w, placeholder, &w->tokens) < 0 ||
            (domain != Py_None && wide_push_python_string(w, domain, &w->domains) < 0))
            goto done;
        position = end;
    }
    if (remaining_tokens(w) != 0 && wide_tokenize(w, base + position, base + n, remaining_tokens(w)) < 0)
        goto done;
    outcome = 0;
done:
    Py_DECREF(spans);
    return outcome;
}

/* Whether the span is one of text.py's _PLACEHOLDERS. */
static int
wide_is_placeholder(const Work *w, Span token)
{
    static const char *const placeholders[] = {"#url", "#num", "#email"};
    for (size_t p = 0; p < sizeof(placeholders) / sizeof(placeholders[0]); p++) {
        Py_ssize_t m = (Py_ssize_t)strlen(placeholders[p]);
        if (token.len == m && wide_contains(w, token.start, token.start + m, placeholders[p], m))
            return 1;
    }
    return 0;
}

/* A new feature: code points [start, w->wide.len) of w->wide. */
static int
wide_push_feature(Work *w, Py_ssize_t start, SpanList *out)
{
    return span_push(out, start, w->wide.len - start);
}

/* `_char_ngrams` of a segment's `tokens`, as `char_ngrams` makes them. */
static int
wide_char_ngrams(Work *w, const SpanList *tokens, SpanList *out)
{
    const Py_ssize_t prefix = (Py_ssize_t)sizeof(CHAR_NGRAM_PREFIX) - 1;
    for (Py_ssize_t t = 0; t < tokens->len; t++) {
        Span token = tokens->items[t];
        if (wide_is_placeholder(w, token))
            continue;
        Py_ssize_t length = token.len + 2;
        if (grow((void **)&w->wide_padded.data, &w->wide_padded.cap, length, sizeof(Py_UCS4)) < 0)
            return -1;
        Py_UCS4 *padded = w->wide_padded.data;
        padded[0] = ' ';
        memcpy(padded + 1, w->wide.data + token.start, (size_t)token.len * sizeof(Py_UCS4));
        padded[length - 1] = ' ';
        Py_ssize_t lo = length < w->g.char_min ? length : w->g.char_min;
        Py_ssize_t top = length < w->g.char_min ? length : (w->g.char_max < length ? w->g.char_max : length);
        for (Py_ssize_t n = lo; n <= top; n++) {
            for (Py_ssize_t i = 0; i + n <= length; i++) {
                Py_ssize_t start = w->wide.len;
                if (wide_append_ascii(w, CHAR_NGRAM_PREFIX, prefix) < 0 || wide_reserve(w, n) < 0)
                    return -1;
                memcpy(w->wide.data + w->wide.len, padded + i, (size_t)n * sizeof(Py_UCS4));
                w->wide.len += n;
                if (wide_push_feature(w, start, out) < 0)
                    return -1;
            }
        }
    }
    return 0;
}

/* `segment_tokens` of the str `segment`: lowered (by str.lower) into w->wide, its tokens and URL
 * domains in w->tokens and w->domains. */
static int
wide_segment_tokens(Work *w, PyObject *segment)
{
    w->tokens.len = 0;
    w->domains.len = 0;
    PyObject *lowered = PyObject_CallMethod(segment, "lower", NULL);
    if (lowered == NULL)
        return -1;
    int failed = -1;
    Py_ssize_t base;
    if (!PyUnicode_Check(lowered)) {
        PyErr_SetString(PyExc_TypeError, "str.lower gave no str");
        goto done;
    }
    if (wide_append_str(w, lowered, &base) < 0)
        goto done;
    Py_ssize_t n = w->wide.len - base;
    int special = (w->emails && wide_contains(w, base, base + n, "@", 1)) ||
                  (w->urls && (wide_contains(w, base, base + n, "://", 3) || wide_contains(w, base, base + n, "www.", 4)));
    if (special ? wide_tokens_with_placeholders(w, lowered, base, n) < 0
                : wide_tokenize(w, base, base + n, w->max_tokens) < 0)
        goto done;
    failed = 0;
done:
    Py_DECREF(lowered);
    return failed;
}

/* `segment_grams` over code points: the features of a segment's `tokens` and `domains`, appended to `out`. */
static int
wide_segment_grams(Work *w, const SpanList *tokens, const SpanList *domains, SpanList *out)
{
    for (Py_ssize_t i = 0; i < tokens->len; i++)
        if (span_push(out, tokens->items[i].start, tokens->items[i].len) < 0)
            return -1;
    if (w->g.bigrams) {
        for (Py_ssize_t i = 0; i + 1 < tokens->len; i++) {
            Span a = tokens->items[i], b = tokens->items[i + 1];
            Py_ssize_t start = w->wide.len;
            if (wide_append_copy(w, a.start, a.len) < 0 || wide_append_ascii(w, " ", 1) < 0 ||
                wide_append_copy(w, b.start, b.len) < 0 || wide_push_feature(w, start, out) < 0)
                return -1;
        }
    }
    for (Py_ssize_t d = 2; d < w->g.osb_window && d < tokens->len; d++) {
        char skip[32];
        Py_ssize_t skip_len = (Py_ssize_t)snprintf(skip, sizeof(skip), " <%zd> ", d - 1);
        for (Py_ssize_t i = 0; i + d < tokens->len; i++) {
            Span a = tokens->items[i], b = tokens->items[i + d];
            Py_ssize_t start = w->wide.len;
            if (wide_append_copy(w, a.start, a.len) < 0 || wide_append_ascii(w, skip, skip_len) < 0 ||
                wide_append_copy(w, b.start, b.len) < 0 || wide_push_feature(w, start, out) < 0)
                return -1;
        }
    }
    for (Py_ssize_t i = 0; i < domains->len; i++)
        if (span_push(out, domains->items[i].start, domains->items[i].len) < 0)
            return -1;
    if (w->g.char_min > 0 && wide_char_ngrams(w, tokens, out) < 0)
        return -1;
    return 0;
}

/* Spans [start, start + len) of w->wide as strs, appended to `list`; with `seen` (binary), only
 * the first appearance of each. */
static int
wide_names(Work *w, const SpanList *spans, PyObject *list, PyObject *seen)
{
    for (Py_ssize_t i = 0; i < spans->len; i++) {
        Span span = spans->items[i];
        PyObject *name = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, w->wide.data + span.start, span.len);
        if (name == NULL)
            return -1;
        int skip = 0;
        if (seen != NULL) {
            skip = PySet_Contains(seen, name);
            if (skip == 0)
                skip = PySet_Add(seen, name) < 0 ? -1 : 0;
        }
        if (skip < 0 || (skip == 0 && PyList_Append(list, name) < 0)) {
            Py_DECREF(name);
            return -1;
        }
        Py_DECREF(name);
    }
    return 0;
}

/* `text_tokens` for a str of any storage: its segments lowered by str.lower into w->wide, their
 * tokens read once for every view (the first half of `feature_list`). */
static int
wide_text_tokens(Work *w, PyObject *text)
{
    w->wide.len = 0;
    w->has_subject = 0;
    PyObject *head = NULL, *subject = NULL, *segment = NULL;
    int failed = -1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), body = 0;
    if (w->subject) { /* text[:8].lower() == "subject:" */
        head = PyUnicode_Substring(text, 0, 8);
        PyObject *lowered = head ? PyObject_CallMethod(head, "lower", NULL) : NULL;
        if (lowered == NULL)
            goto done;
        w->has_subject = PyUnicode_Check(lowered) && PyUnicode_CompareWithASCIIString(lowered, "subject:") == 0;
        Py_DECREF(lowered);
        if (PyErr_Occurred())
            goto done;
    }
    if (w->has_subject) {
        /* first_line, _, body = text.partition("\n"): the subject is first_line[8:] */
        Py_ssize_t line_end = PyUnicode_FindChar(text, '\n', 0, n, 1);
        if (line_end == -2)
            goto done;
        body = line_end < 0 ? n : line_end + 1;
        if (line_end < 0)
            line_end = n;
        if ((subject = PyUnicode_Substring(text, 8, line_end)) == NULL || wide_segment_tokens(w, subject) < 0)
            goto done;
        swap_head(w);
    }
    if ((segment = body == 0 ? Py_NewRef(text) : PyUnicode_Substring(text, body, n)) == NULL ||
        wide_segment_tokens(w, segment) < 0)
        goto done;
    w->wide_mark = w->wide.len;
    failed = 0;
done:
    Py_XDECREF(head);
    Py_XDECREF(subject);
    Py_XDECREF(segment);
    return failed;
}

/* The features of the text `wide_text_tokens` read, by w->g (the Python definition, made in
 * C): spans of w->wide past w->wide_mark, in w->features, in `feature_list`'s order. */
static int
wide_text_grams(Work *w)
{
    w->wide.len = w->wide_mark;
    w->features.len = 0;
    w->subject_features.len = 0;
    if (w->has_subject) {
        if (wide_segment_grams(w, &w->head_tokens, &w->head_domains, &w->subject_features) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < w->subject_features.len; i++) {
            Span feature = w->subject_features.items[i];
            Py_ssize_t start = w->wide.len;
            if (wide_append_ascii(w, SUBJECT_PREFIX, (Py_ssize_t)sizeof(SUBJECT_PREFIX) - 1) < 0 ||
                wide_append_copy(w, feature.start, feature.len) < 0 || wide_push_feature(w, start, &w->features) < 0)
                return -1;
        }
        for (Py_ssize_t i = 0; i < w->subject_features.len; i++)
            if (span_push(&w->features, w->subject_features.items[i].start, w->subject_features.items[i].len) < 0)
                return -1;
    }
    return wide_segment_grams(w, &w->tokens, &w->domains, &w->features);
}

/* `feature_list(text)` of the text `wide_text_tokens` read, by w->g: a new list of the strs of
 * `wide_text_grams`' spans. With a binary plan, *names_seen is set to a new set of the same
 * names (the list's names each once), else to NULL. */
static PyObject *
wide_text_names(Work *w, PyObject **names_seen)
{
    *names_seen = NULL;
    PyObject *list = PyList_New(0);
    PyObject *seen = w->g.binary ? PySet_New(NULL) : NULL;
    if (list == NULL || (w->g.binary && seen == NULL) || wide_text_grams(w) < 0 ||
        wide_names(w, &w->features, list, seen) < 0) {
        Py_XDECREF(seen);
        Py_XDECREF(list);
        return NULL;
    }
    *names_seen = seen;
    return list;
}

/* The last 1..7 bytes of a name as one word, read in at most two fixed-size loads (a call to
 * memcpy for a handful of bytes costs more than the hash): for a given length, different bytes
 * give different words. */
static inline uint64_t
tail_word(const char *bytes, Py_ssize_t n)
{
    if (n >= 4) {
        uint32_t first, last;
        memcpy(&first, bytes, 4);
        memcpy(&last, bytes + n - 4, 4);
        return (uint64_t)first | (uint64_t)last << 32;
    }
    return (uint64_t)(unsigned char)bytes[0] | (uint64_t)(unsigned char)bytes[n / 2] << 8 |
           (uint64_t)(unsigned char)bytes[n - 1] << 16;
}

/* memcmp(a, b, n) == 0, in fixed-size loads for a name of up to 16 bytes. */
static inline int
same_bytes(const char *a, const char *b, Py_ssize_t n)
{
    uint64_t x1, y1, x2, y2;
    if (n >= 8 && n <= 16) {
        memcpy(&x1, a, 8);
        memcpy(&y1, b, 8);
        memcpy(&x2, a + n - 8, 8);
        memcpy(&y2, b + n - 8, 8);
        return ((x1 ^ y1) | (x2 ^ y2)) == 0;
    }
    if (n > 16)
        return memcmp(a, b, (size_t)n) == 0;
    return n == 0 || tail_word(a, n) == tail_word(b, n);
}

/* The hashes' seed, drawn once per process from os.urandom when the module loads: without it, a
 * message could be written whose names all fall in one run of a table's slots (hash flooding),
 * and each look-up would walk them all. CPython seeds its str hashes for the same reason. */
static uint64_t hash_seed;

/* A name's 64-bit hash, for the tables below: eight bytes at a time, each step and the end
 * mixed by multiply and xor-shift (MurmurHash3's finaliser), so every byte reaches the low bits
 * that pick a slot. Only speed rests on it: a table compares the bytes of a name it finds. */
static inline uint64_t
name_hash(const char *bytes, Py_ssize_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ hash_seed ^ (uint64_t)n, word;
    for (; n >= 8; bytes += 8, n -= 8) {
        memcpy(&word, bytes, 8);
        h = (h ^ word) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    if (n > 0) {
        word = tail_word(bytes, n);
        h = (h ^ word) * 0xc4ceb9fe1a85ec53ULL;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

/* w->hashes[i] = name_hash of feature i, for every feature: its `unit` * len bytes from
 * base + unit * start (the arena's bytes, or the wide arena's code points). */
static int
hash_spans(Work *w, const char *base, Py_ssize_t unit)
{
    if (grow((void **)&w->hashes, &w->hashes_cap, w->features.len, sizeof(uint64_t)) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < w->features.len; i++)
        w->hashes[i] = name_hash(base + unit * w->features.items[i].start, unit * w->features.items[i].len);
    return 0;
}

static int
hash_features(Work *w)
{
    return hash_spans(w, w->arena.data, 1);
}

/* Keeps the first appearance of each feature (`list(dict.fromkeys(features))`), in place, and
 * their hashes in w->hashes; features are spans of `base` in units of `unit` bytes, as for
 * `hash_spans`. */
static int
deduplicate_spans(Work *w, const char *base, Py_ssize_t unit)
{
    Py_ssize_t count = w->features.len;
    if (hash_spans(w, base, unit) < 0)
        return -1;
    if (count < 2)
        return 0;
    Py_ssize_t n_slots = 16;
    while (n_slots < 2 * count)
        n_slots *= 2;
    if (n_slots > w->n_slots) {
        Py_ssize_t *slots = PyMem_RawRealloc(w->slots, (size_t)n_slots * sizeof(Py_ssize_t));
        if (slots == NULL) {
            no_memory();
            return -1;
        }
        w->slots = slots;
        w->n_slots = n_slots;
    }
    memset(w->slots, 0, (size_t)n_slots * sizeof(Py_ssize_t));
    w->slots_used = n_slots;
    Span *items = w->features.items;
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Span feature = items[i];
        uint64_t hash = w->hashes[i];
        size_t slot = (size_t)hash & (size_t)(n_slots - 1);
        int seen = 0;
        while (w->slots[slot]) {
            Span other = items[w->slots[slot] - 1];
            if (w->hashes[w->slots[slot] - 1] == hash && other.len == feature.len &&
                same_bytes(base + unit * other.start, base + unit * feature.start, unit * feature.len)) {
                seen = 1;
                break;
            }
            slot = (slot + 1) & (size_t)(n_slots - 1);
        }
        if (seen)
            continue;
        items[kept] = feature;
        w->hashes[kept] = hash;
        w->slots[slot] = kept + 1;
        kept++;
    }
    w->features.len = kept;
    return 0;
}

static int
deduplicate(Work *w)
{
    return deduplicate_spans(w, w->arena.data, 1);
}

/* An empty table of tokens met, for `tokens` (at most half full). */
static int
first_tokens_begin(Work *w, const SpanList *tokens)
{
    Py_ssize_t n_slots = 16;
    while (n_slots < 2 * tokens->len)
        n_slots *= 2;
    if (grow((void **)&w->token_slots, &w->token_slots_cap, n_slots, sizeof(Py_ssize_t)) < 0)
        return -1;
    memset(w->token_slots, 0, (size_t)n_slots * sizeof(Py_ssize_t));
    w->token_slots_size = n_slots;
    return 0;
}

/* Whether tokens[t] equals a token before it that this call met (each token asked in order,
 * once); if not, it is met now. */
static int
token_met_before(Work *w, const SpanList *tokens, Py_ssize_t t)
{
    Span token = tokens->items[t];
    const char *bytes = w->arena.data + token.start;
    size_t mask = (size_t)w->token_slots_size - 1;
    for (size_t slot = (size_t)name_hash(bytes, token.len) & mask;; slot = (slot + 1) & mask) {
        Py_ssize_t held = w->token_slots[slot];
        if (held == 0) {
            w->token_slots[slot] = t + 1;
            return 0;
        }
        Span other = tokens->items[held - 1];
        if (other.len == token.len && same_bytes(w->arena.data + other.start, bytes, token.len))
            return 1;
    }
}

/* ---- NameTable: one-byte names -> a number, in C ------------------------------------------------
 *
 * Open addressing with linear probing, at most 3/4 full; a slot keeps the name's hash and, for a
 * name of up to INLINE_BYTES bytes, the name itself, so that a look-up reads one cache line.
 * Beside the slots, a byte a slot (its tag): 0 for an empty slot, else 0x80 | the hash's top 7
 * bits. A probe reads the tags and only a slot whose tag matches: the tags (1/32 of the slots'
 * bytes) stay in cache where the slots do not, so a name the table lacks (about half of a mail
 * batch's look-ups) is told absent without reading a slot, and a slot is read for a name that
 * is there (and for 1 in 128 of the other names a probe passes). */

#define INLINE_BYTES 16
#define CACHE_LINE 64

typedef struct {
    uint64_t hash;
    int32_t value; /* (a slot whose tag is 0 is empty: nothing in it is read) */
    uint32_t len;
    union {
        char bytes[INLINE_BYTES]; /* a name of at most INLINE_BYTES bytes, here */
        uint64_t offset;          /* a longer one, in the arena */
    } name;
} TableSlot;

typedef struct {
    TableSlot *slots; /* NULL: empty; on a cache-line boundary, so that no slot spans two lines */
    uint8_t *tags;    /* tags[i]: slot i's tag (see above), after the slots in the same block */
    void *allocated;  /* the block `slots` and `tags` lie in */
    size_t mask;      /* number of slots - 1 (a power of two) */
    Py_ssize_t count;
    Buffer arena;
} NameTable;

static inline uint8_t
table_tag(uint64_t hash)
{
    return (uint8_t)(0x80 | (hash >> 57));
}

static inline int
slot_holds(const NameTable *table, const TableSlot *slot, const char *bytes, Py_ssize_t len, uint64_t hash)
{
    if (slot->hash != hash || slot->len != (uint32_t)len)
        return 0;
    const char *name = slot->len <= INLINE_BYTES ? slot->name.bytes : table->arena.data + slot->name.offset;
    return same_bytes(name, bytes, len);
}

/* The number of the name (bytes, len) whose name_hash is `hash`, -1 if absent. */
static inline int64_t
table_find(const NameTable *table, const char *bytes, Py_ssize_t len, uint64_t hash)
{
    if (table->slots == NULL)
        return -1;
    uint8_t tag = table_tag(hash);
    for (size_t at = (size_t)hash & table->mask;; at = (at + 1) & table->mask) {
        uint8_t held = table->tags[at];
        if (held == 0)
            return -1;
        if (held == tag && slot_holds(table, &table->slots[at], bytes, len, hash))
            return table->slots[at].value;
    }
}

/* Asks for the slot a look-up of `hash` will read first, when its tag says the name may be
 * there (a name the table lacks mostly needs no slot). */
static inline void
table_prefetch(const NameTable *table, uint64_t hash)
{
#if defined(__GNUC__)
    if (table->slots != NULL) {
        size_t at = (size_t)hash & table->mask;
        if (table->tags[at] == table_tag(hash))
            __builtin_prefetch(&table->slots[at]);
    }
#endif
}

/* Room for `more` names, rehashing into a larger table. */
static int
table_reserve(NameTable *table, Py_ssize_t more)
{
    size_t needed = (size_t)(table->count + more);
    size_t size = table->slots ? table->mask + 1 : 0;
    if (size && needed <= size / 4 * 3)
        return 0;
    size_t new_size = size ? size : 1024;
    while (needed > new_size / 4 * 3) {
        if (new_size > ((size_t)PY_SSIZE_T_MAX / sizeof(TableSlot)) / 2) {
            no_memory();
            return -1;
        }
        new_size *= 2;
    }
    /* (no overflow: the loop keeps new_size * sizeof(TableSlot) <= PY_SSIZE_T_MAX, so the tags' new_size
     * bytes and CACHE_LINE more stay within SIZE_MAX; PyMem_RawMalloc refuses a size beyond PY_SSIZE_T_MAX) */
    void *allocated = PyMem_RawMalloc(new_size * (sizeof(TableSlot) + 1) + CACHE_LINE);
    if (allocated == NULL) {
        no_memory();
        return -1;
    }
    TableSlot *slots = (TableSlot *)(((uintptr_t)allocated + CACHE_LINE - 1) & ~(uintptr_t)(CACHE_LINE - 1));
    uint8_t *tags = (uint8_t *)(slots + new_size);
    memset(tags, 0, new_size); /* every slot empty; a slot is read only where its tag is set */
    for (size_t i = 0; i < size; i++) {
        if (table->tags[i] == 0)
            continue;
        size_t at = (size_t)table->slots[i].hash & (new_size - 1);
        while (tags[at] != 0)
            at = (at + 1) & (new_size - 1);
        slots[at] = table->slots[i];
        tags[at] = table->tags[i];
    }
    PyMem_RawFree(table->allocated);
    table->allocated = allocated;
    table->slots = slots;
    table->tags = tags;
    table->mask = new_size - 1;
    return 0;
}

/* Adds a name with its number (room reserved): 0; a name already there keeps its first number: 1. */
static int
table_add(NameTable *table, const char *bytes, Py_ssize_t len, uint64_t hash, int32_t value)
{
    uint8_t tag = table_tag(hash);
    size_t at = (size_t)hash & table->mask;
    for (; table->tags[at] != 0; at = (at + 1) & table->mask)
        if (table->tags[at] == tag && slot_holds(table, &table->slots[at], bytes, len, hash))
            return 1;
    TableSlot *slot = &table->slots[at];
    if (len <= INLINE_BYTES) {
        memcpy(slot->name.bytes, bytes, (size_t)len);
    }
    else {
        Py_ssize_t start;
        if (grow((void **)&table->arena.data, &table->arena.cap, table->arena.len + len, 1) < 0)
            return -1;
        start = table->arena.len;
        memcpy(table->arena.data + start, bytes, (size_t)len);
        table->arena.len += len;
        slot->name.offset = (uint64_t)start;
    }
    slot->hash = hash;
    slot->len = (uint32_t)len;
    slot->value = value;
    table->tags[at] = tag;
    table->count++;
    return 0;
}

static void
table_clear(NameTable *table)
{
    PyMem_RawFree(table->allocated);
    PyMem_RawFree(table->arena.data);
    memset(table, 0, sizeof(*table));
}

/* The memory a table holds. */
static size_t
table_bytes(const NameTable *table)
{
    return (table->slots ? (table->mask + 1) * (sizeof(TableSlot) + 1) : 0) + (size_t)table->arena.cap;
}

/* Empties a table, its room kept. */
static void
table_empty(NameTable *table)
{
    if (table->slots != NULL)
        memset(table->tags, 0, table->mask + 1);
    table->count = 0;
    table->arena.len = 0;
}

/* ---- NewNames: a batch's names the vocabulary lacks, made into strs only when read ------------
 *
 * Most of them are never learned (only learned events add theirs to the vocabulary), so a batch
 * keeps their bytes and makes a name's str when it is first read; a name that came as a str is
 * kept as it is. A slice with step 1 is a view of the same names. Read-only for Python. */

typedef struct NewNames {
    PyObject_HEAD
    struct NewNames *root; /* a view: the names it shows (held); NULL: this object holds them */
    Py_ssize_t start, len; /* a view shows root's names start .. start + len - 1 */
    /* held by the root: */
    Buffer bytes;        /* the names given as bytes, one after another */
    struct {
        Py_ssize_t end;  /* name i's bytes are [entries[i - 1].end, end) (from 0 for i = 0) */
        PyObject *made;  /* name i's str, once made or given; else NULL */
    } *entries;
    Py_ssize_t cap;
} NewNames;

static PyTypeObject NewNamesType;

/* An empty NewNames; a view of `root` (held) when root is not NULL. */
static NewNames *
new_names_create(NewNames *root)
{
    NewNames *names = PyObject_New(NewNames, &NewNamesType);
    if (names == NULL)
        return NULL;
    names->root = (NewNames *)Py_XNewRef(root);
    names->start = names->len = names->cap = 0;
    memset(&names->bytes, 0, sizeof(names->bytes));
    names->entries = NULL;
    return names;
}

/* Appends a name: `name` (a str, held) if not NULL, else the one-byte string (bytes, len). */
static int
new_names_push(NewNames *names, PyObject *name, const char *bytes, Py_ssize_t len)
{
    if (grow((void **)&names->entries, &names->cap, names->len + 1, sizeof(*names->entries)) < 0)
        return -1;
    Py_ssize_t end = names->len ? names->entries[names->len - 1].end : 0;
    if (name == NULL) {
        if (grow((void **)&names->bytes.data, &names->bytes.cap, end + len, 1) < 0)
            return -1;
        memcpy(names->bytes.data + end, bytes, (size_t)len);
        end += len;
    }
    names->entries[names->len].end = end;
    names->entries[names->len].made = Py_XNewRef(name);
    names->len++;
    return 0;
}

static PyObject *
new_names_item(NewNames *self, Py_ssize_t i)
{
    if (i < 0 || i >= self->len) {
        PyErr_SetString(PyExc_IndexError, "NewNames index out of range");
        return NULL;
    }
    NewNames *root = self->root ? self->root : self;
    i += self->start;
    if (root->entries[i].made == NULL) {
        Py_ssize_t begin = i ? root->entries[i - 1].end : 0;
        root->entries[i].made = PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, root->bytes.data + begin,
                                                          root->entries[i].end - begin);
        if (root->entries[i].made == NULL)
            return NULL;
    }
    return Py_NewRef(root->entries[i].made);
}

static Py_ssize_t
new_names_length(NewNames *self)
{
    return self->len;
}

static PyObject *
new_names_subscript(NewNames *self, PyObject *key)
{
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred())
            return NULL;
        return new_names_item(self, i < 0 ? i + self->len : i);
    }
    if (!PySlice_Check(key)) {
        PyErr_Format(PyExc_TypeError, "NewNames indices must be integers or slices, not %s", Py_TYPE(key)->tp_name);
        return NULL;
    }
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(key, &start, &stop, &step) < 0)
        return NULL;
    Py_ssize_t count = PySlice_AdjustIndices(self->len, &start, &stop, step);
    if (step != 1) { /* a list of the names picked */
        PyObject *picked = PyList_New(count);
        for (Py_ssize_t k = 0; picked != NULL && k < count; k++) {
            PyObject *name = new_names_item(self, start + k * step);
            if (name == NULL)
                Py_CLEAR(picked);
            else
                PyList_SET_ITEM(picked, k, name);
        }
        return picked;
    }
    NewNames *view = new_names_create(self->root ? self->root : self);
    if (view == NULL)
        return NULL;
    view->start = self->start + start;
    view->len = count;
    return (PyObject *)view;
}

static PyObject *
new_names_richcompare(PyObject *self, PyObject *other, int op)
{
    if ((op != Py_EQ && op != Py_NE) || !(PyList_Check(other) || PyObject_TypeCheck(other, &NewNamesType)))
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *mine = PySequence_List(self), *theirs = PySequence_List(other);
    PyObject *result = mine && theirs ? PyObject_RichCompare(mine, theirs, op) : NULL;
    Py_XDECREF(mine);
    Py_XDECREF(theirs);
    return result;
}

static PyObject *
new_names_repr(PyObject *self)
{
    PyObject *listed = PySequence_List(self);
    PyObject *repr = listed ? PyUnicode_FromFormat("NewNames(%R)", listed) : NULL;
    Py_XDECREF(listed);
    return repr;
}

static void
new_names_dealloc(NewNames *self)
{
    if (self->root != NULL) {
        Py_DECREF(self->root);
    }
    else {
        for (Py_ssize_t i = 0; i < self->len; i++)
            Py_XDECREF(self->entries[i].made);
        PyMem_RawFree(self->entries);
        PyMem_RawFree(self->bytes.data);
    }
    PyObject_Free(self);
}

/* NewNames.find(names): for each of `names` (a list), the position of the first equal name
 * among these, -1 where none is, as int64s in a bytes object; None when some name or entry is
 * neither an exact str nor kept as bytes (equality would then be theirs to say). The names
 * asked for (few: a vocabulary's gain) go in a table, one-byte ones, and a dict, wider ones,
 * each under the first place it is asked at; the entries are read once, in order, against them. */
static PyObject *
new_names_find(NewNames *self, PyObject *names)
{
    if (!PyList_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "NewNames.find takes a list of names");
        return NULL;
    }
    const Py_ssize_t n = PyList_GET_SIZE(names);
    if (n > INT32_MAX) /* a table numbers by int32 */
        Py_RETURN_NONE;
    NewNames *root = self->root ? self->root : self;
    NameTable asked = {0};
    PyObject *wide = PyDict_New(), *result = NULL, *answer = NULL;
    int64_t *first_at = NULL; /* by the first place a name is asked at: its first position */
    if (wide == NULL || table_reserve(&asked, n) < 0)
        goto done;
    first_at = PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (first_at == NULL) {
        no_memory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *name = PyList_GET_ITEM(names, k);
        first_at[k] = -1;
        if (!PyUnicode_CheckExact(name) || READY(name) < 0) {
            PyErr_Clear();
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (PyUnicode_KIND(name) == PyUnicode_1BYTE_KIND) {
            const char *bytes = (const char *)PyUnicode_1BYTE_DATA(name);
            Py_ssize_t len = PyUnicode_GET_LENGTH(name);
            if (table_add(&asked, bytes, len, name_hash(bytes, len), (int32_t)k) < 0)
                goto done;
            continue;
        }
        PyObject *place = PyLong_FromSsize_t(k);
        PyObject *kept = place ? PyDict_SetDefault(wide, name, place) : NULL;
        Py_XDECREF(place);
        if (kept == NULL)
            goto done;
    }
    for (Py_ssize_t i = 0; i < self->len; i++) {
        Py_ssize_t at = self->start + i;
        PyObject *made = root->entries[at].made;
        Py_ssize_t begin = at ? root->entries[at - 1].end : 0;
        const char *bytes = root->bytes.data + begin;
        Py_ssize_t len = root->entries[at].end - begin;
        int64_t k;
        if (made != NULL && len == 0) { /* given as a str, not as bytes */
            if (!PyUnicode_CheckExact(made) || READY(made) < 0) {
                PyErr_Clear();
                result = Py_NewRef(Py_None);
                goto done;
            }
            if (PyUnicode_KIND(made) != PyUnicode_1BYTE_KIND) {
                PyObject *place = PyDict_GetItemWithError(wide, made); /* borrowed */
                if (place == NULL && PyErr_Occurred())
                    goto done;
                k = place == NULL ? -1 : PyLong_AsLongLong(place);
                if (k >= 0 && first_at[k] < 0)
                    first_at[k] = i;
                continue;
            }
            bytes = (const char *)PyUnicode_1BYTE_DATA(made);
            len = PyUnicode_GET_LENGTH(made);
        }
        k = table_find(&asked, bytes, len, name_hash(bytes, len));
        if (k >= 0 && first_at[k] < 0)
            first_at[k] = i;
    }
    answer = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (answer == NULL)
        goto done;
    int64_t *position = (int64_t *)PyBytes_AS_STRING(answer);
    for (Py_ssize_t k = 0; k < n; k++) { /* a name asked twice: the answer of its first place */
        PyObject *name = PyList_GET_ITEM(names, k);
        int64_t first;
        if (PyUnicode_KIND(name) == PyUnicode_1BYTE_KIND) {
            const char *bytes = (const char *)PyUnicode_1BYTE_DATA(name);
            Py_ssize_t len = PyUnicode_GET_LENGTH(name);
            first = table_find(&asked, bytes, len, name_hash(bytes, len));
        }
        else {
            PyObject *place = PyDict_GetItemWithError(wide, name); /* borrowed: every wide name is there */
            if (place == NULL) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_SystemError, "NewNames.find lost a name");
                goto done;
            }
            first = PyLong_AsLongLong(place);
        }
        position[k] = first_at[first];
    }
    result = Py_NewRef(answer);
done:
    Py_XDECREF(answer);
    Py_XDECREF(wide);
    PyMem_RawFree(first_at);
    table_clear(&asked);
    return result;
}

/* Takes the first `count` names of the list `made` back out of column_of, keeping the exception
 * set; deleting a key allocates nothing, so the call that added them is undone whatever failed. */
static void
new_names_take_back(PyObject *column_of, PyObject *made, Py_ssize_t count)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    for (Py_ssize_t k = 0; k < count; k++)
        if (PyDict_DelItem(column_of, PyList_GET_ITEM(made, k)) < 0)
            PyErr_Clear();
    PyErr_Restore(type, value, traceback);
}

/* NewNames.add_to(column_of, by_column, positions, one_byte=True): Vocabulary.add_new of the names
 * at `positions` (native int64s in bytes, positions among these names), in that order, each str
 * made as it goes: name appended to the list by_column and column_of[name] = its place there. The
 * dict and list are a vocabulary's (exact types, as many names in each). All or nothing: the
 * strs are made first, then the dict takes them (a name it holds already, or one given twice, is
 * a ValueError), then the list in one step; a failure takes what the dict took back out. With
 * one_byte false the dict takes only the names stored wider than one byte a character (a
 * vocabulary whose dict lags its list: the C index finds the others), and may hold fewer names. */
static PyObject *
new_names_add_to(NewNames *self, PyObject *args)
{
    PyObject *column_of, *by_column, *positions;
    int one_byte = 1;
    if (!PyArg_ParseTuple(args, "OOO|p:add_to", &column_of, &by_column, &positions, &one_byte))
        return NULL;
    if (!PyDict_CheckExact(column_of) || !PyList_CheckExact(by_column) || !PyBytes_CheckExact(positions)) {
        PyErr_SetString(PyExc_TypeError, "NewNames.add_to takes a dict, a list and bytes");
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(positions), start = PyList_GET_SIZE(by_column);
    if (size % (Py_ssize_t)sizeof(int64_t) != 0 ||
        (one_byte ? PyDict_GET_SIZE(column_of) != start : PyDict_GET_SIZE(column_of) > start)) {
        PyErr_SetString(PyExc_ValueError, "NewNames.add_to: positions must be int64s, and the dict and list "
                                          "must hold as many names");
        return NULL;
    }
    Py_ssize_t count = size / (Py_ssize_t)sizeof(int64_t);
    const char *data = PyBytes_AS_STRING(positions);
    /* a position given twice is refused here (the dict would see it for a name it takes) */
    unsigned char *given = PyMem_Calloc((size_t)(self->len ? self->len : 1), 1);
    if (given == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t k = 0; k < count; k++) {
        int64_t position;
        memcpy(&position, data + k * (Py_ssize_t)sizeof(int64_t), sizeof(int64_t));
        if (position < 0 || position >= self->len) {
            PyErr_SetString(PyExc_IndexError, "NewNames.add_to: a position out of range");
            PyMem_Free(given);
            return NULL;
        }
        if (given[position]) {
            PyErr_SetString(PyExc_ValueError, "NewNames.add_to: a name given twice");
            PyMem_Free(given);
            return NULL;
        }
        given[position] = 1;
    }
    PyMem_Free(given);
    PyObject *made = PyList_New(count);
    if (made == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < count; k++) {
        int64_t position;
        memcpy(&position, data + k * (Py_ssize_t)sizeof(int64_t), sizeof(int64_t));
        PyObject *name = new_names_item(self, (Py_ssize_t)position);
        if (name == NULL) {
            Py_DECREF(made);
            return NULL;
        }
        PyList_SET_ITEM(made, k, name);
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *name = PyList_GET_ITEM(made, k);
        if (!one_byte && PyUnicode_KIND(name) == PyUnicode_1BYTE_KIND) /* (the strs made here are ready) */
            continue;
        PyObject *column = PyLong_FromSsize_t(start + k);
        /* one look-up: a value already there is kept (the dict does not grow), not replaced */
        Py_ssize_t before = PyDict_GET_SIZE(column_of);
        PyObject *held = column ? PyDict_SetDefault(column_of, name, column) : NULL; /* borrowed */
        Py_XDECREF(column);
        if (held == NULL || PyDict_GET_SIZE(column_of) == before) {
            if (held != NULL)
                PyErr_SetString(PyExc_ValueError, "NewNames.add_to: a name is in the vocabulary already");
            new_names_take_back(column_of, made, k);
            Py_DECREF(made);
            return NULL;
        }
    }
    if (PyList_SetSlice(by_column, start, start, made) < 0) {
        new_names_take_back(column_of, made, count);
        Py_DECREF(made);
        return NULL;
    }
    Py_DECREF(made);
    Py_RETURN_NONE;
}

static PyMethodDef new_names_methods[] = {
    {"find", (PyCFunction)new_names_find, METH_O,
     "find(names): each name's position among these (-1: not among them), as int64s in bytes; None when\n"
     "a name or an entry is not an exact str (the caller then compares them itself)."},
    {"add_to", (PyCFunction)new_names_add_to, METH_VARARGS,
     "add_to(column_of, by_column, positions, one_byte=True): a vocabulary's add_new of the names at\n"
     "`positions` (native int64s in bytes), in order: each appended to by_column, and column_of[name] its\n"
     "place there (with one_byte false, only for a name stored wider than one byte a character). All or\n"
     "nothing: ValueError for a name column_of holds already (or given twice)."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods new_names_as_sequence = {
    .sq_length = (lenfunc)new_names_length,
    .sq_item = (ssizeargfunc)new_names_item,
};

static PyMappingMethods new_names_as_mapping = {
    .mp_length = (lenfunc)new_names_length,
    .mp_subscript = (binaryfunc)new_names_subscript,
};

static PyTypeObject NewNamesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stream_nb.features._native.NewNames",
    .tp_basicsize = sizeof(NewNames),
    .tp_dealloc = (destructor)new_names_dealloc,
    .tp_repr = new_names_repr,
    .tp_as_sequence = &new_names_as_sequence,
    .tp_as_mapping = &new_names_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_SEQUENCE,
    .tp_richcompare = new_names_richcompare,
    .tp_methods = new_names_methods,
    .tp_doc = "A batch's names absent from the vocabulary, in rank order: a read-only sequence of str\n"
              "that makes each str when it is first read (featurize's `unknown`).",
};

/* What a call returns besides the names: with a vocabulary, each name's column (-1 if absent)
 * and, numbering, an absent one's rank among the batch's absent names by first appearance (else
 * -1), and those names in rank order in `unknown` (NewNames). A one-byte name's rank is kept in
 * `fresh`, any other's in `fresh_others` (a dict): the names this module makes need no str. */
typedef struct {
    PyObject *column_of; /* borrowed; NULL: no look-ups */
    PyObject *complete;  /* borrowed; NULL: column_of holds every name, else a callable that makes it so
                          * (until then it holds every name stored wider than a byte a character) */
    NewNames *unknown;   /* NULL: not numbering */
    PyObject *fresh_others;
    NameTable fresh;
    IntList columns, ranks;
} Lookups;

/* Records an absent name's rank, numbering it if new; `name` (a str) may be NULL, then the bytes
 * are kept and the str made only if the name is read. */
static int
record_absent(Lookups *lookups, PyObject *name, const char *bytes, Py_ssize_t len, uint64_t hash)
{
    int64_t rank = table_find(&lookups->fresh, bytes, len, hash);
    if (rank < 0) {
        rank = lookups->unknown->len;
        if (rank >= INT32_MAX) {
            if (detached)
                detached_error = DETACHED_TOO_MANY_NAMES;
            else
                PyErr_SetString(PyExc_OverflowError, TOO_MANY_NAMES);
            return -1;
        }
        if (new_names_push(lookups->unknown, name, bytes, len) < 0 || table_reserve(&lookups->fresh, 1) < 0 ||
            table_add(&lookups->fresh, bytes, len, hash, (int32_t)rank) < 0)
            return -1;
    }
    return int_push(&lookups->columns, -1) < 0 ? -1 : int_push(&lookups->ranks, rank);
}

/* Records a name's column (-1: absent, and then, numbering, its rank). */
static int
record_column(PyObject *name, Lookups *lookups, int64_t column)
{
    if (column >= 0)
        return int_push(&lookups->columns, column) < 0 ? -1 : int_push(&lookups->ranks, -1);
    if (lookups->unknown == NULL) /* not numbering the absent names */
        return int_push(&lookups->columns, -1);
    if (PyUnicode_CheckExact(name) && PyUnicode_KIND(name) == PyUnicode_1BYTE_KIND) {
        const char *bytes = (const char *)PyUnicode_1BYTE_DATA(name);
        Py_ssize_t len = PyUnicode_GET_LENGTH(name);
        return record_absent(lookups, name, bytes, len, name_hash(bytes, len));
    }
    int64_t rank;
    PyObject *known_rank = PyDict_GetItemWithError(lookups->fresh_others, name); /* borrowed */
    if (known_rank != NULL) {
        rank = PyLong_AsLongLong(known_rank);
        if (rank == -1 && PyErr_Occurred())
            return -1;
    }
    else {
        if (PyErr_Occurred())
            return -1;
        rank = lookups->unknown->len;
        PyObject *boxed = PyLong_FromLongLong(rank);
        if (boxed == NULL)
            return -1;
        int stored = PyDict_SetItem(lookups->fresh_others, name, boxed);
        Py_DECREF(boxed);
        if (stored < 0 || new_names_push(lookups->unknown, name, NULL, 0) < 0)
            return -1;
    }
    return int_push(&lookups->columns, -1) < 0 ? -1 : int_push(&lookups->ranks, rank);
}

/* Makes the look-ups' dict hold every name (with the GIL). */
static int
lookups_complete(Lookups *lookups)
{
    if (lookups->complete == NULL)
        return 0;
    PyObject *made = PyObject_CallNoArgs(lookups->complete);
    if (made == NULL)
        return -1;
    Py_DECREF(made);
    lookups->complete = NULL;
    return 0;
}

/* Appends `name` to `names` (unless NULL) and, with a vocabulary, its column and rank, looked
 * up in the dict (made complete first for a name stored one byte a character). */
static int
emit(PyObject *name, PyObject *names, Lookups *lookups)
{
    if (names != NULL && PyList_Append(names, name) < 0)
        return -1;
    if (lookups->column_of == NULL)
        return 0;
    if (READY(name) < 0)
        return -1;
    if (PyUnicode_KIND(name) == PyUnicode_1BYTE_KIND && lookups_complete(lookups) < 0)
        return -1;
    PyObject *column = PyDict_GetItemWithError(lookups->column_of, name); /* borrowed */
    if (column == NULL)
        return PyErr_Occurred() ? -1 : record_column(name, lookups, -1);
    int64_t value = PyLong_AsLongLong(column);
    if (value == -1 && PyErr_Occurred())
        return -1;
    return record_column(name, lookups, value);
}

/* ---- NameIndex: the vocabulary's one-byte names -> column, mirrored in C ------------------------
 *
 * The index mirrors a list `by_column` (by_column[c] is column c's name) that only grows while it
 * is the same object: a call first indexes the names appended since the last one, and starts over
 * for another list or a shorter one. Names stored more than one byte per character are left out;
 * this module never makes them, so a name it makes that the index lacks is in no column. */

#define SPARE_TABLE_BYTES ((size_t)64 << 20) /* about 1.5 million absent names */

typedef struct {
    PyObject_HEAD
    PyObject *bound; /* the list mirrored (held), or NULL */
    Py_ssize_t synced; /* bound[:synced] is indexed */
    NameTable table;
    int busy; /* a call is using it (another thread may call while a callback runs) */
    /* kept from the last call of its view for the next (fresh memory costs a page fault a page):
     * its table of the batch's absent names, emptied (up to SPARE_TABLE_BYTES), and how many
     * names it looked up */
    NameTable spare_fresh;
    Py_ssize_t names_hint, unknown_hint, unknown_bytes_hint;
} NameIndex;

/* Records the column of a one-byte name (its `bytes`, hashed) found in the index, else its rank
 * as an absent name; `name`, its str, may be NULL (record_absent). */
static int
record_indexed(NameIndex *index, Lookups *lookups, PyObject *name, const char *bytes, Py_ssize_t len,
               uint64_t hash)
{
    int64_t column = table_find(&index->table, bytes, len, hash);
    return column >= 0 ? record_column(NULL, lookups, column) : record_absent(lookups, name, bytes, len, hash);
}

static void
index_clear(NameIndex *index)
{
    Py_CLEAR(index->bound);
    table_clear(&index->table);
    index->synced = 0;
}

/* Brings the index in step with `by_column` (see above). 1: usable, 0: not (too many columns). */
static int
index_sync(NameIndex *index, PyObject *by_column)
{
    Py_ssize_t n = PyList_GET_SIZE(by_column);
    if (index->bound != by_column || n < index->synced) {
        index_clear(index);
        index->bound = Py_NewRef(by_column);
    }
    if (n > INT32_MAX)
        return 0;
    if (n > index->synced && table_reserve(&index->table, n - index->synced) < 0)
        return -1;
    for (Py_ssize_t c = index->synced; c < n; c++) {
        PyObject *name = PyList_GET_ITEM(by_column, c);
        if (!PyUnicode_CheckExact(name) || READY(name) < 0 || PyUnicode_KIND(name) != PyUnicode_1BYTE_KIND) {
            PyErr_Clear();
            continue;
        }
        const char *bytes = (const char *)PyUnicode_1BYTE_DATA(name);
        Py_ssize_t len = PyUnicode_GET_LENGTH(name);
        int added = table_add(&index->table, bytes, len, name_hash(bytes, len), (int32_t)c);
        if (added < 0)
            return -1;
        if (added == 1) { /* (the index then stays as it was before this name: the call fails) */
            index->synced = c;
            PyErr_Format(PyExc_ValueError, "a vocabulary holds the name %R twice (column %zd and an earlier one)",
                         name, c);
            return -1;
        }
    }
    index->synced = n;
    return 1;
}

static void
name_index_dealloc(NameIndex *index)
{
    index_clear(index);
    table_clear(&index->spare_fresh);
    Py_TYPE(index)->tp_free((PyObject *)index);
}

static PyObject *
name_index_len(NameIndex *index, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromSsize_t(index->table.count);
}

static PyMethodDef name_index_methods[] = {
    {"indexed", (PyCFunction)name_index_len, METH_NOARGS, "How many names the index holds."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject NameIndexType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stream_nb.features._native.NameIndex",
    .tp_basicsize = sizeof(NameIndex),
    .tp_dealloc = (destructor)name_index_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "NameIndex(): a vocabulary's names -> columns in C, for featurize (see the module).",
    .tp_new = PyType_GenericNew,
    .tp_methods = name_index_methods,
};

static void
work_free(Work *w)
{
    PyMem_RawFree(w->arena.data);
    PyMem_RawFree(w->padded.data);
    PyMem_RawFree(w->wide.data);
    PyMem_RawFree(w->specials.items);
    PyMem_RawFree(w->wide_padded.data);
    PyMem_RawFree(w->tokens.items);
    PyMem_RawFree(w->domains.items);
    PyMem_RawFree(w->subject_features.items);
    PyMem_RawFree(w->head_tokens.items);
    PyMem_RawFree(w->head_domains.items);
    PyMem_RawFree(w->features.items);
    PyMem_RawFree(w->slots);
    PyMem_RawFree(w->hashes);
    PyMem_RawFree(w->narrowed.data);
    PyMem_RawFree(w->narrowed_names);
    PyMem_RawFree(w->token_slots);
}

/* The scratch buffers of calls that ended, kept for the next ones: memory fresh from the system
 * costs a page fault a page, which for a long text was most of its featurising (3x the time of
 * warm buffers on a text of 768,000 characters). A call takes a set when it starts and gives it
 * back when it ends, both with the GIL held; a call that finds none (others hold them) makes its
 * own. SPARE_SETS are kept, one for each thread that featurises at once (the learner's and its
 * helper's: with one set, one of them met fresh memory every batch), each of at most
 * SPARE_BYTES, else it is freed. */
#define SPARE_SETS 2
static Work spares[SPARE_SETS];
static int spares_held;
#define SPARE_BYTES ((size_t)64 << 20)

/* The buffers' sizes in bytes, of those kept. */
static size_t
work_bytes(const Work *w)
{
    return (size_t)(w->arena.cap + w->padded.cap) + sizeof(Py_UCS4) * (size_t)(w->wide.cap + w->wide_padded.cap) +
           sizeof(Span) * (size_t)(w->tokens.cap + w->domains.cap + w->subject_features.cap + w->features.cap +
                                   w->head_tokens.cap + w->head_domains.cap) +
           sizeof(Special) * (size_t)w->specials.cap +
           sizeof(Py_ssize_t) * (size_t)(w->n_slots + w->token_slots_cap) + sizeof(uint64_t) * (size_t)w->hashes_cap +
           (size_t)w->narrowed.cap + sizeof(Narrowed) * (size_t)w->narrowed_names_cap;
}

/* A zeroed Work's buffers: the spare ones when they are there (empty, their room kept). */
static void
work_take_spare(Work *w)
{
    if (spares_held == 0)
        return;
    Work spare = spares[--spares_held];
    w->arena.data = spare.arena.data, w->arena.cap = spare.arena.cap;
    w->padded.data = spare.padded.data, w->padded.cap = spare.padded.cap;
    w->wide.data = spare.wide.data, w->wide.cap = spare.wide.cap;
    w->wide_padded.data = spare.wide_padded.data, w->wide_padded.cap = spare.wide_padded.cap;
    w->specials.items = spare.specials.items, w->specials.cap = spare.specials.cap;
    w->tokens.items = spare.tokens.items, w->tokens.cap = spare.tokens.cap;
    w->domains.items = spare.domains.items, w->domains.cap = spare.domains.cap;
    w->subject_features.items = spare.subject_features.items, w->subject_features.cap = spare.subject_features.cap;
    w->head_tokens.items = spare.head_tokens.items, w->head_tokens.cap = spare.head_tokens.cap;
    w->head_domains.items = spare.head_domains.items, w->head_domains.cap = spare.head_domains.cap;
    w->features.items = spare.features.items, w->features.cap = spare.features.cap;
    w->slots = spare.slots, w->n_slots = spare.n_slots;
    w->hashes = spare.hashes, w->hashes_cap = spare.hashes_cap;
    w->token_slots = spare.token_slots, w->token_slots_cap = spare.token_slots_cap;
    w->narrowed.data = spare.narrowed.data, w->narrowed.cap = spare.narrowed.cap;
    w->narrowed_names = spare.narrowed_names, w->narrowed_names_cap = spare.narrowed_names_cap;
    memset(&spares[spares_held], 0, sizeof(Work));
}

/* The end of a call: its buffers become the spare ones, or are freed. */
static void
work_end(Work *w)
{
    if (spares_held == SPARE_SETS || work_bytes(w) > SPARE_BYTES) {
        work_free(w);
        return;
    }
    spares[spares_held++] = *w; /* (only the buffers and their room are read of it) */
}

/* ---- Int64s: a list of int64 handed to Python as it is, without a copy --------------------------
 *
 * A writable buffer of native int64 (numpy.frombuffer reads it as a bytearray of them): what a
 * call made, whose copy into a bytearray was a second pass over fresh memory. A large one's
 * block goes back to the pool below when Python frees it. */

typedef struct {
    PyObject_HEAD
    int64_t *items; /* PyMem_Raw's, owned; NULL when empty */
    Py_ssize_t len, cap;
} Int64s;

/* ---- the pool of the large blocks the calls hand to Python as Int64s -----------------------------
 *
 * A batch's columns and ranks (8 MB for a million names) were fresh memory at every call, a page
 * fault a page: an Int64s freed gives its block back here, and the next call's lists take it
 * (the smallest that fits), its pages already there. Blocks of fewer than POOL_MIN_ITEMS are not
 * kept; at most POOL_BLOCKS blocks and POOL_BYTES in all are (the smallest go first). The GIL
 * guards the pool: blocks are taken and given back with it held. */

#define POOL_BLOCKS 8
#define POOL_MIN_ITEMS ((Py_ssize_t)1 << 14)
#define POOL_BYTES ((size_t)128 << 20)

typedef struct {
    int64_t *items;
    Py_ssize_t cap;
} Block;

static Block pool[POOL_BLOCKS];
static int pool_count;
static size_t pool_bytes;

static void
pool_remove(int at)
{
    pool_bytes -= (size_t)pool[at].cap * sizeof(int64_t);
    pool[at] = pool[--pool_count];
}

/* Gives a block (room for `cap` int64) back to the pool, or frees it. */
static void
pool_give(int64_t *items, Py_ssize_t cap)
{
    size_t bytes = (size_t)cap * sizeof(int64_t);
    if (items == NULL || cap < POOL_MIN_ITEMS || bytes > POOL_BYTES) {
        PyMem_RawFree(items);
        return;
    }
    while (pool_count == POOL_BLOCKS || pool_bytes + bytes > POOL_BYTES) {
        int smallest = 0;
        for (int i = 1; i < pool_count; i++)
            if (pool[i].cap < pool[smallest].cap)
                smallest = i;
        if (pool[smallest].cap >= cap) { /* (this block is the smallest: it goes) */
            PyMem_RawFree(items);
            return;
        }
        PyMem_RawFree(pool[smallest].items);
        pool_remove(smallest);
    }
    pool[pool_count].items = items;
    pool[pool_count].cap = cap;
    pool_count++;
    pool_bytes += bytes;
}

/* Room for `room` items in an empty list: a block of the pool when one fits, else grown. */
static int
int_list_reserve(IntList *list, Py_ssize_t room)
{
    if (list->items == NULL && room >= POOL_MIN_ITEMS) {
        int best = -1;
        for (int i = 0; i < pool_count; i++)
            if (pool[i].cap >= room && (best < 0 || pool[i].cap < pool[best].cap))
                best = i;
        if (best >= 0) {
            list->items = pool[best].items;
            list->cap = pool[best].cap;
            pool_remove(best);
            return 0;
        }
    }
    return grow((void **)&list->items, &list->cap, room, sizeof(int64_t));
}

static void
int64s_dealloc(Int64s *self)
{
    pool_give(self->items, self->cap);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
int64s_getbuffer(Int64s *self, Py_buffer *view, int flags)
{
    static int64_t none[1];
    return PyBuffer_FillInfo(view, (PyObject *)self, self->items ? (void *)self->items : (void *)none,
                             self->len * (Py_ssize_t)sizeof(int64_t), 0, flags);
}

static Py_ssize_t
int64s_length(Int64s *self)
{
    return self->len;
}

static PyObject *
int64s_repr(Int64s *self)
{
    return PyUnicode_FromFormat("<Int64s of %zd>", self->len);
}

static PyBufferProcs int64s_as_buffer = {.bf_getbuffer = (getbufferproc)int64s_getbuffer};
static PySequenceMethods int64s_as_sequence = {.sq_length = (lenfunc)int64s_length};

static PyTypeObject Int64sType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stream_nb.features._native.Int64s",
    .tp_basicsize = sizeof(Int64s),
    .tp_dealloc = (destructor)int64s_dealloc,
    .tp_repr = (reprfunc)int64s_repr,
    .tp_as_buffer = &int64s_as_buffer,
    .tp_as_sequence = &int64s_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "int64 values made by a call, as a writable buffer of native int64 (numpy.frombuffer); "
              "len() is their number.",
};

/* The list's items as an Int64s, which takes them, its room with them (the list is left empty). */
static PyObject *
int_list_give(IntList *list)
{
    Int64s *made = PyObject_New(Int64s, &Int64sType);
    if (made == NULL)
        return NULL;
    made->items = list->items;
    made->len = list->len;
    made->cap = list->cap;
    list->items = NULL;
    list->len = list->cap = 0;
    return (PyObject *)made;
}

/* (an IntList that no Int64s took: its block goes to the pool too) */
static void
int_list_drop(IntList *list)
{
    pool_give(list->items, list->cap);
    list->items = NULL;
    list->len = list->cap = 0;
}

/* Whether the name of `len` bytes at `bytes`, whose name_hash is `hash`, is one of w->features
 * as `deduplicate_spans(w, base, unit)` left them (its table indexes them when there are two
 * or more): spans of `base` in units of `unit` bytes. */
static int
among_spans(const Work *w, const char *base, Py_ssize_t unit, const char *bytes, Py_ssize_t len, uint64_t hash)
{
    const Span *items = w->features.items;
    if (w->features.len < 2) { /* deduplicate built no table */
        return w->features.len == 1 && unit * items[0].len == len && same_bytes(base + unit * items[0].start, bytes, len);
    }
    size_t mask = (size_t)(w->slots_used - 1);
    for (size_t slot = (size_t)hash & mask; w->slots[slot]; slot = (slot + 1) & mask) {
        Py_ssize_t i = w->slots[slot] - 1;
        if (w->hashes[i] == hash && unit * items[i].len == len && same_bytes(base + unit * items[i].start, bytes, len))
            return 1;
    }
    return 0;
}

/* Whether the one-byte name (bytes, len) with name_hash `hash` is one of w->features, as
 * `deduplicate` left them. */
static int
among_features(const Work *w, const char *bytes, Py_ssize_t len, uint64_t hash)
{
    return among_spans(w, w->arena.data, 1, bytes, len, hash);
}

/* Whether the str `name` is one of w->features as the wide path's `deduplicate_spans` left
 * them (code points of w->wide): its code points are compared, in w->wide_padded. 1, 0 or -1. */
static int
among_wide_features(Work *w, PyObject *name)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(name);
    if (grow((void **)&w->wide_padded.data, &w->wide_padded.cap, n + 1, sizeof(Py_UCS4)) < 0 ||
        PyUnicode_AsUCS4(name, w->wide_padded.data, n + 1, 0) == NULL)
        return -1;
    const char *points = (const char *)w->wide_padded.data;
    Py_ssize_t size = n * (Py_ssize_t)sizeof(Py_UCS4);
    return among_spans(w, (const char *)w->wide.data, sizeof(Py_UCS4), points, size, name_hash(points, size));
}

/* Where a text's own names are, for `emit_extra`'s check: a Python sequence or set (`own`),
 * w->features of the arena (deduplicate's table), or w->features of the wide arena. */
enum { OWN_LISTED = 0, OWN_NATIVE = 1, OWN_WIDE = 2 };

/* One of a text's extra names (see `emit_extra`). 0: done, -1: an error. */
static int
emit_one_extra(PyObject *name, Work *w, int own_native, PyObject *own, int check, NameIndex *index,
               PyObject *names, Lookups *lookups, int *shared)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "an extra name must be a str, got %s", Py_TYPE(name)->tp_name);
        return -1;
    }
    if (READY(name) < 0)
        return -1;
    int one_byte = PyUnicode_KIND(name) == PyUnicode_1BYTE_KIND;
    const char *bytes = one_byte ? (const char *)PyUnicode_1BYTE_DATA(name) : NULL;
    Py_ssize_t len = one_byte ? PyUnicode_GET_LENGTH(name) : 0;
    uint64_t hash = one_byte ? name_hash(bytes, len) : 0;
    if (check && !*shared) {
        if (own_native == OWN_WIDE) {
            int found = among_wide_features(w, name);
            if (found < 0)
                return -1;
            *shared = found;
        }
        else if (own_native == OWN_NATIVE) /* the names made here are one byte a character: a wider str equals none */
            *shared = one_byte && among_features(w, bytes, len, hash);
        else {
            int found = PySequence_Contains(own, name);
            if (found < 0)
                return -1;
            *shared = found;
        }
    }
    if (index != NULL && one_byte && PyUnicode_CheckExact(name))
        return record_indexed(index, lookups, name, bytes, len, hash);
    return emit(name, names, lookups);
}

/* A text's extra names (`featurize`'s `extra`), appended after its own: each looked up as the
 * text's names are (in the index for an exact one-byte str, else through `emit`). With `check`
 * (a binary plan), *shared is set when one of them is among the text's own names: `own_native`
 * says where those are (OWN_*; with OWN_LISTED, in the sequence or set `own`). Returns how many
 * names were appended, -1 on error. */
static Py_ssize_t
emit_extra(PyObject *extra, Work *w, int own_native, PyObject *own, int check, NameIndex *index,
           PyObject *names, Lookups *lookups, int *shared)
{
    if (!PyList_Check(extra) && !PyTuple_Check(extra)) {
        PyErr_Format(PyExc_TypeError, "each text's extra names must be a list or tuple of str, got %s",
                     Py_TYPE(extra)->tp_name);
        return -1;
    }
    /* extra is held by the caller; an item is held while used (a str subclass's __eq__ may run) */
    Py_ssize_t count = 0;
    for (; count < PySequence_Fast_GET_SIZE(extra); count++) {
        PyObject *name = Py_NewRef(PySequence_Fast_GET_ITEM(extra, count));
        int failed = emit_one_extra(name, w, own_native, own, check, index, names, lookups, shared);
        Py_DECREF(name);
        if (failed)
            return -1;
    }
    return count;
}

/* Reads a plan (TextFeaturizer._native_plan) into what it says of reading tokens (w's tables,
 * subject, max_tokens, emails, urls, url_domains) and of the features made of them (`g`). */
static int
parse_plan(PyObject *plan, Work *w, Grams *g)
{
    if (!PyTuple_Check(plan)) {
        PyErr_Format(PyExc_TypeError, "a plan must be a tuple (TextFeaturizer._native_plan), got %s",
                     Py_TYPE(plan)->tp_name);
        return -1;
    }
    const char *lower, *classes;
    Py_ssize_t lower_len, classes_len, max_tokens;
    if (!PyArg_ParseTuple(plan, "y#y#pppnpppnnn:plan", &lower, &lower_len, &classes, &classes_len, &g->bigrams,
                          &g->binary, &w->subject, &max_tokens, &w->emails, &w->urls, &w->url_domains,
                          &g->osb_window, &g->char_min, &g->char_max))
        return -1;
    if (g->osb_window < 0 || g->char_min < 0 || (g->char_min > 0 && g->char_max < g->char_min)) {
        PyErr_SetString(PyExc_ValueError, "the plan's osb_window (0: none) and character n-gram range "
                                          "(0, 0: none; else 1 <= min <= max) are out of range");
        return -1;
    }
    if (lower_len != 256 || classes_len != 256) {
        PyErr_SetString(PyExc_ValueError, "the plan's tables must have 256 bytes each");
        return -1;
    }
    w->lower = (const unsigned char *)lower;
    w->classes = (const unsigned char *)classes;
    w->max_tokens = max_tokens < 0 ? -1 : max_tokens;
    return 0;
}

/* Whether two plans read the same tokens of every text (see `parse_plan`). */
static int
same_tokens(const Work *a, const Work *b)
{
    return memcmp(a->lower, b->lower, 256) == 0 && memcmp(a->classes, b->classes, 256) == 0 &&
           a->subject == b->subject && a->emails == b->emails && a->urls == b->urls &&
           a->url_domains == b->url_domains && a->max_tokens == b->max_tokens;
}

static int
check_extra(PyObject *extra, PyObject *texts)
{
    if (extra != Py_None && !(PyList_CheckExact(extra) && PyList_GET_SIZE(extra) == PyList_GET_SIZE(texts))) {
        PyErr_SetString(PyExc_TypeError, "extra must be None or a list of one sequence of names per text");
        return -1;
    }
    return 0;
}

/* One view of a call: what its plan makes of the tokens, its look-ups and what it returns. A
 * zeroed View may be closed. */
typedef struct {
    Grams g;
    PyObject *fallback; /* borrowed: the Python feature list, for a str subclass */
    NameIndex *index;   /* NULL: the names are made (and looked up in the dict, if any) */
    PyObject *names;    /* the names made; NULL with the index */
    Lookups lookups;
    IntList lengths;
    int number_unknown;
    int shared; /* a text's extra names met its own (binary): the batch's names may repeat */
} View;

/* The code points of the strs of `texts` (a list). */
static Py_ssize_t
texts_points(PyObject *texts)
{
    Py_ssize_t points = 0;
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(texts); t++) {
        PyObject *text = PyList_GET_ITEM(texts, t);
        if (PyUnicode_Check(text) && PyUnicode_IS_READY(text) && points < PY_SSIZE_T_MAX - PyUnicode_GET_LENGTH(text))
            points += PyUnicode_GET_LENGTH(text);
    }
    return points;
}

/* Room in a view's lists for as many names as its index's last call looked up, and an eighth
 * more (or, at a first call, two a code point of the texts, `text_points`, up to 2^24: a view of
 * words and character n-grams has more names than code points; room not written to costs no
 * memory), so that they are not grown by doubling, each step a copy into
 * fresh memory (a page fault a page); the absent names' list likewise. */
static int
view_reserve(View *view, Py_ssize_t text_points)
{
    NameIndex *index = view->index;
    Py_ssize_t room = index->names_hint ? index->names_hint + index->names_hint / 8
                                        : (text_points < ((Py_ssize_t)1 << 23) ? 2 * text_points : (Py_ssize_t)1 << 24);
    if (int_list_reserve(&view->lookups.columns, room) < 0 || int_list_reserve(&view->lookups.ranks, room) < 0)
        return -1;
    NewNames *unknown = view->lookups.unknown;
    if (unknown == NULL)
        return 0;
    if (grow((void **)&unknown->entries, &unknown->cap, index->unknown_hint + index->unknown_hint / 8,
             sizeof(*unknown->entries)) < 0 ||
        grow((void **)&unknown->bytes.data, &unknown->bytes.cap,
             index->unknown_bytes_hint + index->unknown_bytes_hint / 8, 1) < 0)
        return -1;
    return 0;
}

/* `featurize`'s look-up arguments, checked, into `view`; the index is taken (busy) when usable.
 * `text_points`: the texts' code points (view_reserve). */
static int
view_open(View *view, PyObject *column_of, int number_unknown, PyObject *index_arg, PyObject *by_column,
          Py_ssize_t text_points)
{
    PyObject *complete = NULL;
    if (column_of == Py_None)
        column_of = NULL;
    else if (PyTuple_Check(column_of) && PyTuple_GET_SIZE(column_of) == 2 &&
             PyDict_Check(PyTuple_GET_ITEM(column_of, 0)) && PyCallable_Check(PyTuple_GET_ITEM(column_of, 1))) {
        complete = PyTuple_GET_ITEM(column_of, 1);
        column_of = PyTuple_GET_ITEM(column_of, 0);
    }
    else if (!PyDict_Check(column_of)) {
        PyErr_SetString(PyExc_TypeError, "column_of must be a dict, (a dict that may lag, what completes it) or None");
        return -1;
    }
    if ((index_arg != Py_None && !PyObject_TypeCheck(index_arg, &NameIndexType)) ||
        (by_column != Py_None && !PyList_CheckExact(by_column)) || ((index_arg == Py_None) != (by_column == Py_None))) {
        PyErr_SetString(PyExc_TypeError, "index must be a NameIndex and by_column a list, both or neither");
        return -1;
    }
    /* the index serves one view of one call at a time; a view that finds it busy looks names up in the dict */
    if (column_of != NULL && index_arg != Py_None && !((NameIndex *)index_arg)->busy) {
        int usable = index_sync((NameIndex *)index_arg, by_column);
        if (usable < 0)
            return -1;
        if (usable) {
            NameIndex *index = (NameIndex *)index_arg;
            view->index = index;
            index->busy = 1;
            view->lookups.fresh = index->spare_fresh;
            memset(&index->spare_fresh, 0, sizeof(NameTable));
            table_empty(&view->lookups.fresh);
        }
    }
    if (view->index != NULL)
        number_unknown = 1; /* names are not listed: an absent name is known by its rank only */
    view->number_unknown = number_unknown;
    view->lookups.column_of = column_of;
    view->lookups.complete = complete;
    if (column_of != NULL && view->index == NULL && lookups_complete(&view->lookups) < 0)
        return -1; /* (every name is looked up in the dict) */
    if (view->index == NULL && (view->names = PyList_New(0)) == NULL)
        return -1;
    if (column_of != NULL && number_unknown &&
        ((view->lookups.unknown = new_names_create(NULL)) == NULL || (view->lookups.fresh_others = PyDict_New()) == NULL))
        return -1;
    return view->index != NULL ? view_reserve(view, text_points) : 0;
}

static void
view_close(View *view)
{
    if (view->index != NULL) {
        view->index->busy = 0;
        table_clear(&view->index->spare_fresh);
        if (table_bytes(&view->lookups.fresh) <= SPARE_TABLE_BYTES) { /* (a larger one is freed) */
            view->index->spare_fresh = view->lookups.fresh;
            memset(&view->lookups.fresh, 0, sizeof(NameTable));
        }
    }
    Py_XDECREF(view->names);
    Py_XDECREF(view->lookups.unknown);
    Py_XDECREF(view->lookups.fresh_others);
    table_clear(&view->lookups.fresh);
    PyMem_RawFree(view->lengths.items);
    int_list_drop(&view->lookups.columns);
    int_list_drop(&view->lookups.ranks);
}

/* emit of a name just made (a new reference, or NULL when making it failed), released after. */
static int
emit_made(PyObject *made, View *view)
{
    int failed = made == NULL || emit(made, view->names, &view->lookups) < 0;
    Py_XDECREF(made);
    return failed ? -1 : 0;
}

/* After a text's own names (w->features, made where `own_native` says: OWN_*), its extra names,
 * then the count of both. */
static int
view_extra_and_length(View *view, Work *w, PyObject *text_extra, int own_native)
{
    Py_ssize_t added = 0;
    if (text_extra != NULL)
        added = emit_extra(text_extra, w, own_native, NULL, view->g.binary, view->index, view->names,
                           &view->lookups, &view->shared);
    return added < 0 || int_push(&view->lengths, w->features.len + added) < 0 ? FAILED : DONE;
}

/* A plain text's extra names (`plain_run`: a tuple of exact one-byte strs, held by the caller),
 * as `emit_extra` takes them for a view with an index, without touching a reference count.
 * Returns how many, -1 on error. */
static Py_ssize_t
emit_plain_extra(PyObject *extra, Work *w, View *view)
{
    Py_ssize_t count = PyTuple_GET_SIZE(extra);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name = PyTuple_GET_ITEM(extra, i);
        const char *bytes = (const char *)PyUnicode_1BYTE_DATA(name);
        Py_ssize_t len = PyUnicode_GET_LENGTH(name);
        uint64_t hash = name_hash(bytes, len);
        if (view->g.binary && !view->shared)
            view->shared = among_features(w, bytes, len, hash);
        if (record_indexed(view->index, &view->lookups, NULL, bytes, len, hash) < 0)
            return -1;
    }
    return count;
}

/* The view's names of a text from w->features (as `text_grams` made them by the view's grams),
 * then its extra names: `plain`, those of a plain text (`emit_plain_extra`), else any. */
static int
view_native(View *view, Work *w, PyObject *text_extra, int plain)
{
    if (view->g.binary && deduplicate(w) < 0)
        return FAILED;
    NameIndex *index = view->index;
    if (index != NULL) {
        /* every slot asked for first, so that the text's cache misses overlap */
        if (!view->g.binary && hash_features(w) < 0) /* (deduplicate hashed them) */
            return FAILED;
        for (Py_ssize_t i = 0; i < w->features.len; i++)
            table_prefetch(&index->table, w->hashes[i]);
        /* and where an absent name's rank would be found (a miss there cost as much again) */
        if (view->lookups.unknown != NULL)
            for (Py_ssize_t i = 0; i < w->features.len; i++)
                table_prefetch(&view->lookups.fresh, w->hashes[i]);
    }
    for (Py_ssize_t i = 0; i < w->features.len; i++) {
        Span feature = w->features.items[i];
        const char *bytes = w->arena.data + feature.start;
        /* by_column[column], or unknown[rank]: no str made for a known name */
        if (index != NULL ? record_indexed(index, &view->lookups, NULL, bytes, feature.len, w->hashes[i]) < 0
                          : emit_made(PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, bytes, feature.len), view) < 0)
            return FAILED;
    }
    if (plain) {
        Py_ssize_t added = text_extra != NULL ? emit_plain_extra(text_extra, w, view) : 0;
        return added < 0 || int_push(&view->lengths, w->features.len + added) < 0 ? FAILED : DONE;
    }
    return view_extra_and_length(view, w, text_extra, OWN_NATIVE);
}

/* The view's names of a wide text from w->features (as `wide_text_grams` made them: spans of
 * w->wide), then its extra names; for a view with an index, whose names are not listed. A name
 * whose code points are all below 256 is the one-byte str of those bytes: looked up in the
 * index as `view_native` looks up its own, without making the str; any other in the dict, by
 * its str (the index holds no such name). Every one-byte name is narrowed and hashed first and
 * its slots asked for, so that the text's cache misses overlap, as in `view_native`. */
static int
view_wide(View *view, Work *w, PyObject *text_extra)
{
    if (view->g.binary && deduplicate_spans(w, (const char *)w->wide.data, sizeof(Py_UCS4)) < 0)
        return FAILED;
    NameIndex *index = view->index;
    Py_ssize_t count = w->features.len, total = 0;
    for (Py_ssize_t i = 0; i < count; i++) /* (each span lies in w->wide: no overflow before the allocator refuses) */
        total += w->features.items[i].len;
    if (grow((void **)&w->narrowed.data, &w->narrowed.cap, total, 1) < 0 ||
        grow((void **)&w->narrowed_names, &w->narrowed_names_cap, count, sizeof(Narrowed)) < 0)
        return FAILED;
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Span feature = w->features.items[i];
        const Py_UCS4 *points = w->wide.data + feature.start;
        char *bytes = w->narrowed.data + at;
        Py_UCS4 bits = 0; /* every code point's bits: below 256 when each one is */
        for (Py_ssize_t k = 0; k < feature.len; k++) {
            bits |= points[k];
            bytes[k] = (char)points[k];
        }
        Narrowed *name = &w->narrowed_names[i];
        if (bits > 0xFF) {
            name->at = -1;
            continue;
        }
        name->at = at;
        name->hash = name_hash(bytes, feature.len);
        table_prefetch(&index->table, name->hash);
        if (view->lookups.unknown != NULL)
            table_prefetch(&view->lookups.fresh, name->hash);
        at += feature.len;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Span feature = w->features.items[i];
        Narrowed name = w->narrowed_names[i];
        if (name.at < 0) {
            if (emit_made(PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, w->wide.data + feature.start, feature.len),
                          view) < 0)
                return FAILED;
            continue;
        }
        if (record_indexed(index, &view->lookups, NULL, w->narrowed.data + name.at, feature.len, name.hash) < 0)
            return FAILED;
    }
    return view_extra_and_length(view, w, text_extra, OWN_WIDE);
}

/* The view's names of a text from `listed` (a new reference, or NULL for a failure: a feature
 * list made by the wide path or the fallback), then its extra names. `listed_set` (a new
 * reference, or NULL) is a set of the names of `listed`: an extra name is looked for in it, by
 * hash, rather than along the list (a wide text has thousands of names, a mail a dozen extra). */
static int
view_listed(View *view, Work *w, PyObject *listed, PyObject *listed_set, PyObject *text_extra)
{
    PyObject *features = listed ? PySequence_Fast(listed, "the fallback feature list must be a sequence") : NULL;
    Py_XDECREF(listed);
    if (features == NULL) {
        Py_XDECREF(listed_set);
        return FAILED;
    }
    int outcome = DONE;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(features); i++) {
        if (emit(PySequence_Fast_GET_ITEM(features, i), view->names, &view->lookups) < 0) {
            outcome = FAILED;
            break;
        }
    }
    Py_ssize_t added = 0;
    if (outcome == DONE && text_extra != NULL)
        added = emit_extra(text_extra, w, OWN_LISTED, listed_set ? listed_set : features, view->g.binary, view->index,
                           view->names, &view->lookups, &view->shared);
    if (outcome == DONE && (added < 0 || int_push(&view->lengths, PySequence_Fast_GET_SIZE(features) + added) < 0))
        outcome = FAILED;
    Py_DECREF(features);
    Py_XDECREF(listed_set);
    return outcome;
}

/* (names, lengths, columns, ranks, unknown, distinct): what `featurize` returns of the view. */
static PyObject *
view_result(View *view)
{
    if (view->index != NULL) {
        NewNames *unknown = view->lookups.unknown;
        view->index->names_hint = view->lookups.columns.len;
        view->index->unknown_hint = unknown ? unknown->len : 0;
        view->index->unknown_bytes_hint = unknown && unknown->len ? unknown->entries[unknown->len - 1].end : 0;
    }
    PyObject *length_bytes = int_list_give(&view->lengths);
    PyObject *column_bytes = NULL, *rank_bytes = NULL, *unknown = NULL, *result = NULL;
    if (view->lookups.column_of != NULL) {
        column_bytes = int_list_give(&view->lookups.columns);
        if (view->number_unknown) {
            rank_bytes = int_list_give(&view->lookups.ranks);
            unknown = Py_NewRef((PyObject *)view->lookups.unknown);
        }
        else {
            rank_bytes = Py_NewRef(Py_None);
            unknown = Py_NewRef(Py_None);
        }
    }
    else {
        column_bytes = Py_NewRef(Py_None);
        rank_bytes = Py_NewRef(Py_None);
        unknown = Py_NewRef(Py_None);
    }
    if (length_bytes != NULL && column_bytes != NULL && rank_bytes != NULL && unknown != NULL)
        result = Py_BuildValue("(OOOOOO)", view->names ? view->names : Py_None, length_bytes, column_bytes, rank_bytes,
                               unknown, view->g.binary && !view->shared ? Py_True : Py_False);
    Py_XDECREF(length_bytes);
    Py_XDECREF(column_bytes);
    Py_XDECREF(rank_bytes);
    Py_XDECREF(unknown);
    return result;
}

/* Text t of `texts` read (lowered, tokenised) and each of the k views' names made of its tokens,
 * with the GIL held: any text, any extra names. */
static int
featurize_one(Work *w, PyObject *texts, PyObject *extra, View *views, Py_ssize_t k, Py_ssize_t t)
{
    /* texts is held by the caller; an item is held while used (a callback may change the list) */
    {
        PyObject *text = PyList_GET_ITEM(texts, t);
        Py_INCREF(text);
        if (!PyUnicode_Check(text)) {
            PyErr_Format(PyExc_TypeError, "TextFeaturizer expects a str, got %s", Py_TYPE(text)->tp_name);
            Py_DECREF(text);
            return -1;
        }
        PyObject *text_extra = NULL; /* held while used, as the text is */
        if (extra != Py_None) {
            if (t >= PyList_GET_SIZE(extra)) {
                PyErr_SetString(PyExc_RuntimeError, "featurize: the list of extra names changed during the call");
                Py_DECREF(text);
                return -1;
            }
            text_extra = Py_NewRef(PyList_GET_ITEM(extra, t));
        }
        int exact = PyUnicode_CheckExact(text);
        int outcome = exact ? text_tokens(w, text) : FALL_BACK;
        for (Py_ssize_t v = 0; outcome == DONE && v < k; v++) {
            w->g = views[v].g;
            outcome = text_grams(w);
            if (outcome == DONE)
                outcome = view_native(&views[v], w, text_extra, 0);
        }
        if (outcome == FALL_BACK) {
            /* a str subclass goes to each view's Python definition (it may override what that
             * calls); any other text the path above does not take, to the wide path */
            outcome = exact && wide_text_tokens(w, text) < 0 ? FAILED : DONE;
            for (Py_ssize_t v = 0; outcome == DONE && v < k; v++) {
                w->g = views[v].g;
                if (exact && views[v].index != NULL) { /* names looked up, not listed: no strs */
                    outcome = wide_text_grams(w) < 0 ? FAILED : view_wide(&views[v], w, text_extra);
                    continue;
                }
                PyObject *listed_set = NULL;
                PyObject *listed = exact ? wide_text_names(w, &listed_set) : PyObject_CallOneArg(views[v].fallback, text);
                outcome = view_listed(&views[v], w, listed, listed_set, text_extra);
            }
        }
        Py_DECREF(text);
        Py_XDECREF(text_extra);
        if (outcome != DONE)
            return -1;
    }
    return 0;
}

/* Whether `name` is an exact str stored one byte a character (the names `emit_plain_extra` takes). */
static int
plain_name(PyObject *name)
{
    return PyUnicode_CheckExact(name) && READY(name) == 0 && PyUnicode_KIND(name) == PyUnicode_1BYTE_KIND;
}

/* The texts from t on that are plain, featurised without the GIL, so that another thread (one
 * reading the next batch's mail) runs meanwhile; returns how many were done (0 when text t is not
 * plain), -1 on error. Plain: an exact str stored one byte a character, its extra names (if any)
 * a list or tuple of such strs; every view must have an index (names looked up, none made: the
 * caller checks). Each is held, its extra names as a tuple of their own, so nothing another
 * thread does to the lists can reach them; the run stops early at a text the one-byte path does
 * not take (`text_tokens` says FALL_BACK before it changes anything), which the caller reads
 * with the GIL. */
static Py_ssize_t
plain_run(Work *w, PyObject *texts, PyObject *extra, View *views, Py_ssize_t k, Py_ssize_t t)
{
    Py_ssize_t n = PyList_GET_SIZE(texts) - t, count = 0, done = 0;
    PyObject **held = PyMem_RawMalloc((size_t)(n ? n : 1) * 2 * sizeof(PyObject *)); /* text, extra tuple */
    if (held == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int outcome = DONE;
    for (; count < n; count++) {
        PyObject *text = PyList_GET_ITEM(texts, t + count);
        if (!plain_name(text) || (extra != Py_None && t + count >= PyList_GET_SIZE(extra)))
            break;
        PyObject *names = NULL;
        if (extra != Py_None) {
            PyObject *item = PyList_GET_ITEM(extra, t + count);
            if (PyTuple_Check(item))
                names = Py_NewRef(item);
            else if (PyList_Check(item))
                names = PyList_AsTuple(item);
            else
                break;
            if (names == NULL) { /* (its exception set) */
                outcome = FAILED;
                break;
            }
            Py_ssize_t i = 0;
            while (i < PyTuple_GET_SIZE(names) && plain_name(PyTuple_GET_ITEM(names, i)))
                i++;
            if (i < PyTuple_GET_SIZE(names)) {
                Py_DECREF(names);
                break;
            }
        }
        held[2 * count] = Py_NewRef(text);
        held[2 * count + 1] = names;
    }
    if (outcome == DONE && count > 0) {
        Py_BEGIN_ALLOW_THREADS
        detached = 1;
        detached_error = 0;
        for (; done < count; done++) {
            outcome = text_tokens(w, held[2 * done]);
            for (Py_ssize_t v = 0; outcome == DONE && v < k; v++) {
                w->g = views[v].g;
                outcome = text_grams(w);
                if (outcome == DONE)
                    outcome = view_native(&views[v], w, held[2 * done + 1], 1);
            }
            if (outcome != DONE)
                break;
        }
        detached = 0;
        Py_END_ALLOW_THREADS
        if (outcome == FAILED) {
            if (detached_error == DETACHED_TOO_MANY_NAMES)
                PyErr_SetString(PyExc_OverflowError, TOO_MANY_NAMES);
            else
                PyErr_NoMemory();
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_DECREF(held[2 * i]);
        Py_XDECREF(held[2 * i + 1]);
    }
    PyMem_RawFree(held);
    return outcome == FAILED ? -1 : done; /* (FALL_BACK: text t + done is the caller's) */
}

/* Every text of `texts` read once (lowered, tokenised) and each of the k views' names made of
 * its tokens: the loop of `featurize` (k = 1) and `featurize_views`. When every view has an
 * index, stretches of plain texts run without the GIL (`plain_run`); the other texts, or all,
 * with it (`featurize_one`), in order. */
static int
featurize_texts(Work *w, PyObject *texts, PyObject *extra, View *views, Py_ssize_t k)
{
    int detachable = 1;
    for (Py_ssize_t v = 0; v < k; v++)
        detachable = detachable && views[v].index != NULL;
    Py_ssize_t t = 0;
    while (t < PyList_GET_SIZE(texts)) {
        Py_ssize_t done = detachable ? plain_run(w, texts, extra, views, k, t) : 0;
        if (done < 0)
            return -1;
        t += done;
        if (t < PyList_GET_SIZE(texts) && featurize_one(w, texts, extra, views, k, t++) < 0)
            return -1;
    }
    return 0;
}

PyDoc_STRVAR(featurize_doc,
"featurize(texts, plan, spans, fallback, column_of, number_unknown=True, index=None, by_column=None,\n"
"          extra=None) -> (names, lengths, columns, ranks, unknown, distinct)\n\n"
"The feature names of every text of the list `texts`, concatenated, with each text's number of\n"
"names in `lengths` (an Int64s: a buffer of native int64). `plan` is TextFeaturizer._native_plan;\n"
"`spans(segment)` gives the special spans of a lowered wide segment; `fallback(text)` is the Python\n"
"feature list, used for a str subclass (every exact str is made here). With `column_of` (a dict name ->\n"
"column), `columns` holds each name's column, -1 where absent, `ranks` each absent name's rank\n"
"among the distinct absent names by first appearance (-1 for the others), and `unknown` those\n"
"names in rank order (NewNames: a sequence whose strs are made as they are read); without, the\n"
"three are None. number_unknown=False: the columns only (ranks and unknown None), for a batch\n"
"that only predicts. With a NameIndex `index` and\n"
"`by_column` (the vocabulary's names in column order, by_column[column_of[name]] == name, a list\n"
"that only grows), the names made here are looked up in the index, brought in step first, and\n"
"`names` is None: no str is made for a name the index holds. Name i is by_column[columns[i]], or\n"
"unknown[ranks[i]] where the column is -1 (the absent names are numbered whatever number_unknown\n"
"says). A call that cannot use the index (busy, or too many columns) makes every name.\n"
"`extra` (a list of one list or tuple of str per text, or None): each text's extra names, appended\n"
"after its own and looked up as they are (a mail's evidence). `distinct`: the plan is binary and\n"
"no text's extra names meet its own (the extra names are taken to be distinct among themselves).");

static PyObject *
featurize(PyObject *module, PyObject *args)
{
    PyObject *texts, *plan, *spans, *fallback, *column_of, *index_arg = Py_None, *by_column = Py_None, *extra = Py_None;
    int number_unknown = 1;
    if (!PyArg_ParseTuple(args, "O!OOOO|pOOO:featurize", &PyList_Type, &texts, &plan, &spans, &fallback, &column_of,
                          &number_unknown, &index_arg, &by_column, &extra))
        return NULL;
    Work w;
    View view;
    memset(&w, 0, sizeof(w));
    memset(&view, 0, sizeof(view));
    if (parse_plan(plan, &w, &view.g) < 0 || check_extra(extra, texts) < 0)
        return NULL;
    work_take_spare(&w);
    w.spans = spans;
    view.fallback = fallback;
    PyObject *result = NULL;
    if (view_open(&view, column_of, number_unknown, index_arg, by_column, texts_points(texts)) == 0 &&
        featurize_texts(&w, texts, extra, &view, 1) == 0)
        result = view_result(&view);
    view_close(&view);
    work_end(&w);
    return result;
}

PyDoc_STRVAR(featurize_views_doc,
"featurize_views(texts, views, extra=None) -> [(names, lengths, columns, ranks, unknown, distinct), ...]\n\n"
"What `featurize` gives of the same texts (and extra names) for each of several views, in order,\n"
"with each text read once for them all (lowered, its URLs and e-mail addresses found, tokenised)\n"
"and each view's names made of those tokens. `views`: a list of tuples (plan, spans, fallback,\n"
"column_of, number_unknown, index, by_column), featurize's arguments for that view. The plans must\n"
"read tokens alike (the same tables, subject features, max_tokens, URL, e-mail and URL domain\n"
"settings; ValueError otherwise); what they make of the tokens (bigrams, OSB pairs, character\n"
"n-grams, binary) is each view's own. The first view's `spans` serves them all; a str subclass goes\n"
"to each view's `fallback`. A NameIndex given to two views serves the first (the second looks its\n"
"names up in its dict).");

static PyObject *
featurize_views(PyObject *module, PyObject *args)
{
    PyObject *texts, *views_arg, *extra = Py_None;
    if (!PyArg_ParseTuple(args, "O!O!|O:featurize_views", &PyList_Type, &texts, &PyList_Type, &views_arg, &extra) ||
        check_extra(extra, texts) < 0)
        return NULL;
    if (PyList_GET_SIZE(views_arg) == 0) {
        PyErr_SetString(PyExc_ValueError, "featurize_views needs at least one view");
        return NULL;
    }
    /* the view tuples held for the call (they hold what the views borrow): the list may change */
    PyObject *held = PyList_AsTuple(views_arg), *result = NULL;
    if (held == NULL)
        return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(held), opened = 0, points = texts_points(texts);
    View *views = PyMem_RawCalloc((size_t)k, sizeof(View));
    Work w, other;
    memset(&w, 0, sizeof(w));
    work_take_spare(&w);
    if (views == NULL) {
        no_memory();
        goto done;
    }
    for (Py_ssize_t v = 0; v < k; v++) {
        PyObject *view = PyTuple_GET_ITEM(held, v), *plan, *spans, *fallback, *column_of, *index_arg, *by_column;
        int number_unknown;
        if (!PyTuple_Check(view)) {
            PyErr_Format(PyExc_TypeError, "a view must be a tuple (plan, spans, fallback, column_of, number_unknown, "
                                          "index, by_column), got %s", Py_TYPE(view)->tp_name);
            goto done;
        }
        if (!PyArg_ParseTuple(view, "OOOOpOO:view", &plan, &spans, &fallback, &column_of, &number_unknown, &index_arg,
                              &by_column))
            goto done;
        memset(&other, 0, sizeof(other));
        if (parse_plan(plan, v == 0 ? &w : &other, &views[v].g) < 0)
            goto done;
        if (v > 0 && !same_tokens(&w, &other)) {
            PyErr_Format(PyExc_ValueError, "view %zd's plan reads tokens unlike the first's (tables, subject features, "
                                           "max_tokens, URLs, e-mail addresses or URL domains differ)", v);
            goto done;
        }
        if (v == 0)
            w.spans = spans;
        views[v].fallback = fallback;
        opened = v + 1;
        if (view_open(&views[v], column_of, number_unknown, index_arg, by_column, points) < 0)
            goto done;
    }
    if (featurize_texts(&w, texts, extra, views, k) < 0 || (result = PyList_New(k)) == NULL)
        goto done;
    for (Py_ssize_t v = 0; v < k; v++) {
        PyObject *made = view_result(&views[v]);
        if (made == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, v, made);
    }
done:
    for (Py_ssize_t v = 0; v < opened; v++)
        view_close(&views[v]);
    PyMem_RawFree(views);
    work_end(&w);
    Py_DECREF(held);
    return result;
}

/* ---- special_spans: SpecialSpans.find (specials.py) for a one-byte str, without numbers ---------
 *
 * The matches of `(?P<url>URL)|(?P<email>EMAIL)` (specials.py's patterns) in finditer's order,
 * read left to right with each character looked at a bounded number of times: a scheme run, a
 * URL body run and an e-mail's local part are each read once however many starts fall in them.
 * The classes are the re module's for str patterns: \w is a character that is alphanumeric or
 * '_', \s one that is white space (Py_UNICODE_ISALNUM, Py_UNICODE_ISSPACE), over Latin-1. */

enum { SP_WORD = 1, SP_SPACE = 2, SP_SCHEME = 4, SP_BODY = 8, SP_KEPT = 16, SP_LOCAL = 32, SP_DOMAIN = 64 };
static unsigned char span_classes[256];

static void
span_classes_init(void)
{
    for (int c = 0; c < 256; c++) {
        unsigned char k = 0;
        int word = Py_UNICODE_ISALNUM((Py_UCS4)c) || c == '_';
        int space = Py_UNICODE_ISSPACE((Py_UCS4)c);
        if (word)
            k |= SP_WORD;
        if (space)
            k |= SP_SPACE;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' || c == '.' ||
            c == '-')
            k |= SP_SCHEME; /* [a-zA-Z0-9+.\-] */
        if (!space && c != '<' && c != '>' && c != '"' && c != '\'') {
            k |= SP_BODY; /* [^\s<>"'] */
            if (!strchr(".,;:!?)]}", c) || c == 0)
                k |= SP_KEPT; /* [^\s<>"'.,;:!?)\]}] */
        }
        if (word || c == '.' || c == '+' || c == '-')
            k |= SP_LOCAL; /* [\w.+\-] */
        if (word || c == '-')
            k |= SP_DOMAIN; /* [\w\-] */
        span_classes[c] = k;
    }
}

/* Where a URL body `[^\s<>"']*[^\s<>"'.,;:!?)\]}]` that starts at `start` ends, -1 for none.
 * Every start in one run of body characters ends at the run's last kept character: the run is
 * read once (memo: [from, run_end) read, kept_end its answer). */
typedef struct {
    Py_ssize_t from, run_end, kept_end;
} BodyRun;

static Py_ssize_t
url_body_end(const unsigned char *t, Py_ssize_t n, Py_ssize_t start, BodyRun *memo)
{
    if (!(memo->from <= start && start < memo->run_end)) {
        Py_ssize_t k = start, kept = -1;
        while (k < n && (span_classes[t[k]] & SP_BODY)) {
            if (span_classes[t[k]] & SP_KEPT)
                kept = k + 1;
            k++;
        }
        memo->from = start;
        memo->run_end = k;
        memo->kept_end = kept;
    }
    return memo->kept_end > start ? memo->kept_end : -1;
}

/* The end of `[\w\-]+(?:\.[\w\-]+)+` matched at `start` (an e-mail's domain), -1 for none. */
static Py_ssize_t
email_domain_end(const unsigned char *t, Py_ssize_t n, Py_ssize_t start)
{
    Py_ssize_t k = start, end = -1;
    while (k < n && (span_classes[t[k]] & SP_DOMAIN))
        k++;
    if (k == start)
        return -1;
    while (k + 1 < n && t[k] == '.' && (span_classes[t[k + 1]] & SP_DOMAIN)) {
        k += 1;
        while (k < n && (span_classes[t[k]] & SP_DOMAIN))
            k++;
        end = k;
    }
    return end;
}

static int
span_append(PyObject *spans, Py_ssize_t start, Py_ssize_t end, PyObject *kind)
{
    PyObject *item = Py_BuildValue("(nnO)", start, end, kind);
    if (item == NULL)
        return -1;
    int failed = PyList_Append(spans, item);
    Py_DECREF(item);
    return failed;
}

static PyObject *url_kind, *email_kind; /* "url", "email" */

PyDoc_STRVAR(special_spans_doc,
"special_spans(text, urls, emails) -> [(start, end, kind)] or None\n\n"
"SpecialSpans(urls, emails, False).find(text) (specials.py, the definition) for a str stored one\n"
"byte per character; None for any other str (the caller asks the Python code).");

/* The next anchor of a special span at or after `from`, -1 for none: '@' (an e-mail's), "://" (a
 * scheme URL's) and "www." in any case (the other URL's), each found by memchr. */
static Py_ssize_t
next_mail_anchor(const unsigned char *t, Py_ssize_t n, Py_ssize_t from)
{
    const unsigned char *found = from < n ? memchr(t + from, '@', (size_t)(n - from)) : NULL;
    return found ? found - t : -1;
}

static Py_ssize_t
next_scheme_anchor(const unsigned char *t, Py_ssize_t n, Py_ssize_t from)
{
    while (from + 3 <= n) {
        const unsigned char *found = memchr(t + from, ':', (size_t)(n - 2 - from));
        if (found == NULL)
            return -1;
        Py_ssize_t at = found - t;
        if (t[at + 1] == '/' && t[at + 2] == '/')
            return at;
        from = at + 1;
    }
    return -1;
}

static Py_ssize_t
next_www_anchor(const unsigned char *t, Py_ssize_t n, Py_ssize_t from)
{
    Py_ssize_t dot = from + 3; /* "www." is found by its '.' */
    while (dot < n) {
        const unsigned char *found = memchr(t + dot, '.', (size_t)(n - dot));
        if (found == NULL)
            return -1;
        dot = found - t;
        if ((t[dot - 3] | 0x20) == 'w' && (t[dot - 2] | 0x20) == 'w' && (t[dot - 1] | 0x20) == 'w')
            return dot - 3;
        dot++;
    }
    return -1;
}

/* The special spans that start in t[lo .. hi), a run of the text without white space (or a part
 * of one no span crosses into), in order, appended to `out`; `scheme` and `bodies` carry what
 * was read of the text's runs from one call to the next. */
static int
scan_specials_between(const unsigned char *t, Py_ssize_t n, Py_ssize_t lo, Py_ssize_t hi, int urls, int emails,
                      Py_ssize_t scheme[2], BodyRun *bodies, SpecialList *out)
{
    for (Py_ssize_t i = lo; i < hi;) {
        unsigned char c = t[i];
        int after_word = i > 0 && (span_classes[t[i - 1]] & SP_WORD);
        if (urls && !after_word) { /* \b before a letter: the start of a word */
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
                /* `[a-zA-Z][a-zA-Z0-9+.\-]*(?=://)://`: ':' ends a scheme run, so only the run's end may
                 * be followed by "://", and every start in the run shares it */
                if (!(scheme[0] <= i && i < scheme[1])) {
                    Py_ssize_t k = i;
                    while (k < n && (span_classes[t[k]] & SP_SCHEME))
                        k++;
                    scheme[0] = i;
                    scheme[1] = k;
                }
                Py_ssize_t q = scheme[1];
                if (q + 3 <= n && t[q] == ':' && t[q + 1] == '/' && t[q + 2] == '/') {
                    Py_ssize_t end = url_body_end(t, n, q + 3, bodies);
                    if (end >= 0) {
                        if (special_push(out, i, end, 1) < 0)
                            return -1;
                        i = end;
                        continue;
                    }
                }
            }
            if ((c == 'w' || c == 'W') && i + 4 <= n && (t[i + 1] == 'w' || t[i + 1] == 'W') &&
                (t[i + 2] == 'w' || t[i + 2] == 'W') && t[i + 3] == '.') {
                Py_ssize_t end = url_body_end(t, n, i + 4, bodies);
                if (end >= 0) {
                    if (special_push(out, i, end, 1) < 0)
                        return -1;
                    i = end;
                    continue;
                }
            }
        }
        /* `(?<![\w.+\-])[\w.+\-]+@...`: only the first character of a local-part run may start one,
         * and its run must end at '@'; a failed run is passed over whole */
        if (emails && (span_classes[c] & SP_LOCAL) && !(i > 0 && (span_classes[t[i - 1]] & SP_LOCAL))) {
            Py_ssize_t k = i;
            while (k < n && (span_classes[t[k]] & SP_LOCAL))
                k++;
            if (k < n && t[k] == '@') {
                Py_ssize_t end = email_domain_end(t, n, k + 1);
                if (end >= 0) {
                    if (special_push(out, i, end, 0) < 0)
                        return -1;
                    i = end;
                    continue;
                }
            }
        }
        i++;
    }
    return 0;
}

/* The special spans of the one-byte text t[0 .. n), in order, appended to `out` (emptied first).
 * No span crosses white space, and white space looks like the text's ends to every look-around
 * of the patterns (specials.py), and every span holds an anchor ('@', "://", "www."): so only
 * the runs without white space that hold an anchor are read, each from its start, and the text
 * elsewhere only by memchr. */
static int
scan_specials(const unsigned char *t, Py_ssize_t n, int urls, int emails, SpecialList *out)
{
    out->len = 0;
    BodyRun bodies = {0, 0, -1};
    Py_ssize_t scheme[2] = {0, 0}; /* the scheme run read last: [from, end) */
    Py_ssize_t mail = emails ? next_mail_anchor(t, n, 0) : -1;
    Py_ssize_t colon = urls ? next_scheme_anchor(t, n, 0) : -1;
    Py_ssize_t www = urls ? next_www_anchor(t, n, 0) : -1;
    Py_ssize_t searched_to = 0; /* the runs before it are read */
    for (;;) {
        Py_ssize_t at = mail;
        if (colon >= 0 && (at < 0 || colon < at))
            at = colon;
        if (www >= 0 && (at < 0 || www < at))
            at = www;
        if (at < 0)
            return 0;
        Py_ssize_t lo = at, hi = at;
        while (lo > searched_to && !(span_classes[t[lo - 1]] & SP_SPACE))
            lo--;
        while (hi < n && !(span_classes[t[hi]] & SP_SPACE))
            hi++;
        if (scan_specials_between(t, n, lo, hi, urls, emails, scheme, &bodies, out) < 0)
            return -1;
        searched_to = hi;
        if (mail >= 0 && mail < hi)
            mail = next_mail_anchor(t, n, hi);
        if (colon >= 0 && colon < hi)
            colon = next_scheme_anchor(t, n, hi);
        if (www >= 0 && www < hi)
            www = next_www_anchor(t, n, hi);
    }
}

static PyObject *
special_spans(PyObject *module, PyObject *args)
{
    PyObject *text;
    int urls, emails;
    if (!PyArg_ParseTuple(args, "Upp:special_spans", &text, &urls, &emails))
        return NULL;
    if (READY(text) < 0)
        return NULL;
    if (PyUnicode_KIND(text) != PyUnicode_1BYTE_KIND)
        Py_RETURN_NONE;
    SpecialList found = {NULL, 0, 0};
    PyObject *spans = NULL;
    if (scan_specials(PyUnicode_1BYTE_DATA(text), PyUnicode_GET_LENGTH(text), urls, emails, &found) < 0 ||
        (spans = PyList_New(0)) == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < found.len; k++) {
        if (span_append(spans, found.items[k].start, found.items[k].end, found.items[k].is_url ? url_kind : email_kind) < 0) {
            Py_CLEAR(spans);
            break;
        }
    }
done:
    PyMem_RawFree(found.items);
    return spans;
}

/* _name_hash(b): the tables' hash of the bytes b, for the tests of its seed. */
static PyObject *
native_name_hash(PyObject *module, PyObject *arg)
{
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "_name_hash takes bytes");
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(name_hash(PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg)));
}

static PyMethodDef native_methods[] = {
    {"featurize", featurize, METH_VARARGS, featurize_doc},
    {"featurize_views", featurize_views, METH_VARARGS, featurize_views_doc},
    {"special_spans", special_spans, METH_VARARGS, special_spans_doc},
    {"_name_hash", native_name_hash, METH_O, "The tables' (seeded) hash of some bytes; for tests."},
    {NULL, NULL, 0, NULL},
};

static int
native_exec(PyObject *module)
{
    PyObject *os = PyImport_ImportModule("os");
    PyObject *seed = os == NULL ? NULL : PyObject_CallMethod(os, "urandom", "n", (Py_ssize_t)sizeof hash_seed);
    Py_XDECREF(os);
    if (seed == NULL)
        return -1;
    if (!PyBytes_Check(seed) || PyBytes_GET_SIZE(seed) != (Py_ssize_t)sizeof hash_seed) {
        Py_DECREF(seed);
        PyErr_SetString(PyExc_RuntimeError, "os.urandom gave no seed for the name hash");
        return -1;
    }
    memcpy(&hash_seed, PyBytes_AS_STRING(seed), sizeof hash_seed);
    Py_DECREF(seed);
    span_classes_init();
    if (url_kind == NULL && ((url_kind = PyUnicode_InternFromString("url")) == NULL ||
                             (email_kind = PyUnicode_InternFromString("email")) == NULL))
        return -1;
    if (PyType_Ready(&NameIndexType) < 0 || PyType_Ready(&NewNamesType) < 0 || PyType_Ready(&Int64sType) < 0 ||
        PyModule_AddObjectRef(module, "NewNames", (PyObject *)&NewNamesType) < 0)
        return -1;
    return PyModule_AddObjectRef(module, "NameIndex", (PyObject *)&NameIndexType);
}

static PyModuleDef_Slot native_slots[] = {
    {Py_mod_exec, native_exec},
    {0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "stream_nb.features._native",
    .m_doc = "TextFeaturizer's feature lists in C (see text.py; the Python path is the definition).",
    .m_size = 0,
    .m_methods = native_methods,
    .m_slots = native_slots,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModuleDef_Init(&native_module);
}
