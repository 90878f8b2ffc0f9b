/*
 * stream_nb.mail._native: the hot loops of reading mail, in C. Each function repeats a Python
 * definition exactly (tests/test_mail_native.py holds it to it on generated input); where
 * the extension is not built or STREAM_NB_NATIVE=0, the definition runs.
 *
 * - `scan`: the tokens of an HTML document made only of plain constructs (html.py's `_scan`).
 * - `tags_close_nearby`: the check `_bounded_markup` starts with (html.py's `_CLOSED_NEARBY`).
 * - `relay_words`: the hosts and /24s of one Received value (parse.py's `_relay_words`).
 *
 * `scan`: html.py's `_scan` is the definition (CPython 3.11 html.parser's grammar, construct by
 * construct). `scan(markup, unescape)` reads the same tokens for documents whose every
 * construct is plain: text, start tags of an ASCII name with ASCII attribute names and closed
 * quotes, end tags '</name>', comments closed by '--\s*>', '<!...>' and '<?...>' closed by '>',
 * a '<' that opens nothing, and script/style raw text. At anything else (a marked section, an
 * unfinished construct, a '/' or '=' where the tolerant grammar would judge, a non-ASCII name)
 * it gives None and the caller runs `_scan`: this module never decides a doubtful case.
 *
 * The tokens come as one flat list of triples: (0, text, None), (1, tag, {attribute: value}),
 * (2, tag, None). A text that is only whitespace is left out (the reader ignores it). `\s`
 * is Py_UNICODE_ISSPACE, as for `re` on str. Work is linear: the position only moves forward,
 * each look-ahead ends at the construct's end or gives up the document.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX >= 0x030C0000
#define READY(text) 0 /* every str is ready since 3.12 (PyUnicode_READY is deprecated) */
#else
#define READY(text) PyUnicode_READY(text)
#endif

enum { TOKEN_TEXT = 0, TOKEN_START = 1, TOKEN_END = 2 };
enum { RAW_NONE = 0, RAW_SCRIPT = 1, RAW_STYLE = 2 };

/* The attributes whose value the reader uses (html.py's _NEEDED_ATTRIBUTES). */
static const char *const NEEDED_ATTRIBUTES[] = {"href", "style", "color", "bgcolor", "size",
                                                "type"};

typedef struct {
    int kind;
    const void *data;
    Py_ssize_t size;
    PyObject *unescape;
    PyObject *tokens;
} Scan;

#define CHAR(scan, index) PyUnicode_READ((scan)->kind, (scan)->data, (index))

/* 1 appended, -1 on a Python error. Steals nothing: a and b are borrowed. */
static int emit(Scan *scan, int kind, PyObject *a, PyObject *b) {
    PyObject *number = PyLong_FromLong(kind);
    if (number == NULL) return -1;
    int failed = PyList_Append(scan->tokens, number) || PyList_Append(scan->tokens, a) ||
                 PyList_Append(scan->tokens, b);
    Py_DECREF(number);
    return failed ? -1 : 1;
}

static int is_ascii_letter(Py_UCS4 c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

static Py_UCS4 ascii_lower(Py_UCS4 c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* The ASCII characters [start, end) lower-cased, as a new str. */
static PyObject *lowered(Scan *scan, Py_ssize_t start, Py_ssize_t end) {
    PyObject *text = PyUnicode_New(end - start, 127);
    if (text == NULL) return NULL;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(text);
    for (Py_ssize_t i = start; i < end; i++) out[i - start] = (Py_UCS1)ascii_lower(CHAR(scan, i));
    return text;
}

/* The text [start, end) as the reader gets it: unescaped when it holds '&'. */
static PyObject *text_of(Scan *scan, Py_ssize_t start, Py_ssize_t end, PyObject *markup) {
    PyObject *text = PyUnicode_Substring(markup, start, end);
    if (text == NULL) return NULL;
    if (PyUnicode_FindChar(text, '&', 0, end - start, 1) >= 0) {
        PyObject *unescaped = PyObject_CallOneArg(scan->unescape, text);
        Py_DECREF(text);
        if (unescaped == NULL) return NULL;
        if (!PyUnicode_Check(unescaped)) {
            Py_DECREF(unescaped);
            PyErr_SetString(PyExc_TypeError, "unescape gave no str");
            return NULL;
        }
        text = unescaped;
    }
    return text;
}

/* Emit the text [start, end) unless it is only whitespace (str.strip's). */
static int emit_text(Scan *scan, Py_ssize_t start, Py_ssize_t end, PyObject *markup) {
    PyObject *text = text_of(scan, start, end, markup);
    if (text == NULL || READY(text) < 0) {
        Py_XDECREF(text);
        return -1;
    }
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    int blank = 1;
    for (Py_ssize_t i = 0; i < length && blank; i++)
        blank = Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i));
    int result = blank ? 1 : emit(scan, TOKEN_TEXT, text, Py_None);
    Py_DECREF(text);
    return result;
}

static Py_ssize_t skip_spaces(Scan *scan, Py_ssize_t at) {
    while (at < scan->size && Py_UNICODE_ISSPACE(CHAR(scan, at))) at++;
    return at;
}

/* Where '</' + name + '>' (the name in lower case, '\s' allowed around it) of the raw text
 * element ends its text: the position of its '<', -1 when none comes (the rest is dropped),
 * -2 to give up (a non-ASCII character where the name stands could match under re.I). */
static Py_ssize_t raw_text_end(Scan *scan, Py_ssize_t from, const char *name) {
    Py_ssize_t length = (Py_ssize_t)strlen(name);
    for (Py_ssize_t at = from; at + 1 < scan->size; at++) {
        if (CHAR(scan, at) != '<' || CHAR(scan, at + 1) != '/') continue;
        Py_ssize_t cursor = skip_spaces(scan, at + 2);
        Py_ssize_t i = 0;
        for (; i < length && cursor + i < scan->size; i++) {
            Py_UCS4 c = CHAR(scan, cursor + i);
            if (c > 127) return -2;
            if (ascii_lower(c) != (Py_UCS4)name[i]) break;
        }
        if (i < length) continue;
        cursor = skip_spaces(scan, cursor + length);
        if (cursor < scan->size && CHAR(scan, cursor) == '>') return at;
    }
    return -1;
}

static int is_needed(Scan *scan, Py_ssize_t start, Py_ssize_t end) {
    for (size_t n = 0; n < sizeof(NEEDED_ATTRIBUTES) / sizeof(NEEDED_ATTRIBUTES[0]); n++) {
        const char *name = NEEDED_ATTRIBUTES[n];
        Py_ssize_t length = (Py_ssize_t)strlen(name), i = 0;
        if (length != end - start) continue;
        while (i < length && ascii_lower(CHAR(scan, start + i)) == (Py_UCS4)name[i]) i++;
        if (i == length) return 1;
    }
    return 0;
}

/* A start tag at `opening` (a '<' before an ASCII letter): emits it (and its end when it closes
 * itself) and returns the position after its '>', sets *raw for script and style; 0 to give up
 * the document, -1 on a Python error. */
static Py_ssize_t start_tag(Scan *scan, Py_ssize_t opening, PyObject *markup, int *raw) {
    Py_ssize_t size = scan->size, cursor = opening + 1;
    while (cursor < size) {
        Py_UCS4 c = CHAR(scan, cursor);
        if (c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == ' ' || c == '/' || c == '>')
            break;
        /* a name html.parser would read with a character the attribute grammar judges */
        if (c > 127 || c == 0 || c == '<' || c == '=' || c == '"' || c == '\'' ||
            Py_UNICODE_ISSPACE(c))
            return 0;
        cursor++;
    }
    if (cursor >= size) return 0;
    PyObject *tag = lowered(scan, opening + 1, cursor);
    if (tag == NULL) return -1;
    PyObject *attributes = PyDict_New();
    if (attributes == NULL) {
        Py_DECREF(tag);
        return -1;
    }
    Py_ssize_t result = 0;
    int closes_itself = 0;
    for (;;) {
        cursor = skip_spaces(scan, cursor);
        if (cursor >= size) goto done; /* unfinished */
        Py_UCS4 c = CHAR(scan, cursor);
        if (c == '>') {
            cursor++;
            break;
        }
        if (c == '/') {
            if (cursor + 1 < size && CHAR(scan, cursor + 1) == '>') {
                closes_itself = 1;
                cursor += 2;
                break;
            }
            goto done; /* '/' as a separator */
        }
        /* an attribute name: ASCII, no quote, '<' or '=' in it */
        Py_ssize_t key_start = cursor;
        while (cursor < size) {
            c = CHAR(scan, cursor);
            if (c == '/' || c == '=' || c == '>' || Py_UNICODE_ISSPACE(c)) break;
            if (c > 127 || c == '"' || c == '\'' || c == '<' || c == 0) goto done;
            cursor++;
        }
        if (cursor == key_start || cursor >= size) goto done;
        Py_ssize_t key_end = cursor;
        Py_ssize_t value_start = -1, value_end = -1;
        Py_ssize_t after = skip_spaces(scan, cursor);
        if (after < size && CHAR(scan, after) == '=') {
            after++;
            if (after < size && CHAR(scan, after) == '=') goto done; /* '=+' */
            after = skip_spaces(scan, after);
            if (after >= size) goto done;
            c = CHAR(scan, after);
            if (c == '"' || c == '\'') {
                Py_ssize_t close = PyUnicode_FindChar(markup, c, after + 1, size, 1);
                if (close == -2) goto error;
                if (close < 0) goto done; /* an unclosed quote: the grammar backtracks */
                value_start = after + 1;
                value_end = close;
                cursor = close + 1;
            } else {
                value_start = after;
                while (after < size) {
                    c = CHAR(scan, after);
                    if (c == '>' || Py_UNICODE_ISSPACE(c)) break;
                    after++;
                }
                if (after >= size) goto done;
                value_end = after;
                cursor = after;
            }
        }
        PyObject *key = lowered(scan, key_start, key_end);
        if (key == NULL) goto error;
        PyObject *value;
        if (value_start >= 0 && value_end > value_start && is_needed(scan, key_start, key_end))
            value = text_of(scan, value_start, value_end, markup);
        else
            value = PyUnicode_New(0, 127);
        if (value == NULL) {
            Py_DECREF(key);
            goto error;
        }
        int failed = PyDict_SetItem(attributes, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (failed) goto error;
    }
    if (emit(scan, TOKEN_START, tag, attributes) < 0) goto error;
    if (closes_itself) {
        if (emit(scan, TOKEN_END, tag, Py_None) < 0) goto error;
    } else if (PyUnicode_CompareWithASCIIString(tag, "script") == 0) {
        *raw = RAW_SCRIPT;
    } else if (PyUnicode_CompareWithASCIIString(tag, "style") == 0) {
        *raw = RAW_STYLE;
    }
    result = cursor;
    goto done;
error:
    result = -1;
done:
    Py_DECREF(tag);
    Py_DECREF(attributes);
    return result;
}

/* An end tag '</' \s* name \s* '>' at `opening` (outside raw text): emits it and returns the
 * position after its '>'; 0 to give up (anything else after '</'), -1 on a Python error. */
static Py_ssize_t end_tag(Scan *scan, Py_ssize_t opening) {
    Py_ssize_t size = scan->size;
    Py_ssize_t name_start = skip_spaces(scan, opening + 2), cursor = name_start;
    if (cursor >= size || !is_ascii_letter(CHAR(scan, cursor))) return 0;
    while (cursor < size) {
        Py_UCS4 c = CHAR(scan, cursor);
        if (!(is_ascii_letter(c) || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == ':' ||
              c == '_'))
            break;
        cursor++;
    }
    Py_ssize_t name_end = cursor;
    cursor = skip_spaces(scan, cursor);
    if (cursor >= size || CHAR(scan, cursor) != '>') return 0;
    PyObject *tag = lowered(scan, name_start, name_end);
    if (tag == NULL) return -1;
    int failed = emit(scan, TOKEN_END, tag, Py_None) < 0;
    Py_DECREF(tag);
    return failed ? -1 : cursor + 1;
}

/* After a comment opened at `opening` ('<!--'): the position after its '--\s*>', 0 if none. */
static Py_ssize_t comment_end(Scan *scan, Py_ssize_t opening) {
    for (Py_ssize_t at = opening + 4; at + 1 < scan->size; at++) {
        if (CHAR(scan, at) != '-' || CHAR(scan, at + 1) != '-') continue;
        Py_ssize_t cursor = skip_spaces(scan, at + 2);
        if (cursor < scan->size && CHAR(scan, cursor) == '>') return cursor + 1;
    }
    return 0;
}

static int starts_with(Scan *scan, Py_ssize_t at, const char *prefix) {
    for (Py_ssize_t i = 0; prefix[i]; i++)
        if (at + i >= scan->size || CHAR(scan, at + i) != (Py_UCS4)(unsigned char)prefix[i])
            return 0;
    return 1;
}

static PyObject *scan_markup(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "scan(markup: str, unescape: callable)");
        return NULL;
    }
    PyObject *markup = args[0];
    if (READY(markup) < 0) return NULL;
    Scan scan = {PyUnicode_KIND(markup), PyUnicode_DATA(markup), PyUnicode_GET_LENGTH(markup),
                 args[1], PyList_New(0)};
    if (scan.tokens == NULL) return NULL;
    Py_ssize_t position = 0, size = scan.size;
    int raw = RAW_NONE;
    static const char *const RAW_NAMES[] = {"", "script", "style"};
    while (position < size) {
        Py_ssize_t opening;
        if (raw == RAW_NONE) {
            opening = PyUnicode_FindChar(markup, '<', position, size, 1);
            if (opening == -2) goto error;
            if (opening < 0) opening = size;
            if (position < opening && emit_text(&scan, position, opening, markup) < 0) goto error;
        } else {
            opening = raw_text_end(&scan, position, RAW_NAMES[raw]);
            if (opening == -2) goto give_up;
            if (opening == -1) break; /* unclosed raw text: dropped */
            Py_ssize_t after_end = end_tag(&scan, opening);
            if (after_end < 0) goto error;
            if (after_end == 0) goto give_up;
            raw = RAW_NONE;
            position = after_end;
            continue;
        }
        position = opening;
        if (position >= size) break;
        if (position + 1 >= size) { /* a last '<' */
            PyObject *lt = PyUnicode_FromOrdinal('<');
            int failed = lt == NULL || emit(&scan, TOKEN_TEXT, lt, Py_None) < 0;
            Py_XDECREF(lt);
            if (failed) goto error;
            break;
        }
        Py_UCS4 following = CHAR(&scan, position + 1);
        Py_ssize_t after;
        if (is_ascii_letter(following)) {
            after = start_tag(&scan, position, markup, &raw);
        } else if (following == '/') {
            after = end_tag(&scan, position);
        } else if (starts_with(&scan, position, "<!--")) {
            after = comment_end(&scan, position);
        } else if (starts_with(&scan, position, "<![")) {
            after = 0; /* marked sections: html.parser's judgement, in _scan */
        } else if (following == '?' || following == '!') {
            /* a processing instruction, <!doctype ...> or a bogus comment: up to the next '>' */
            static const char DOCTYPE[] = "<!doctype";
            int doctype = 1;
            for (Py_ssize_t i = 0; i < 9 && doctype; i++)
                doctype = position + i < size &&
                          ascii_lower(CHAR(&scan, position + i)) == (Py_UCS4)DOCTYPE[i];
            Py_ssize_t from = position + (doctype ? 9 : 2);
            Py_ssize_t close = from < size ? PyUnicode_FindChar(markup, '>', from, size, 1) : -1;
            if (close == -2) goto error;
            after = close < 0 ? 0 : close + 1;
        } else { /* a '<' that opens nothing is text */
            PyObject *lt = PyUnicode_FromOrdinal('<');
            int failed = lt == NULL || emit(&scan, TOKEN_TEXT, lt, Py_None) < 0;
            Py_XDECREF(lt);
            if (failed) goto error;
            after = position + 1;
        }
        if (after < 0) goto error;
        if (after == 0) goto give_up;
        position = after;
    }
    return scan.tokens;
give_up:
    Py_DECREF(scan.tokens);
    Py_RETURN_NONE;
error:
    Py_DECREF(scan.tokens);
    return NULL;
}

/* tags_close_nearby(markup, most): whether every '<' of `markup` has its '>' at most `most`
 * characters after it with no other '<' between (html.py's `_CLOSED_NEARBY` matches every '<'). */
static PyObject *tags_close_nearby(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "tags_close_nearby(markup: str, most: int)");
        return NULL;
    }
    PyObject *markup = args[0];
    Py_ssize_t most = PyLong_AsSsize_t(args[1]);
    if (most == -1 && PyErr_Occurred()) return NULL;
    if (READY(markup) < 0) return NULL;
    int kind = PyUnicode_KIND(markup);
    const void *data = PyUnicode_DATA(markup);
    Py_ssize_t size = PyUnicode_GET_LENGTH(markup), open = -1;
    for (Py_ssize_t at = 0; at < size; at++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, at);
        if (c == '<') {
            if (open >= 0) Py_RETURN_FALSE;
            open = at;
        } else if (c == '>' && open >= 0) {
            if (at - open > most) Py_RETURN_FALSE;
            open = -1;
        }
    }
    if (open >= 0) Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

/* str.strip(";[]") bounds of [start, end). */
static void strip_brackets(int kind, const void *data, Py_ssize_t *start, Py_ssize_t *end) {
#define BRACKET(c) ((c) == ';' || (c) == '[' || (c) == ']')
    while (*start < *end && BRACKET(PyUnicode_READ(kind, data, *start))) (*start)++;
    while (*end > *start && BRACKET(PyUnicode_READ(kind, data, *end - 1))) (*end)--;
#undef BRACKET
}

/* relay_words(spaced) -> [is_ip, text, ...]: parse.py's `_relay_words` over a Received value
 * lower-cased with '(' and ')' made spaces. Words are split as str.split() splits them. */
static PyObject *relay_words(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 1 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "relay_words(spaced: str)");
        return NULL;
    }
    PyObject *spaced = args[0];
    if (READY(spaced) < 0) return NULL;
    int kind = PyUnicode_KIND(spaced);
    const void *data = PyUnicode_DATA(spaced);
    Py_ssize_t size = PyUnicode_GET_LENGTH(spaced);
    PyObject *found = PyList_New(0);
    if (found == NULL) return NULL;
    Py_ssize_t at = 0;
    while (at < size) {
        while (at < size && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, at))) at++;
        if (at >= size) break;
        Py_ssize_t word = at;
        while (at < size && !Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, at))) at++;
        Py_ssize_t word_end = at, length = word_end - word;
        Py_UCS4 first = PyUnicode_READ(kind, data, word);
        Py_ssize_t start, end, dots = 0, digits = 0;
        int is_ip;
        if (first == '[') {
            for (Py_ssize_t i = word; i < word_end; i++)
                dots += PyUnicode_READ(kind, data, i) == '.';
            if (dots != 3) continue;
            start = word, end = word_end;
            strip_brackets(kind, data, &start, &end);
            /* four octets, each non-empty digits; the text is the first three */
            Py_ssize_t octet = 0, last_dot = -1;
            int ok = 1;
            for (Py_ssize_t i = start; i < end && ok; i++) {
                Py_UCS4 c = PyUnicode_READ(kind, data, i);
                if (c == '.') {
                    ok = octet > 0;
                    octet = 0;
                    last_dot = i;
                } else {
                    ok = Py_UNICODE_ISDIGIT(c);
                    octet++;
                }
            }
            if (!ok || octet == 0) continue;
            end = last_dot;
            is_ip = 1;
        } else if ((length == 4 && first == 'f' && PyUnicode_READ(kind, data, word + 1) == 'r' &&
                    PyUnicode_READ(kind, data, word + 2) == 'o' &&
                    PyUnicode_READ(kind, data, word + 3) == 'm') ||
                   (length == 2 && first == 'b' && PyUnicode_READ(kind, data, word + 1) == 'y')) {
            Py_ssize_t next = at;
            while (next < size && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, next))) next++;
            if (next >= size) break; /* the last word: no host */
            start = next, end = next;
            while (end < size && !Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, end))) end++;
            strip_brackets(kind, data, &start, &end);
            /* a host has a '.' and is not all digits and dots */
            int only_digits = 1;
            for (Py_ssize_t i = start; i < end; i++) {
                Py_UCS4 c = PyUnicode_READ(kind, data, i);
                if (c == '.')
                    dots++;
                else if (Py_UNICODE_ISDIGIT(c))
                    digits++;
                else
                    only_digits = 0;
            }
            if (dots == 0 || (only_digits && digits > 0)) continue;
            is_ip = 0;
        } else {
            continue;
        }
        PyObject *text = PyUnicode_Substring(spaced, start, end);
        if (text == NULL || PyList_Append(found, is_ip ? Py_True : Py_False) < 0 ||
            PyList_Append(found, text) < 0) {
            Py_XDECREF(text);
            Py_DECREF(found);
            return NULL;
        }
        Py_DECREF(text);
    }
    return found;
}

static PyMethodDef METHODS[] = {
    {"relay_words", (PyCFunction)(void (*)(void))relay_words, METH_FASTCALL,
     "relay_words(spaced) -> [is_ip, text, ...] of a Received value (parse.py's _relay_words)."},
    {"tags_close_nearby", (PyCFunction)(void (*)(void))tags_close_nearby, METH_FASTCALL,
     "tags_close_nearby(markup, most) -> each '<' closed within `most`, no '<' between?"},
    {"scan", (PyCFunction)(void (*)(void))scan_markup, METH_FASTCALL,
     "scan(markup, unescape) -> flat list of (kind, a, b) tokens, or None to use html._scan."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_native",
                                    "The hot loops of reading mail, in C (html.py, parse.py).",
                                    -1, METHODS};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&MODULE); }
