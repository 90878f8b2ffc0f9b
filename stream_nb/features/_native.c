/*
 * stream_nb.features._native: TextFeaturizer's feature lists for a batch of texts, in C.
 *
 * The Python code in text.py is the definition; this module computes exactly the same list of
 * feature names for the configurations `TextFeaturizer._native_plan` accepts (token pattern
 * `(?u)\b\w+\b|[£$€]`, lowercase, word unigrams or unigrams and bigrams, optional subject
 * features, URL/e-mail placeholders, max_tokens, binary or not), for texts stored one byte per
 * character (Latin-1, ASCII included), where lowercasing and `\w` are table look-ups. Every
 * other text goes to the Python feature list (`fallback`), and so does a text with a character
 * the tables mark foreign. URL and e-mail spans are found by the Python code (`spans`), called
 * only for a segment that holds an anchor ('@', '://', 'www.'), as the Python path does.
 *
 * With a vocabulary dict (name -> column), each name's column is looked up as the name is
 * made (-1 for a name not in it), saving the model a second pass over the names.
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

/* A growable byte buffer. */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buffer;

/* A feature or token: bytes [start, start + len) of the arena. */
typedef struct {
    Py_ssize_t start, len;
} Span;

typedef struct {
    Span *items;
    Py_ssize_t len, cap;
} SpanList;

/* A growable array of int64 (lengths, columns). */
typedef struct {
    int64_t *items;
    Py_ssize_t len, cap;
} IntList;

/* One call's configuration and scratch space (reused from text to text). */
typedef struct {
    const unsigned char *lower;   /* 256: the lowercase of each Latin-1 code */
    const unsigned char *classes; /* 256: CH_* flags */
    int bigrams, binary, subject, emails, urls;
    Py_ssize_t max_tokens; /* -1: no limit */
    PyObject *spans;       /* lowered segment -> [(start, end, placeholder, domain | None)] */
    Buffer arena;          /* every byte of the current text's lowered segments and features */
    SpanList tokens, domains, subject_features, features;
    Py_ssize_t *slots; /* dedupe table: index + 1 of a feature, 0 for an empty slot */
    Py_ssize_t n_slots;
} Work;

static int
grow(void **items, Py_ssize_t *cap, Py_ssize_t needed, size_t item_size)
{
    if (needed <= *cap)
        return 0;
    Py_ssize_t new_cap = *cap ? *cap : 64;
    while (new_cap < needed) {
        if (new_cap > PY_SSIZE_T_MAX / 2 / (Py_ssize_t)item_size) {
            PyErr_NoMemory();
            return -1;
        }
        new_cap *= 2;
    }
    void *grown = PyMem_Realloc(*items, (size_t)new_cap * item_size);
    if (grown == NULL) {
        PyErr_NoMemory();
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
int_push(IntList *list, int64_t value)
{
    if (grow((void **)&list->items, &list->cap, list->len + 1, sizeof(int64_t)) < 0)
        return -1;
    list->items[list->len++] = value;
    return 0;
}

/* Appends `text`'s bytes to the arena as a span of `list`: a placeholder or a URL domain made
 * by the Python code. FALL_BACK if it is not one byte per character. */
static int
push_python_string(Work *w, PyObject *text, SpanList *list)
{
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "special span placeholders and domains must be str");
        return FAILED;
    }
    if (READY(text) < 0)
        return FAILED;
    if (PyUnicode_KIND(text) != PyUnicode_1BYTE_KIND)
        return FALL_BACK;
    Py_ssize_t start;
    if (arena_append(w, (const char *)PyUnicode_1BYTE_DATA(text), PyUnicode_GET_LENGTH(text), &start) < 0 ||
        span_push(list, start, PyUnicode_GET_LENGTH(text)) < 0)
        return FAILED;
    return DONE;
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

/* `_tokens_with_placeholders` over the lowered segment at arena [base, base + n): the text
 * between the special spans the Python code finds is tokenised on its own, each span becomes
 * its placeholder, and a URL's domain feature goes to w->domains. */
static int
tokens_with_placeholders(Work *w, Py_ssize_t base, Py_ssize_t n)
{
    PyObject *segment = PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, w->arena.data + base, n);
    if (segment == NULL)
        return FAILED;
    PyObject *found = PyObject_CallOneArg(w->spans, segment);
    Py_DECREF(segment);
    if (found == NULL)
        return FAILED;
    PyObject *spans = PySequence_Fast(found, "special spans must be a sequence");
    Py_DECREF(found);
    if (spans == NULL)
        return FAILED;

    int outcome = FAILED;
    Py_ssize_t position = 0;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(spans);
    for (Py_ssize_t k = 0; k < count; k++) {
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
        if (start > position && tokenize(w, base + position, base + start, remaining_tokens(w)) < 0)
            goto done;
        if (w->max_tokens >= 0 && w->tokens.len >= w->max_tokens) {
            outcome = DONE; /* the rest of the segment is beyond the token cap */
            goto done;
        }
        int pushed = push_python_string(w, placeholder, &w->tokens);
        if (pushed == DONE && domain != Py_None)
            pushed = push_python_string(w, domain, &w->domains);
        if (pushed != DONE) {
            outcome = pushed;
            goto done;
        }
        position = end;
    }
    if (remaining_tokens(w) != 0 && tokenize(w, base + position, base + n, remaining_tokens(w)) < 0)
        goto done;
    outcome = DONE;
done:
    Py_DECREF(spans);
    return outcome;
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

/* `all_features_of`: the features of one segment (a text, or a subject line or a body) in
 * order, appended to `out`: tokens, word bigrams, URL domains. */
static int
segment_features(Work *w, const Py_UCS1 *source, Py_ssize_t n, SpanList *out)
{
    Py_ssize_t base;
    if (grow((void **)&w->arena.data, &w->arena.cap, w->arena.len + n, 1) < 0)
        return FAILED;
    base = w->arena.len;
    unsigned char *lowered = (unsigned char *)w->arena.data + base;
    for (Py_ssize_t i = 0; i < n; i++)
        lowered[i] = w->lower[source[i]];
    w->arena.len += n;

    w->tokens.len = 0;
    w->domains.len = 0;
    const char *text = (const char *)lowered;
    int special = (w->emails && memchr(text, '@', (size_t)n) != NULL) ||
                  (w->urls && (find_bytes(text, n, "://", 3) != NULL || find_bytes(text, n, "www.", 4) != NULL));
    if (special) {
        int outcome = tokens_with_placeholders(w, base, n);
        if (outcome != DONE)
            return outcome;
    }
    else if (tokenize(w, base, base + n, w->max_tokens) < 0) {
        return FAILED;
    }

    for (Py_ssize_t i = 0; i < w->tokens.len; i++)
        if (span_push(out, w->tokens.items[i].start, w->tokens.items[i].len) < 0)
            return FAILED;
    if (w->bigrams) {
        for (Py_ssize_t i = 0; i + 1 < w->tokens.len; i++) {
            Span a = w->tokens.items[i], b = w->tokens.items[i + 1];
            Py_ssize_t length = a.len + 1 + b.len;
            if (grow((void **)&w->arena.data, &w->arena.cap, w->arena.len + length, 1) < 0)
                return FAILED;
            char *at = w->arena.data + w->arena.len;
            memcpy(at, w->arena.data + a.start, (size_t)a.len);
            at[a.len] = ' ';
            memcpy(at + a.len + 1, w->arena.data + b.start, (size_t)b.len);
            if (span_push(out, w->arena.len, length) < 0)
                return FAILED;
            w->arena.len += length;
        }
    }
    for (Py_ssize_t i = 0; i < w->domains.len; i++)
        if (span_push(out, w->domains.items[i].start, w->domains.items[i].len) < 0)
            return FAILED;
    return DONE;
}

/* `feature_list` up to deduplication: w->features holds the text's features in order. */
static int
text_features(Work *w, PyObject *text)
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
    w->features.len = 0;

    int has_subject = w->subject && n >= 8;
    for (Py_ssize_t i = 0; has_subject && i < 8; i++)
        has_subject = w->lower[data[i]] == (unsigned char)"subject:"[i];
    if (!has_subject)
        return segment_features(w, data, n, &w->features);

    /* A leading "Subject:" line: its features prefixed, then again as they are, then the body's. */
    const Py_UCS1 *newline = memchr(data, '\n', (size_t)n);
    Py_ssize_t line_end = newline ? newline - data : n;
    Py_ssize_t body = newline ? line_end + 1 : n;
    w->subject_features.len = 0;
    int outcome = segment_features(w, data + 8, line_end - 8, &w->subject_features);
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
    return segment_features(w, data + body, n - body, &w->features);
}

static uint64_t
hash_bytes(const char *bytes, Py_ssize_t n)
{
    uint64_t hash = 1469598103934665603ULL; /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++) {
        hash ^= (unsigned char)bytes[i];
        hash *= 1099511628211ULL;
    }
    return hash ^ (hash >> 29);
}

/* Keeps the first appearance of each feature (`list(dict.fromkeys(features))`), in place. */
static int
deduplicate(Work *w)
{
    Py_ssize_t count = w->features.len;
    if (count < 2)
        return 0;
    Py_ssize_t n_slots = 16;
    while (n_slots < 2 * count)
        n_slots *= 2;
    if (n_slots > w->n_slots) {
        Py_ssize_t *slots = PyMem_Realloc(w->slots, (size_t)n_slots * sizeof(Py_ssize_t));
        if (slots == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        w->slots = slots;
        w->n_slots = n_slots;
    }
    memset(w->slots, 0, (size_t)n_slots * sizeof(Py_ssize_t));
    Span *items = w->features.items;
    const char *arena = w->arena.data;
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Span feature = items[i];
        size_t slot = (size_t)hash_bytes(arena + feature.start, feature.len) & (size_t)(n_slots - 1);
        int seen = 0;
        while (w->slots[slot]) {
            Span other = items[w->slots[slot] - 1];
            if (other.len == feature.len && memcmp(arena + other.start, arena + feature.start, (size_t)feature.len) == 0) {
                seen = 1;
                break;
            }
            slot = (slot + 1) & (size_t)(n_slots - 1);
        }
        if (seen)
            continue;
        items[kept] = feature;
        w->slots[slot] = kept + 1;
        kept++;
    }
    w->features.len = kept;
    return 0;
}

/* What a call returns besides the names: with a vocabulary, each name's column (-1 if absent)
 * and, for an absent one, its rank among the batch's absent names by first appearance (else -1),
 * those names in `unknown` (a dict name -> rank, in rank order). */
typedef struct {
    PyObject *column_of; /* borrowed; NULL: no look-ups */
    PyObject *unknown;
    IntList columns, ranks;
} Lookups;

/* Appends `name` to `names` and, with a vocabulary, its column and rank. */
static int
emit(PyObject *name, PyObject *names, Lookups *lookups)
{
    if (PyList_Append(names, name) < 0)
        return -1;
    if (lookups->column_of == NULL)
        return 0;
    PyObject *column = PyDict_GetItemWithError(lookups->column_of, name); /* borrowed */
    if (column != NULL) {
        int64_t value = PyLong_AsLongLong(column);
        if (value == -1 && PyErr_Occurred())
            return -1;
        return int_push(&lookups->columns, value) < 0 ? -1 : int_push(&lookups->ranks, -1);
    }
    if (PyErr_Occurred())
        return -1;
    if (lookups->unknown == NULL) /* not numbering the absent names */
        return int_push(&lookups->columns, -1);
    int64_t rank;
    PyObject *known_rank = PyDict_GetItemWithError(lookups->unknown, name); /* borrowed */
    if (known_rank != NULL) {
        rank = PyLong_AsLongLong(known_rank);
        if (rank == -1 && PyErr_Occurred())
            return -1;
    }
    else {
        if (PyErr_Occurred())
            return -1;
        rank = PyDict_GET_SIZE(lookups->unknown);
        PyObject *boxed = PyLong_FromLongLong(rank);
        if (boxed == NULL)
            return -1;
        int stored = PyDict_SetItem(lookups->unknown, name, boxed);
        Py_DECREF(boxed);
        if (stored < 0)
            return -1;
    }
    return int_push(&lookups->columns, -1) < 0 ? -1 : int_push(&lookups->ranks, rank);
}

static void
work_free(Work *w)
{
    PyMem_Free(w->arena.data);
    PyMem_Free(w->tokens.items);
    PyMem_Free(w->domains.items);
    PyMem_Free(w->subject_features.items);
    PyMem_Free(w->features.items);
    PyMem_Free(w->slots);
}

static PyObject *
int_list_to_bytearray(const IntList *list)
{
    return PyByteArray_FromStringAndSize(list->items ? (const char *)list->items : "",
                                         list->len * (Py_ssize_t)sizeof(int64_t));
}

PyDoc_STRVAR(featurize_doc,
"featurize(texts, plan, spans, fallback, column_of, number_unknown=True)\n"
"    -> (names, lengths, columns, ranks, unknown)\n\n"
"The feature names of every text of the list `texts`, concatenated, with each text's number of\n"
"names in `lengths` (a bytearray of native int64). `plan` is TextFeaturizer._native_plan;\n"
"`spans(segment)` gives the special spans of a lowered segment; `fallback(text)` is the Python\n"
"feature list, used for the texts this module does not take. With `column_of` (a dict name ->\n"
"column), `columns` holds each name's column, -1 where absent, `ranks` each absent name's rank\n"
"among the distinct absent names by first appearance (-1 for the others), and `unknown` those\n"
"names in rank order (a list); without, the three are None. number_unknown=False: the columns\n"
"only (ranks and unknown None), for a batch that only predicts.");

static PyObject *
featurize(PyObject *module, PyObject *args)
{
    PyObject *texts, *spans, *fallback, *column_of;
    const unsigned char *lower, *classes;
    Py_ssize_t lower_len, classes_len;
    int bigrams, binary, subject, emails, urls, number_unknown = 1;
    Py_ssize_t max_tokens;
    if (!PyArg_ParseTuple(args, "O!(y#y#pppnpp)OOO|p:featurize", &PyList_Type, &texts, &lower, &lower_len,
                          &classes, &classes_len, &bigrams, &binary, &subject, &max_tokens, &emails, &urls,
                          &spans, &fallback, &column_of, &number_unknown))
        return NULL;
    if (lower_len != 256 || classes_len != 256) {
        PyErr_SetString(PyExc_ValueError, "the plan's tables must have 256 bytes each");
        return NULL;
    }
    if (column_of == Py_None)
        column_of = NULL;
    else if (!PyDict_Check(column_of)) {
        PyErr_SetString(PyExc_TypeError, "column_of must be a dict or None");
        return NULL;
    }

    Work w;
    memset(&w, 0, sizeof(w));
    w.lower = lower;
    w.classes = classes;
    w.bigrams = bigrams;
    w.binary = binary;
    w.subject = subject;
    w.emails = emails;
    w.urls = urls;
    w.max_tokens = max_tokens < 0 ? -1 : max_tokens;
    w.spans = spans;

    IntList lengths = {NULL, 0, 0};
    Lookups lookups = {column_of, NULL, {NULL, 0, 0}, {NULL, 0, 0}};
    PyObject *names = PyList_New(0), *result = NULL;
    if (names == NULL)
        goto done;
    if (column_of != NULL && number_unknown && (lookups.unknown = PyDict_New()) == NULL)
        goto done;

    /* texts is held by the caller; an item is held while used (a callback may change the list) */
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(texts); t++) {
        PyObject *text = PyList_GET_ITEM(texts, t);
        Py_INCREF(text);
        if (!PyUnicode_Check(text)) {
            PyErr_Format(PyExc_TypeError, "TextFeaturizer expects a str, got %s", Py_TYPE(text)->tp_name);
            Py_DECREF(text);
            goto done;
        }
        /* a str subclass may override what the Python path calls: it takes those */
        int outcome = PyUnicode_CheckExact(text) ? text_features(&w, text) : FALL_BACK;
        if (outcome == DONE && binary)
            outcome = deduplicate(&w) < 0 ? FAILED : DONE;
        if (outcome == DONE) {
            for (Py_ssize_t i = 0; i < w.features.len; i++) {
                Span feature = w.features.items[i];
                PyObject *name = PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, w.arena.data + feature.start,
                                                           feature.len);
                if (name == NULL || emit(name, names, &lookups) < 0) {
                    Py_XDECREF(name);
                    outcome = FAILED;
                    break;
                }
                Py_DECREF(name);
            }
            if (outcome == DONE && int_push(&lengths, w.features.len) < 0)
                outcome = FAILED;
        }
        else if (outcome == FALL_BACK) {
            PyObject *listed = PyObject_CallOneArg(fallback, text);
            PyObject *features = listed ? PySequence_Fast(listed, "the fallback feature list must be a sequence") : NULL;
            Py_XDECREF(listed);
            outcome = features ? DONE : FAILED;
            for (Py_ssize_t i = 0; features && i < PySequence_Fast_GET_SIZE(features); i++) {
                if (emit(PySequence_Fast_GET_ITEM(features, i), names, &lookups) < 0) {
                    outcome = FAILED;
                    break;
                }
            }
            if (outcome == DONE && int_push(&lengths, PySequence_Fast_GET_SIZE(features)) < 0)
                outcome = FAILED;
            Py_XDECREF(features);
        }
        Py_DECREF(text);
        if (outcome != DONE)
            goto done;
    }

    PyObject *length_bytes = int_list_to_bytearray(&lengths);
    PyObject *column_bytes = NULL, *rank_bytes = NULL, *unknown = NULL;
    if (column_of != NULL) {
        column_bytes = int_list_to_bytearray(&lookups.columns);
        if (number_unknown) {
            rank_bytes = int_list_to_bytearray(&lookups.ranks);
            unknown = PyDict_Keys(lookups.unknown); /* insertion order: rank order */
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
        result = PyTuple_Pack(5, names, length_bytes, column_bytes, rank_bytes, unknown);
    Py_XDECREF(length_bytes);
    Py_XDECREF(column_bytes);
    Py_XDECREF(rank_bytes);
    Py_XDECREF(unknown);
done:
    Py_XDECREF(names);
    Py_XDECREF(lookups.unknown);
    PyMem_Free(lengths.items);
    PyMem_Free(lookups.columns.items);
    PyMem_Free(lookups.ranks.items);
    work_free(&w);
    return result;
}

static PyMethodDef native_methods[] = {
    {"featurize", featurize, METH_VARARGS, featurize_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "stream_nb.features._native",
    .m_doc = "TextFeaturizer's feature lists in C (see text.py; the Python path is the definition).",
    .m_size = 0,
    .m_methods = native_methods,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModuleDef_Init(&native_module);
}
