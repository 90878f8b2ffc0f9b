/*
 * stream_nb.mail._native: the hot loops of reading mail, in C. Each function repeats a Python
 * definition exactly (tests/test_mail_native.py holds it to it on generated input); where
 * the extension is not built or STREAM_NB_NATIVE=0, the definition runs.
 *
 * - `scan`: the tokens of an HTML document made only of plain constructs (html.py's `_scan`).
 * - `read`: those tokens handed straight to a C copy of html.py's `_MarkupReader`, which asks
 *   html.py's own functions for its judgements (links, anchors, styles).
 * - `bounded_markup`: html.py's `_bounded_markup`.
 * - `relay_words`: the hosts and /24s of one Received value (parse.py's `_relay_words`).
 * - `header_fields`: the plain header lines of a header block (parse.py's `_header_fields`).
 * - `readings`: a reader process's readings of a chunk (replay/mail_reader.py's `decode_readings`).
 * - `message_id`: a message's normalised Message-ID (identity.py's `message_id_of`), for an ASCII value.
 *
 * `scan`: html.py's `_scan` is the definition (CPython 3.11 html.parser's grammar, construct by
 * construct). `scan(markup, unescape)` reads the same tokens for documents whose every
 * construct is one it knows: text, start tags of an ASCII name (its tolerant form included:
 * '<fontface="x">') with ASCII attribute names, '/' or blanks between them and closed quotes,
 * end tags (tolerant: '</font color=x>'), comments closed by '--\s*>', '<!...>' and '<?...>'
 * closed by '>', a '<' that opens nothing, and script/style raw text. At anything else (a
 * marked section, an unfinished construct or unclosed quote, '=+', a non-ASCII name or '\0'
 * in one) it gives None and the caller runs `_scan`: this module never decides a doubtful
 * case.
 *
 * The tokens come as one flat list of triples: (0, text, None), (1, tag, {attribute: value}),
 * (2, tag, None). A text that is only whitespace is left out (the reader ignores it). `\s`
 * is Py_UNICODE_ISSPACE, as for `re` on str. Work is linear: the position only moves forward,
 * each look-ahead ends at the construct's end or gives up the document.
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

enum { TOKEN_TEXT = 0, TOKEN_START = 1, TOKEN_END = 2 };
enum { RAW_NONE = 0, RAW_SCRIPT = 1, RAW_STYLE = 2 };

/* The attributes whose value the reader uses (html.py's _NEEDED_ATTRIBUTES). */
static const char *const NEEDED_ATTRIBUTES[] = {"href", "style", "color", "bgcolor", "size",
                                                "type"};

enum { NEEDED_HREF, NEEDED_STYLE, NEEDED_COLOR, NEEDED_BGCOLOR, NEEDED_SIZE, NEEDED_TYPE, NEEDED };

typedef struct Reader Reader;

typedef struct {
    int kind;
    const void *data;
    Py_ssize_t size;
    PyObject *unescape;
    PyObject *tokens; /* `scan`: the flat token list */
    Reader *reader;   /* `read`: the reader the tokens go to instead */
} Scan;

#define CHAR(scan, index) PyUnicode_READ((scan)->kind, (scan)->data, (index))

static int reader_text(Reader *reader, PyObject *text);
static int reader_start(Reader *reader, PyObject *tag, PyObject *const *needed);
static int reader_end(Reader *reader, PyObject *tag);

/* 1 appended, -1 on a Python error. Steals nothing: a and b are borrowed. A start tag goes to
 * a reader through emit_start. */
static int emit(Scan *scan, int kind, PyObject *a, PyObject *b) {
    if (scan->reader != NULL) {
        Reader *reader = scan->reader;
        int failed = kind == TOKEN_TEXT ? reader_text(reader, a) : reader_end(reader, a);
        return failed ? -1 : 1;
    }
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

/* The index in NEEDED_ATTRIBUTES of the attribute name [start, end), or -1. */
static int needed_index(Scan *scan, Py_ssize_t start, Py_ssize_t end) {
    for (int n = 0; n < NEEDED; n++) {
        const char *name = NEEDED_ATTRIBUTES[n];
        Py_ssize_t length = (Py_ssize_t)strlen(name), i = 0;
        if (length != end - start) continue;
        while (i < length && ascii_lower(CHAR(scan, start + i)) == (Py_UCS4)name[i]) i++;
        if (i == length) return n;
    }
    return -1;
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
        /* left to _scan: a non-ASCII name (str.lower's), '\0' (which ends the name there but
         * not the tag), a blank `\s` reads but the name rule does not */
        if (c > 127 || c == 0 || Py_UNICODE_ISSPACE(c)) return 0;
        cursor++;
    }
    if (cursor >= size) return 0;
    PyObject *tag = lowered(scan, opening + 1, cursor);
    if (tag == NULL) return -1;
    /* `scan` hands on {name: value}; a reader gets only the needed values (None: absent or
     * empty, which the reader takes alike), the last of a name as in a dict */
    PyObject *attributes = scan->reader == NULL ? PyDict_New() : NULL;
    PyObject *needed[NEEDED] = {NULL};
    if (scan->reader == NULL && attributes == NULL) {
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
            cursor++; /* a '/' not before '>' separates, as a blank does */
            continue;
        }
        /* an attribute name: its first character anything but a blank, '/' or '>' (even '=' or
         * a quote), then up to a blank, '/', '=' or '>'; a non-ASCII or '\0' one is left */
        Py_ssize_t key_start = cursor;
        while (cursor < size) {
            c = CHAR(scan, cursor);
            if (c == '/' || c == '>' || Py_UNICODE_ISSPACE(c) || (c == '=' && cursor > key_start))
                break;
            if (c > 127 || c == 0) goto done;
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
        int index = needed_index(scan, key_start, key_end);
        int valued = index >= 0 && value_start >= 0 && value_end > value_start;
        if (scan->reader != NULL) {
            if (index >= 0) {
                Py_CLEAR(needed[index]);
                if (valued) {
                    needed[index] = text_of(scan, value_start, value_end, markup);
                    if (needed[index] == NULL) goto error;
                }
            }
            continue;
        }
        PyObject *key = lowered(scan, key_start, key_end);
        if (key == NULL) goto error;
        PyObject *value = valued ? text_of(scan, value_start, value_end, markup)
                                 : PyUnicode_New(0, 127);
        if (value == NULL) {
            Py_DECREF(key);
            goto error;
        }
        int failed = PyDict_SetItem(attributes, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (failed) goto error;
    }
    if (scan->reader != NULL) {
        if (reader_start(scan->reader, tag, needed) < 0) goto error;
    } else if (emit(scan, TOKEN_START, tag, attributes) < 0) {
        goto error;
    }
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
    Py_XDECREF(attributes);
    for (int n = 0; n < NEEDED; n++) Py_XDECREF(needed[n]);
    return result;
}

/* An end tag at `opening` ('</'), outside raw text or ending it: emits it and returns the
 * position after its '>'; 0 to give up, -1 on a Python error. '</' \s* name \s* '>' is the
 * end tag of name; outside raw text, anything else up to the next '>' is the end tag of the
 * name (html.parser's tolerant one) that opens right after '</', or nothing. */
static Py_ssize_t end_tag(Scan *scan, Py_ssize_t opening, PyObject *markup, int in_raw_text) {
    Py_ssize_t size = scan->size;
    Py_ssize_t name_start = skip_spaces(scan, opening + 2), cursor = name_start;
    Py_ssize_t name_end = -1, after = -1;
    if (cursor < size && is_ascii_letter(CHAR(scan, cursor))) {
        while (cursor < size) {
            Py_UCS4 c = CHAR(scan, cursor);
            if (!(is_ascii_letter(c) || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
                  c == ':' || c == '_'))
                break;
            cursor++;
        }
        name_end = cursor;
        cursor = skip_spaces(scan, cursor);
        if (cursor < size && CHAR(scan, cursor) == '>') after = cursor + 1;
    }
    if (after == -1) {
        if (in_raw_text) return 0;
        Py_ssize_t close = PyUnicode_FindChar(markup, '>', opening + 1, size, 1);
        if (close == -2) return -1;
        if (close == -1) return 0; /* unfinished */
        after = close + 1;
        name_start = opening + 2;
        if (!is_ascii_letter(CHAR(scan, name_start))) return after; /* '</>', a bogus comment */
        for (name_end = name_start; name_end < close; name_end++) {
            Py_UCS4 c = CHAR(scan, name_end);
            if (c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == ' ' || c == '/' || c == 0)
                break;
            if (c > 127) return 0; /* str.lower's */
        }
    }
    PyObject *tag = lowered(scan, name_start, name_end);
    if (tag == NULL) return -1;
    int failed = emit(scan, TOKEN_END, tag, Py_None) < 0;
    Py_DECREF(tag);
    return failed ? -1 : after;
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

/* Hands every token of `markup` on (to scan->tokens or scan->reader): 1 when done, 0 to give
 * the document up to `_scan`, -1 on a Python error. */
static int run_scan(Scan *scan, PyObject *markup) {
    Py_ssize_t position = 0, size = scan->size;
    int raw = RAW_NONE;
    static const char *const RAW_NAMES[] = {"", "script", "style"};
    while (position < size) {
        Py_ssize_t opening;
        if (raw == RAW_NONE) {
            opening = PyUnicode_FindChar(markup, '<', position, size, 1);
            if (opening == -2) return -1;
            if (opening < 0) opening = size;
            if (position < opening && emit_text(scan, position, opening, markup) < 0) return -1;
        } else {
            opening = raw_text_end(scan, position, RAW_NAMES[raw]);
            if (opening == -2) return 0;
            if (opening == -1) break; /* unclosed raw text: dropped */
            Py_ssize_t after_end = end_tag(scan, opening, markup, 1);
            if (after_end < 0) return -1;
            if (after_end == 0) return 0;
            raw = RAW_NONE;
            position = after_end;
            continue;
        }
        position = opening;
        if (position >= size) break;
        if (position + 1 >= size) { /* a last '<' */
            PyObject *lt = PyUnicode_FromOrdinal('<');
            int failed = lt == NULL || emit(scan, TOKEN_TEXT, lt, Py_None) < 0;
            Py_XDECREF(lt);
            if (failed) return -1;
            break;
        }
        Py_UCS4 following = CHAR(scan, position + 1);
        Py_ssize_t after;
        if (is_ascii_letter(following)) {
            after = start_tag(scan, position, markup, &raw);
        } else if (following == '/') {
            after = end_tag(scan, position, markup, 0);
        } else if (starts_with(scan, position, "<!--")) {
            after = comment_end(scan, position);
        } else if (starts_with(scan, position, "<![")) {
            after = 0; /* marked sections: html.parser's judgement, in _scan */
        } else if (following == '?' || following == '!') {
            /* a processing instruction, <!doctype ...> or a bogus comment: up to the next '>' */
            static const char DOCTYPE[] = "<!doctype";
            int doctype = 1;
            for (Py_ssize_t i = 0; i < 9 && doctype; i++)
                doctype = position + i < size &&
                          ascii_lower(CHAR(scan, position + i)) == (Py_UCS4)DOCTYPE[i];
            Py_ssize_t from = position + (doctype ? 9 : 2);
            Py_ssize_t close = from < size ? PyUnicode_FindChar(markup, '>', from, size, 1) : -1;
            if (close == -2) return -1;
            after = close < 0 ? 0 : close + 1;
        } else { /* a '<' that opens nothing is text */
            PyObject *lt = PyUnicode_FromOrdinal('<');
            int failed = lt == NULL || emit(scan, TOKEN_TEXT, lt, Py_None) < 0;
            Py_XDECREF(lt);
            if (failed) return -1;
            after = position + 1;
        }
        if (after < 0) return -1;
        if (after == 0) return 0;
        position = after;
    }
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
                 args[1], PyList_New(0), NULL};
    if (scan.tokens == NULL) return NULL;
    int outcome = run_scan(&scan, markup);
    if (outcome == 1) return scan.tokens;
    Py_DECREF(scan.tokens);
    if (outcome == 0) Py_RETURN_NONE;
    return NULL;
}

/* ---- `read`: the tokens go straight to html.py's _MarkupReader, repeated here ---------------
 *
 * The reader's state is C (its element stack, counters); what needs judgement is asked of
 * html.py's own functions, handed in: the features of a link, whether an anchor's text names
 * another domain, an inline style's colours and whether it hides. Nothing is written into a
 * Python object the caller holds until the document is read, so a give-up loses nothing. */

typedef struct {
    PyObject *tag; /* owned */
    int hidden, unseen;
    PyObject *colour, *background; /* owned; NULL for None */
} Element;

struct Reader {
    Element *stack;
    Py_ssize_t depth, most_open; /* elements on the stack (the root first), and their bound */
    PyObject *visible;           /* list of the visible texts */
    PyObject *features;          /* dict, first-seen order */
    Py_ssize_t images, hidden_chunks;
    PyObject *anchor_href; /* owned; NULL when no anchor is open */
    PyObject *anchor_text; /* list */
    Py_ssize_t anchor_text_length, most_anchor_text;
    /* borrowed, from html.py */
    PyObject *evidence_elements, *void_elements, *unseen_elements;
    PyObject *link_features, *names_other_domain, *style_colours, *style_hides;
};

static int add_feature(Reader *reader, PyObject *feature) {
    return PyDict_SetItem(reader->features, feature, Py_None);
}

static int add_feature_named(Reader *reader, const char *name) {
    PyObject *feature = PyUnicode_FromString(name);
    if (feature == NULL) return -1;
    int failed = add_feature(reader, feature);
    Py_DECREF(feature);
    return failed;
}

static int tag_is(PyObject *tag, const char *name) {
    return PyUnicode_GET_LENGTH(tag) == (Py_ssize_t)strlen(name) &&
           memcmp(PyUnicode_1BYTE_DATA(tag), name, strlen(name)) == 0; /* tags are ASCII here */
}

static int is_truthy_str(PyObject *value) {
    return value != NULL && value != Py_None && PyUnicode_Check(value) &&
           PyUnicode_GET_LENGTH(value) > 0;
}

static void clear_element(Element *element) {
    Py_CLEAR(element->tag);
    Py_CLEAR(element->colour);
    Py_CLEAR(element->background);
}

/* close_anchor: the link-text feature, then no anchor is open. */
static int close_anchor(Reader *reader) {
    if (reader->anchor_href == NULL) return 0;
    PyObject *named = PyObject_CallFunctionObjArgs(reader->names_other_domain, reader->anchor_text,
                                                   reader->anchor_href, NULL);
    if (named == NULL) return -1;
    int truth = PyObject_IsTrue(named);
    Py_DECREF(named);
    if (truth < 0 || (truth && add_feature_named(reader, "#html:link_text_names_other_domain")))
        return -1;
    Py_CLEAR(reader->anchor_href);
    if (PyList_SetSlice(reader->anchor_text, 0, PyList_GET_SIZE(reader->anchor_text), NULL) < 0)
        return -1;
    reader->anchor_text_length = 0;
    return 0;
}

static int reader_text(Reader *reader, PyObject *text) {
    Element *element = &reader->stack[reader->depth - 1];
    if (element->unseen) return 0; /* blank texts never come */
    if (element->hidden) {
        reader->hidden_chunks++;
        return 0;
    }
    if (PyList_Append(reader->visible, text) < 0) return -1;
    if (reader->anchor_href != NULL && reader->anchor_text_length < reader->most_anchor_text) {
        if (PyList_Append(reader->anchor_text, text) < 0) return -1;
        reader->anchor_text_length += PyUnicode_GET_LENGTH(text);
    }
    return 0;
}

/* `value.lower()` as a new reference, for a non-empty value; NULL with no error for none. */
static PyObject *lower_of(PyObject *value) {
    if (!is_truthy_str(value)) return NULL;
    return PyObject_CallMethod(value, "lower", NULL);
}

/* str.strip() of `value` is one of '0', '-2', '-3' (a font too small to read). */
static int tiny_size(PyObject *value) {
    if (!is_truthy_str(value)) return 0;
    int kind = PyUnicode_KIND(value);
    const void *data = PyUnicode_DATA(value);
    Py_ssize_t start = 0, end = PyUnicode_GET_LENGTH(value);
    while (start < end && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, start))) start++;
    while (end > start && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, end - 1))) end--;
    Py_UCS4 a = end - start >= 1 ? PyUnicode_READ(kind, data, start) : 0;
    Py_UCS4 b = end - start == 2 ? PyUnicode_READ(kind, data, start + 1) : 0;
    return (end - start == 1 && a == '0') ||
           (end - start == 2 && a == '-' && (b == '2' || b == '3'));
}

static int reader_start(Reader *reader, PyObject *tag, PyObject *const *needed) {
    PyObject *evidence = PyDict_GetItemWithError(reader->evidence_elements, tag);
    if (evidence == NULL && PyErr_Occurred()) return -1;
    if (evidence != NULL && add_feature(reader, evidence) < 0) return -1;
    if (tag_is(tag, "img")) {
        reader->images++;
    } else if (tag_is(tag, "input")) {
        PyObject *type = lower_of(needed[NEEDED_TYPE]);
        if (type == NULL && PyErr_Occurred()) return -1;
        int password = type != NULL && PyUnicode_CompareWithASCIIString(type, "password") == 0;
        Py_XDECREF(type);
        if (password && add_feature_named(reader, "#html:password_input") < 0) return -1;
    } else if (tag_is(tag, "a")) {
        if (close_anchor(reader) < 0) return -1;
        PyObject *href = needed[NEEDED_HREF] != NULL ? needed[NEEDED_HREF] : PyUnicode_New(0, 127);
        if (href == NULL) return -1;
        if (needed[NEEDED_HREF] != NULL) Py_INCREF(href);
        reader->anchor_href = href;
        PyObject *links = PyObject_CallOneArg(reader->link_features, href);
        if (links == NULL) return -1;
        PyObject *iterator = PyObject_GetIter(links);
        Py_DECREF(links);
        if (iterator == NULL) return -1;
        PyObject *feature;
        while ((feature = PyIter_Next(iterator)) != NULL) {
            int failed = add_feature(reader, feature);
            Py_DECREF(feature);
            if (failed < 0) break;
        }
        Py_DECREF(iterator);
        if (PyErr_Occurred()) return -1;
    }
    int is_void = PySet_Contains(reader->void_elements, tag);
    if (is_void != 0) return is_void < 0 ? -1 : 0;
    Element *parent = &reader->stack[reader->depth - 1];
    PyObject *style = is_truthy_str(needed[NEEDED_STYLE]) ? needed[NEEDED_STYLE] : NULL;
    PyObject *colour = NULL, *background = NULL; /* owned */
    int hidden = parent->hidden;
    if (style != NULL) {
        PyObject *pair = PyObject_CallOneArg(reader->style_colours, style);
        if (pair == NULL) return -1;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            Py_DECREF(pair);
            PyErr_SetString(PyExc_TypeError, "style_colours gives (colour, background)");
            return -1;
        }
        if (is_truthy_str(PyTuple_GET_ITEM(pair, 0))) colour = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
        if (is_truthy_str(PyTuple_GET_ITEM(pair, 1)))
            background = Py_NewRef(PyTuple_GET_ITEM(pair, 1));
        Py_DECREF(pair);
    }
    /* colour or color.lower() or the parent's; likewise the background */
    if (colour == NULL && (colour = lower_of(needed[NEEDED_COLOR])) == NULL && PyErr_Occurred())
        goto error;
    if (colour != NULL && !is_truthy_str(colour)) Py_CLEAR(colour);
    if (colour == NULL && parent->colour != NULL) colour = Py_NewRef(parent->colour);
    if (background == NULL && (background = lower_of(needed[NEEDED_BGCOLOR])) == NULL &&
        PyErr_Occurred())
        goto error;
    if (background != NULL && !is_truthy_str(background)) Py_CLEAR(background);
    if (background == NULL && parent->background != NULL)
        background = Py_NewRef(parent->background);
    /* parent.hidden or (style and style_hides(style)) or tiny_font, in that order */
    if (!hidden && style != NULL) {
        PyObject *hides = PyObject_CallOneArg(reader->style_hides, style);
        if (hides == NULL) goto error;
        hidden = PyObject_IsTrue(hides);
        Py_DECREF(hides);
        if (hidden < 0) goto error;
    }
    if (!hidden && tag_is(tag, "font")) hidden = tiny_size(needed[NEEDED_SIZE]);
    if (colour != NULL && background != NULL) {
        int same = PyObject_RichCompareBool(colour, background, Py_EQ);
        if (same < 0) goto error;
        hidden = hidden || same;
    }
    int unseen = parent->unseen;
    if (!unseen && (unseen = PySet_Contains(reader->unseen_elements, tag)) < 0) goto error;
    Element element = {Py_NewRef(tag), hidden, unseen, colour, background};
    if (reader->depth < reader->most_open) {
        reader->stack[reader->depth++] = element;
    } else { /* past the bound the innermost state is replaced, not stacked */
        clear_element(&reader->stack[reader->depth - 1]);
        reader->stack[reader->depth - 1] = element;
    }
    return 0;
error:
    Py_XDECREF(colour);
    Py_XDECREF(background);
    return -1;
}

static int reader_end(Reader *reader, PyObject *tag) {
    if (tag_is(tag, "a") && close_anchor(reader) < 0) return -1;
    for (Py_ssize_t depth = reader->depth - 1; depth > 0; depth--) {
        int same = PyUnicode_Compare(reader->stack[depth].tag, tag);
        if (same == -1 && PyErr_Occurred()) return -1;
        if (same == 0) {
            while (reader->depth > depth) clear_element(&reader->stack[--reader->depth]);
            return 0;
        }
    }
    return 0;
}

/* read(markup, helpers) -> (visible texts, features dict, images, hidden chunks) after the
 * last anchor is closed, or None to give the document up to `_scan` and the Python reader.
 * helpers: (unescape, evidence elements dict, void elements set, unseen elements set,
 * link_features, names_other_domain, style_colours, style_hides, MAX_OPEN_ELEMENTS,
 * MAX_ANCHOR_TEXT). */
static PyObject *read_markup(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyTuple_Check(args[1]) ||
        PyTuple_GET_SIZE(args[1]) != 10) {
        PyErr_SetString(PyExc_TypeError, "read(markup: str, helpers: 10-tuple)");
        return NULL;
    }
    PyObject *markup = args[0], *helpers = args[1];
    if (READY(markup) < 0) return NULL;
    PyObject *evidence = PyTuple_GET_ITEM(helpers, 1), *voids = PyTuple_GET_ITEM(helpers, 2),
             *unseen = PyTuple_GET_ITEM(helpers, 3);
    if (!PyDict_Check(evidence) || !PyAnySet_Check(voids) || !PyAnySet_Check(unseen)) {
        PyErr_SetString(PyExc_TypeError, "read: helpers 1-3 are a dict and two sets");
        return NULL;
    }
    Py_ssize_t most_open = PyLong_AsSsize_t(PyTuple_GET_ITEM(helpers, 8));
    Py_ssize_t most_anchor_text = PyLong_AsSsize_t(PyTuple_GET_ITEM(helpers, 9));
    if (PyErr_Occurred()) return NULL;
    if (most_open < 2 || most_open > 4096) {
        PyErr_SetString(PyExc_ValueError, "read: MAX_OPEN_ELEMENTS out of range");
        return NULL;
    }
    Reader reader = {NULL, 1, most_open, PyList_New(0), PyDict_New(), 0, 0, NULL, PyList_New(0),
                     0, most_anchor_text, evidence, voids, unseen,
                     PyTuple_GET_ITEM(helpers, 4), PyTuple_GET_ITEM(helpers, 5),
                     PyTuple_GET_ITEM(helpers, 6), PyTuple_GET_ITEM(helpers, 7)};
    PyObject *result = NULL;
    reader.stack = PyMem_Calloc((size_t)most_open, sizeof(Element));
    if (reader.stack == NULL) PyErr_NoMemory();
    if (reader.stack == NULL || reader.visible == NULL || reader.features == NULL ||
        reader.anchor_text == NULL)
        goto done;
    reader.stack[0].tag = PyUnicode_FromString("#root");
    if (reader.stack[0].tag == NULL) goto done;
    Scan scan = {PyUnicode_KIND(markup), PyUnicode_DATA(markup), PyUnicode_GET_LENGTH(markup),
                 PyTuple_GET_ITEM(helpers, 0), NULL, &reader};
    int outcome = run_scan(&scan, markup);
    if (outcome == 1 && close_anchor(&reader) == 0) {
        result = Py_BuildValue("(OOnn)", reader.visible, reader.features, reader.images,
                               reader.hidden_chunks);
    } else if (outcome == 0) {
        result = Py_NewRef(Py_None);
    }
done:
    if (reader.stack != NULL) {
        for (Py_ssize_t depth = 0; depth < reader.depth; depth++)
            clear_element(&reader.stack[depth]);
        PyMem_Free(reader.stack);
    }
    Py_XDECREF(reader.visible);
    Py_XDECREF(reader.features);
    Py_XDECREF(reader.anchor_href);
    Py_XDECREF(reader.anchor_text);
    return result;
}

/* The next position of `needle` at or after `start`, for starts that only grow (html.py's
 * _NextFinder): a found position is kept until passed, and 'none left' is remembered. */
typedef struct {
    const char *needle;
    Py_ssize_t found; /* -2: not searched yet */
} NextFinder;

static Py_ssize_t find_next(NextFinder *finder, int kind, const void *data, Py_ssize_t size,
                            Py_ssize_t start) {
    if (finder->found == -2 || (finder->found != -1 && finder->found < start)) {
        Py_ssize_t length = (Py_ssize_t)strlen(finder->needle);
        finder->found = -1;
        for (Py_ssize_t at = start; at + length <= size; at++) {
            Py_ssize_t i = 0;
            while (i < length &&
                   PyUnicode_READ(kind, data, at + i) == (Py_UCS4)finder->needle[i])
                i++;
            if (i == length) {
                finder->found = at;
                break;
            }
        }
    }
    return finder->found;
}

/* bounded_markup(markup, MAX_TAG_CHARS, MAX_COMMENT_CHARS, MAX_LT_IN_TAG): html.py's
 * `_bounded_markup` (the same object back when nothing changes). */
static PyObject *bounded_markup(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "bounded_markup(markup: str, int, int, int)");
        return NULL;
    }
    PyObject *markup = args[0];
    Py_ssize_t most_tag = PyLong_AsSsize_t(args[1]), most_comment = PyLong_AsSsize_t(args[2]),
               most_lt = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred() || READY(markup) < 0) return NULL;
    int kind = PyUnicode_KIND(markup);
    const void *data = PyUnicode_DATA(markup);
    Py_ssize_t size = PyUnicode_GET_LENGTH(markup);
    NextFinder next_lt = {"<", -2}, next_gt = {">", -2}, next_comment_end = {"-->", -2};
    Py_ssize_t *turned = NULL, count = 0, capacity = 0; /* the '<' made '&lt;' */
    Py_ssize_t position = 0, opening;
    while ((opening = find_next(&next_lt, kind, data, size, position)) != -1) {
        Py_UCS4 second = opening + 1 < size ? PyUnicode_READ(kind, data, opening + 1) : 0;
        Py_UCS4 third = opening + 2 < size ? PyUnicode_READ(kind, data, opening + 2) : 0;
        Py_UCS4 fourth = opening + 3 < size ? PyUnicode_READ(kind, data, opening + 3) : 0;
        if (second == '!' && third == '-' && fourth == '-') { /* '<!--' */
            Py_ssize_t end = find_next(&next_comment_end, kind, data, size, opening + 4);
            if (end != -1 && end - opening <= most_comment) {
                position = end + 3;
                continue;
            }
        } else if (!(second == '!' && third == '[')) { /* not '<![' */
            Py_ssize_t end = find_next(&next_gt, kind, data, size, opening + 1);
            if (end != -1 && end - opening <= most_tag) {
                /* at most most_lt other '<' before its '>' (_few_lt_before) */
                Py_ssize_t probe = opening, seen = 0;
                for (; seen <= most_lt; seen++) {
                    probe++;
                    while (probe < end && PyUnicode_READ(kind, data, probe) != '<') probe++;
                    if (probe >= end) break;
                }
                if (seen <= most_lt) {
                    position = end + 1;
                    continue;
                }
            }
        }
        if (count == capacity) {
            capacity = capacity ? 2 * capacity : 16;
            Py_ssize_t *grown = PyMem_Realloc(turned, (size_t)capacity * sizeof(Py_ssize_t));
            if (grown == NULL) {
                PyMem_Free(turned);
                return PyErr_NoMemory();
            }
            turned = grown;
        }
        turned[count++] = opening;
        position = opening + 1;
    }
    if (count == 0) return Py_NewRef(markup);
    PyObject *bounded = PyUnicode_New(size + 3 * count, PyUnicode_MAX_CHAR_VALUE(markup));
    if (bounded != NULL) {
        Py_ssize_t copied = 0, written = 0;
        for (Py_ssize_t n = 0; n <= count; n++) {
            Py_ssize_t until = n < count ? turned[n] : size;
            if (PyUnicode_CopyCharacters(bounded, written, markup, copied, until - copied) < 0) {
                Py_CLEAR(bounded);
                break;
            }
            written += until - copied;
            if (n == count) break;
            int out_kind = PyUnicode_KIND(bounded);
            void *out = PyUnicode_DATA(bounded);
            PyUnicode_WRITE(out_kind, out, written, '&');
            PyUnicode_WRITE(out_kind, out, written + 1, 'l');
            PyUnicode_WRITE(out_kind, out, written + 2, 't');
            PyUnicode_WRITE(out_kind, out, written + 3, ';');
            written += 4;
            copied = until + 1;
        }
    }
    PyMem_Free(turned);
    return bounded;
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

/* header_fields(block, position) -> [name, value, ...] or None: parse.py's `_header_fields`
 * (each header as `_HEADER_FIELD` reads it: a name of printable ASCII but ':', the ':', blanks,
 * its value lines; the value with its trailing '\r' and '\n' taken off). */
static PyObject *header_fields(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "header_fields(block: str, position: int)");
        return NULL;
    }
    PyObject *block = args[0];
    Py_ssize_t position = PyLong_AsSsize_t(args[1]);
    if ((position == -1 && PyErr_Occurred()) || READY(block) < 0) return NULL;
    int kind = PyUnicode_KIND(block);
    const void *data = PyUnicode_DATA(block);
    Py_ssize_t size = PyUnicode_GET_LENGTH(block);
    if (position < 0) position = 0;
    PyObject *fields = PyList_New(0);
    if (fields == NULL) return NULL;
    while (position < size) {
        Py_ssize_t name_end = position;
        Py_UCS4 c = 0;
        while (name_end < size && (c = PyUnicode_READ(kind, data, name_end)) >= 041 && c <= 0176 &&
               c != ':')
            name_end++;
        if (name_end == position || name_end >= size || c != ':') goto not_plain;
        Py_ssize_t value_start = name_end + 1;
        while (value_start < size && ((c = PyUnicode_READ(kind, data, value_start)) == ' ' ||
                                      c == '\t'))
            value_start++;
        /* the first line, then each line opening with a blank; every one ends with '\n' */
        Py_ssize_t end = value_start;
        for (;;) {
            while (end < size && PyUnicode_READ(kind, data, end) != '\n') end++;
            if (end >= size) goto not_plain;
            end++;
            if (end >= size) break;
            c = PyUnicode_READ(kind, data, end);
            if (c != ' ' && c != '\t') break;
        }
        Py_ssize_t value_end = end;
        while (value_end > value_start &&
               ((c = PyUnicode_READ(kind, data, value_end - 1)) == '\r' || c == '\n'))
            value_end--;
        PyObject *name = PyUnicode_Substring(block, position, name_end);
        PyObject *value = name == NULL ? NULL : PyUnicode_Substring(block, value_start, value_end);
        int failed = value == NULL || PyList_Append(fields, name) < 0 ||
                     PyList_Append(fields, value) < 0;
        Py_XDECREF(name);
        Py_XDECREF(value);
        if (failed) {
            Py_DECREF(fields);
            return NULL;
        }
        position = end;
    }
    return fields;
not_plain:
    Py_DECREF(fields);
    Py_RETURN_NONE;
}

/* `name.lower()` of a str of ASCII characters only (header_fields' names), as a new reference:
 * the name itself when it has no capital letter. */
static PyObject *ascii_lowered(PyObject *name) {
    if (!PyUnicode_IS_ASCII(name)) return PyObject_CallMethod(name, "lower", NULL);
    Py_ssize_t size = PyUnicode_GET_LENGTH(name);
    const Py_UCS1 *from = PyUnicode_1BYTE_DATA(name);
    Py_ssize_t first_capital = 0;
    while (first_capital < size && !(from[first_capital] >= 'A' && from[first_capital] <= 'Z'))
        first_capital++;
    if (first_capital == size) {
        Py_INCREF(name);
        return name;
    }
    PyObject *lowered = PyUnicode_New(size, 127);
    if (lowered == NULL) return NULL;
    Py_UCS1 *to = PyUnicode_1BYTE_DATA(lowered);
    for (Py_ssize_t at = 0; at < size; at++)
        to[at] = (from[at] >= 'A' && from[at] <= 'Z') ? (Py_UCS1)(from[at] + 32) : from[at];
    return lowered;
}

/* header_table(block, position) -> (headers, first, lowered) or None: parse.py's `_header_table`
 * (header_fields' fields as (name, value) pairs, their names lower-cased, and
 * {lower-cased name: the position of its first field}). */
static PyObject *header_table(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *fields = header_fields(module, args, nargs);
    if (fields == NULL || fields == Py_None) return fields;
    Py_ssize_t count = PyList_GET_SIZE(fields) / 2;
    PyObject *headers = PyList_New(count); /* (a list's NULL items are skipped when it is freed) */
    PyObject *lowered = PyList_New(count);
    PyObject *first = PyDict_New();
    PyObject *table = NULL;
    if (headers == NULL || lowered == NULL || first == NULL) goto done;
    for (Py_ssize_t at = 0; at < count; at++) {
        PyObject *pair =
            PyTuple_Pack(2, PyList_GET_ITEM(fields, 2 * at), PyList_GET_ITEM(fields, 2 * at + 1));
        if (pair == NULL) goto done;
        PyList_SET_ITEM(headers, at, pair);
        PyObject *name = ascii_lowered(PyList_GET_ITEM(fields, 2 * at));
        if (name == NULL) goto done;
        PyList_SET_ITEM(lowered, at, name);
        PyObject *position = PyLong_FromSsize_t(at);
        if (position == NULL) goto done;
        PyObject *kept = PyDict_SetDefault(first, name, position); /* borrowed; the first stays */
        Py_DECREF(position);
        if (kept == NULL) goto done;
    }
    table = PyTuple_Pack(3, headers, first, lowered);
done:
    Py_DECREF(fields);
    Py_XDECREF(headers);
    Py_XDECREF(lowered);
    Py_XDECREF(first);
    return table;
}

/* content_type_cut(data, limit) -> bytes or None: parse.py's `_cut_before_nth_content_type`
 * (`data` up to the line of its `limit + 1`-th "\ncontent-type:", in any ASCII case), without
 * lower-casing a copy of the message: each line break found by memchr, the name compared after it. */
static PyObject *content_type_cut(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "content_type_cut(data: bytes, limit: int)");
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    const char *data = PyBytes_AS_STRING(args[0]);
    const char *end = data + PyBytes_GET_SIZE(args[0]);
    static const char NAME[] = "content-type:";
    const Py_ssize_t name_length = sizeof NAME - 1;
    Py_ssize_t seen = 0;
    if (limit < 0) return PyBytes_FromStringAndSize(data, 0); /* (the Python loop's empty range) */
    for (const char *line = data; line < end;) {
        const char *line_break = memchr(line, '\n', (size_t)(end - line));
        if (line_break == NULL) break;
        line = line_break + 1;
        if (end - line < name_length) break;
        Py_ssize_t at = 0;
        while (at < name_length) {
            unsigned char c = (unsigned char)line[at];
            if (c >= 'A' && c <= 'Z') c += 'a' - 'A'; /* bytes.lower(): ASCII letters only */
            if (c != (unsigned char)NAME[at]) break;
            at++;
        }
        if (at == name_length && ++seen > limit) return PyBytes_FromStringAndSize(data, line - data);
    }
    Py_RETURN_NONE;
}

/* ---- readings: mail_reader.decode_readings (the definition) in one pass -------------------------
 *
 * answer: (readings, strs) as two native int64s, each reading's (features, defects), each str's
 * length in code points, then the UTF-8 ('surrogatepass') of the strs joined. Every count and
 * length is checked before it is used: bytes of any other shape are a ValueError. */

static void
native_int64s(const char *at, Py_ssize_t count, int64_t *out)
{
    memcpy(out, at, (size_t)count * sizeof(int64_t));
}

/* Where the `count` code points of the UTF-8 from `at` end (at most `end`), -1 if sooner: each
 * code point has one byte that is not a continuation byte (10xxxxxx), the lone surrogates that
 * 'surrogatepass' writes too; a run of ASCII is passed 8 bytes at a time. Only a bound: the
 * decoder then checks the bytes. */
static Py_ssize_t
utf8_span_end(const unsigned char *text, Py_ssize_t at, Py_ssize_t end, int64_t count)
{
    while (count > 0) {
        if (count >= 8 && end - at >= 8) {
            uint64_t word;
            memcpy(&word, text + at, 8);
            if ((word & 0x8080808080808080ULL) == 0) {
                at += 8;
                count -= 8;
                continue;
            }
        }
        if (at >= end)
            return -1;
        at++;
        while (at < end && (text[at] & 0xC0) == 0x80)
            at++;
        count--;
    }
    return at;
}

/* The str of the code points `count` from text[*at] (UTF-8, 'surrogatepass'), *at moved past
 * them; NULL with a ValueError for bytes that do not hold them. */
static PyObject *
next_string(const unsigned char *text, Py_ssize_t *at, Py_ssize_t end, int64_t count)
{
    Py_ssize_t stop = utf8_span_end(text, *at, end, count);
    if (stop < 0) {
        PyErr_SetString(PyExc_ValueError, "a chunk's readings do not add up");
        return NULL;
    }
    PyObject *made = PyUnicode_DecodeUTF8((const char *)text + *at, stop - *at, "surrogatepass");
    if (made != NULL && (READY(made) < 0 || PyUnicode_GET_LENGTH(made) != count)) {
        Py_DECREF(made);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "a chunk's readings do not add up");
        return NULL;
    }
    *at = stop;
    return made;
}

static PyObject *
readings(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_Check(args[0]) || !PyLong_Check(args[1]) || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "readings(answer: bytes, count: int, make) expected");
        return NULL;
    }
    const char *data = PyBytes_AS_STRING(args[0]);
    const Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    const Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    int64_t head[2];
    if (size < (Py_ssize_t)sizeof(head)) {
        PyErr_Format(PyExc_ValueError, "a chunk of %zd messages came back as %zd bytes", count, size);
        return NULL;
    }
    native_int64s(data, 2, head);
    const int64_t n = head[0], n_strings = head[1];
    if (n != count || n < 0 || n_strings < 0) {
        PyErr_Format(PyExc_ValueError, "a chunk of %zd messages came back as %lld readings", count, (long long)n);
        return NULL;
    }
    /* (n <= size / 16 and n_strings <= size / 8 keep the offsets below from overflowing) */
    const Py_ssize_t room = (size - 16) / 8;
    if (n > room / 2 || n_strings > room - 2 * n) {
        PyErr_Format(PyExc_ValueError, "a chunk's readings cut short: %zd bytes", size);
        return NULL;
    }
    const char *counts_at = data + 16, *lengths_at = counts_at + 16 * n, *text_at = lengths_at + 8 * n_strings;
    int64_t *counts = PyMem_Malloc((size_t)(2 * n ? 2 * n : 1) * sizeof(int64_t));
    int64_t *lengths = PyMem_Malloc((size_t)(n_strings ? n_strings : 1) * sizeof(int64_t));
    PyObject *result = NULL;
    if (counts == NULL || lengths == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    native_int64s(counts_at, 2 * n, counts);
    native_int64s(lengths_at, n_strings, lengths);
    int64_t strings_named = 2 * n;
    for (int64_t i = 0; i < 2 * n; i++) {
        if (counts[i] < 0 || counts[i] > n_strings - strings_named)
            goto not_adding_up;
        strings_named += counts[i];
    }
    if (strings_named != n_strings)
        goto not_adding_up;
    for (int64_t k = 0; k < n_strings; k++)
        if (lengths[k] < 0)
            goto not_adding_up;
    /* each str decoded on its own, so that each is stored as its own code points ask (a chunk's
     * one '\u2019' would make every str of one decoded whole two bytes a character) */
    const unsigned char *text = (const unsigned char *)text_at;
    const Py_ssize_t text_size = size - (text_at - data);
    result = PyList_New((Py_ssize_t)n);
    if (result == NULL)
        goto done;
    Py_ssize_t at = 0, k = 0;
    for (int64_t i = 0; i < n; i++) {
        PyObject *fields[4] = {NULL, NULL, NULL, NULL};
        int failed = 0;
        for (int f = 0; f < 2 && !failed; f++, k++)
            failed = (fields[f] = next_string(text, &at, text_size, lengths[k])) == NULL;
        for (int f = 2; f < 4 && !failed; f++) {
            const int64_t many = counts[2 * i + f - 2];
            failed = (fields[f] = PyList_New((Py_ssize_t)many)) == NULL;
            for (int64_t j = 0; j < many && !failed; j++, k++) {
                PyObject *name = next_string(text, &at, text_size, lengths[k]);
                failed = name == NULL;
                if (!failed)
                    PyList_SET_ITEM(fields[f], (Py_ssize_t)j, name);
            }
        }
        PyObject *made = failed ? NULL : PyObject_Vectorcall(args[2], fields, 4, NULL);
        for (int f = 0; f < 4; f++)
            Py_XDECREF(fields[f]);
        if (made == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)i, made);
    }
    if (at != text_size) {
        Py_CLEAR(result);
        goto not_adding_up;
    }
    goto done;
not_adding_up:
    PyErr_SetString(PyExc_ValueError, "a chunk's readings do not add up");
done:
    PyMem_Free(counts);
    PyMem_Free(lengths);
    return result;
}

/* ---- message_id: identity.py's message_id_of, where the value is ASCII ------------------------
 *
 * `message_id(data)`: the normalised Message-ID of `data` (a str), None where its header block
 * has no Message-ID field or an empty one, or False where the field's value holds a byte beyond
 * ASCII or the id is longer than MAX_ID_CHARS: identity.py's definition then reads the message
 * (its UTF-8 decoding, Unicode white space and lower case, and digest). Reading a replay's mail
 * folder, the definition was a third of the time of reading the files. */

#define HEADER_BLOCK_LIMIT ((Py_ssize_t)256 * 1024) /* identity.py's */
#define MAX_ID_CHARS 500                            /* identity.py's */

/* identity.py's `_header_block_end`: where `\r?\n\r?\n` first matches (the first '\n' followed by
 * an empty line, from its '\r' when one comes before it); n where it does not. */
static Py_ssize_t
header_block_end(const char *s, Py_ssize_t n)
{
    const char *p = s;
    while ((p = memchr(p, '\n', (size_t)(s + n - p))) != NULL) {
        Py_ssize_t i = p - s;
        if ((i + 1 < n && s[i + 1] == '\n') || (i + 2 < n && s[i + 1] == '\r' && s[i + 2] == '\n'))
            return i > 0 && s[i - 1] == '\r' ? i - 1 : i;
        p++;
    }
    return n;
}

/* The value of the first line of block[0, n) that `^Message-ID[ \t]*:(.*(?:\r?\n[ \t].*)*)` matches
 * without case (identity.py's _FIELD): [*start, *stop), folded lines and all. 0: no such line. */
static int
message_id_field(const char *b, Py_ssize_t n, Py_ssize_t *start, Py_ssize_t *stop)
{
    static const char NAME[] = "message-id";
    const Py_ssize_t m = (Py_ssize_t)sizeof(NAME) - 1;
    Py_ssize_t line = 0;
    while (line < n) {
        Py_ssize_t k = 0;
        while (k < m && line + k < n && (b[line + k] | (b[line + k] >= 'A' && b[line + k] <= 'Z' ? 0x20 : 0)) == NAME[k])
            k++;
        if (k == m) {
            Py_ssize_t i = line + m;
            while (i < n && (b[i] == ' ' || b[i] == '\t'))
                i++;
            if (i < n && b[i] == ':') {
                *start = ++i;
                /* `.*` to the line's end, then each `\n[ \t].*` that follows ('\r' is one of `.`) */
                const char *end = memchr(b + i, '\n', (size_t)(n - i));
                Py_ssize_t e = end ? end - b : n;
                while (e + 1 < n && (b[e + 1] == ' ' || b[e + 1] == '\t')) {
                    end = memchr(b + e + 1, '\n', (size_t)(n - e - 1));
                    e = end ? end - b : n;
                }
                *stop = e;
                return 1;
            }
        }
        const char *next = memchr(b + line, '\n', (size_t)(n - line));
        if (next == NULL)
            break;
        line = next - b + 1;
    }
    return 0;
}

static PyObject *
message_id(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "message_id(data) takes one bytes object");
        return NULL;
    }
    const char *data = PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    if (n > HEADER_BLOCK_LIMIT)
        n = HEADER_BLOCK_LIMIT;
    n = header_block_end(data, n);
    Py_ssize_t start, stop;
    if (!message_id_field(data, n, &start, &stop))
        Py_RETURN_NONE;
    for (Py_ssize_t i = start; i < stop; i++)
        if ((unsigned char)data[i] >= 0x80)
            Py_RETURN_FALSE; /* (UTF-8 with replacement, Unicode white space and case: the definition's) */
    /* the first `<([^<>]*)>`, else the whole value */
    Py_ssize_t lo = start, hi = stop;
    for (Py_ssize_t i = start; i < stop; i++) {
        if (data[i] != '<')
            continue;
        Py_ssize_t j = i + 1;
        while (j < stop && data[j] != '<' && data[j] != '>')
            j++;
        if (j < stop && data[j] == '>') {
            lo = i + 1, hi = j;
            break;
        }
        i = j - 1; /* (a '<' at j starts the next try; none: no match) */
    }
    /* white space removed (`\s` of a str pattern: Py_UNICODE_ISSPACE), the domain after the last
     * '@' lower-cased */
    char kept[MAX_ID_CHARS];
    Py_ssize_t length = 0, at = -1;
    for (Py_ssize_t i = lo; i < hi; i++) {
        char c = data[i];
        if (Py_UNICODE_ISSPACE((Py_UCS4)(unsigned char)c))
            continue;
        if (length == MAX_ID_CHARS)
            Py_RETURN_FALSE; /* (named by its digest: the definition's) */
        if (c == '@')
            at = length;
        kept[length++] = c;
    }
    if (length == 0)
        Py_RETURN_NONE;
    for (Py_ssize_t i = at + 1; at >= 0 && i < length; i++)
        if (kept[i] >= 'A' && kept[i] <= 'Z')
            kept[i] = (char)(kept[i] | 0x20);
    return PyUnicode_DecodeASCII(kept, length, NULL);
}

static PyMethodDef METHODS[] = {
    {"content_type_cut", (PyCFunction)(void (*)(void))content_type_cut, METH_FASTCALL,
     "content_type_cut(data, limit) -> bytes or None (parse.py's _cut_before_nth_content_type)."},
    {"header_fields", (PyCFunction)(void (*)(void))header_fields, METH_FASTCALL,
     "header_fields(block, position) -> [name, value, ...] or None (parse.py's _header_fields)."},
    {"header_table", (PyCFunction)(void (*)(void))header_table, METH_FASTCALL,
     "header_table(block, position) -> (headers, first, lowered) or None (parse.py's "
     "_header_table)."},
    {"read", (PyCFunction)(void (*)(void))read_markup, METH_FASTCALL,
     "read(markup, helpers) -> (visible, features, images, hidden chunks), or None."},
    {"relay_words", (PyCFunction)(void (*)(void))relay_words, METH_FASTCALL,
     "relay_words(spaced) -> [is_ip, text, ...] of a Received value (parse.py's _relay_words)."},
    {"bounded_markup", (PyCFunction)(void (*)(void))bounded_markup, METH_FASTCALL,
     "bounded_markup(markup, max_tag, max_comment, max_lt) -> html.py's _bounded_markup."},
    {"scan", (PyCFunction)(void (*)(void))scan_markup, METH_FASTCALL,
     "scan(markup, unescape) -> flat list of (kind, a, b) tokens, or None to use html._scan."},
    {"message_id", (PyCFunction)(void (*)(void))message_id, METH_FASTCALL,
     "message_id(data) -> the normalised Message-ID, None, or False to ask identity.message_id_of's "
     "definition (a value beyond ASCII, or too long)."},
    {"readings", (PyCFunction)(void (*)(void))readings, METH_FASTCALL,
     "readings(answer, count, make) -> [make(subject, body, features, defects), ...] "
     "(mail_reader.decode_readings)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_native",
                                    "The hot loops of reading mail, in C (html.py, parse.py).",
                                    -1, METHODS};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&MODULE); }
