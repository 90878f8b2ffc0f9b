/*
 * stream_nb.events._codec: the prediction messages of a batch, in C.
 *
 * codec.py stays the definition (PredictionEncoder.encode). This module writes the same bytes
 * for the messages of the contract's common shape: an Event whose id and source topic are str
 * and partition and offset int, classes that are all str, finite float probabilities, a str
 * verdict or none, clues of (str, finite float), a score that is a float (finite, or infinite as the
 * strings "Infinity"/"-Infinity") or none. A dict subclass (model.posterior.Posterior) is read
 * as its dict, as codec.py reads it (dict.items). Strings are written as json's encoder writes
 * them with ensure_ascii=False (`"`, `\`, \b \f \n \r \t escaped, other controls as \u00xx,
 * everything else as is) and then UTF-8; floats as repr() writes them (CPython's own
 * PyOS_double_to_string, 'r'). Any other message, and one that UTF-8 cannot hold (a lone
 * surrogate), is declined (None): the caller encodes it in Python, which may refuse it.
 *
 * decode_event reads the other way, for the events of the common shape: a JSON object whose only
 * keys are "id" and "text" (and "label" and "unlearn" on the labeled topic), each once, with a
 * non-empty str id, a str text, and a non-empty str or an integer of up to 18 digits as label and
 * as unlearn; a correction without a label (a take-back only) is taken when "label" is absent, and
 * one whose unlearn equals its label (value and type) is declined. Anything else (an
 * unknown key, a "key" field, a null, features, a float, a lone surrogate escape, bytes that are
 * not UTF-8, a value past max_bytes) is declined: codec.py's decoder gives the Event or the
 * refusal. The Events it makes have mail and key None.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buffer;

enum { WRITTEN = 0, FAILED = -1, DECLINED = 1 };

static int
reserve(Buffer *b, Py_ssize_t extra)
{
    if (b->len + extra <= b->cap)
        return WRITTEN;
    Py_ssize_t cap = b->cap ? b->cap : 512;
    while (cap < b->len + extra)
        cap *= 2;
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return FAILED;
    }
    b->data = data;
    b->cap = cap;
    return WRITTEN;
}

static int
put(Buffer *b, const char *bytes, Py_ssize_t n)
{
    if (reserve(b, n) < 0)
        return FAILED;
    memcpy(b->data + b->len, bytes, (size_t)n);
    b->len += n;
    return WRITTEN;
}

#define PUT_LITERAL(b, literal) put((b), (literal), (Py_ssize_t)(sizeof(literal) - 1))

/* A JSON string literal of the exact str `text`, as json.encoder.encode_basestring writes it. */
static int
put_string(Buffer *b, PyObject *text)
{
    if (!PyUnicode_CheckExact(text))
        return DECLINED;
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    if (utf8 == NULL) { /* a lone surrogate: UTF-8 cannot hold it; Python's path refuses it */
        PyErr_Clear();
        return DECLINED;
    }
    if (reserve(b, 6 * n + 2) < 0)
        return FAILED;
    char *out = b->data + b->len;
    *out++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)utf8[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *out++ = (char)c;
            continue;
        }
        *out++ = '\\';
        switch (c) {
        case '"': *out++ = '"'; break;
        case '\\': *out++ = '\\'; break;
        case '\b': *out++ = 'b'; break;
        case '\f': *out++ = 'f'; break;
        case '\n': *out++ = 'n'; break;
        case '\r': *out++ = 'r'; break;
        case '\t': *out++ = 't'; break;
        default: /* \u00xx, lowercase hex as json writes it */
            *out++ = 'u';
            *out++ = '0';
            *out++ = '0';
            *out++ = "0123456789abcdef"[c >> 4];
            *out++ = "0123456789abcdef"[c & 15];
        }
    }
    *out++ = '"';
    b->len = out - b->data;
    return WRITTEN;
}

/* repr() of a finite float. */
static int
put_float(Buffer *b, double value)
{
    char *repr = PyOS_double_to_string(value, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (repr == NULL)
        return FAILED;
    int outcome = put(b, repr, (Py_ssize_t)strlen(repr));
    PyMem_Free(repr);
    return outcome;
}

/* repr() of an exact int that fits in a long long. */
static int
put_int(Buffer *b, PyObject *number)
{
    if (!PyLong_CheckExact(number))
        return DECLINED;
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(number, &overflow);
    if (overflow || (value == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return DECLINED;
    }
    char digits[32];
    int n = snprintf(digits, sizeof(digits), "%lld", value);
    return put(b, digits, n);
}

#define STEP(call)                  \
    do {                            \
        int outcome_ = (call);      \
        if (outcome_ != WRITTEN)    \
            return outcome_;        \
    } while (0)

static PyObject *attribute_id, *attribute_source, *attribute_topic, *attribute_partition, *attribute_offset;

/* Writes attribute `name` of `object` with `writer`. */
static int
put_attribute(Buffer *b, PyObject *object, PyObject *name, int (*writer)(Buffer *, PyObject *))
{
    PyObject *value = PyObject_GetAttr(object, name);
    if (value == NULL)
        return FAILED;
    int outcome = writer(b, value);
    Py_DECREF(value);
    return outcome;
}

/* The message after its label is chosen. Getting an attribute of `event` can run any code (a
 * property), which may change `probabilities` or drop its keys: `best` is a strong reference,
 * and the probabilities are checked again as they are written. */
/* ,"score":<float> (an infinite score as the string "Infinity" or "-Infinity"); NaN is declined */
static int
put_score(Buffer *b, PyObject *score)
{
    if (score == Py_None)
        return WRITTEN;
    if (!PyFloat_CheckExact(score))
        return DECLINED;
    double value = PyFloat_AS_DOUBLE(score);
    if (isnan(value))
        return DECLINED;
    STEP(PUT_LITERAL(b, ",\"score\":"));
    if (isinf(value))
        return value > 0 ? PUT_LITERAL(b, "\"Infinity\"") : PUT_LITERAL(b, "\"-Infinity\"");
    return put_float(b, value);
}

static int
message_with_label(Buffer *b, PyObject *event, PyObject *best, PyObject *probabilities, PyObject *model_json,
                   PyObject *verdict, PyObject *clues, PyObject *score)
{
    PyObject *cls, *p;
    Py_ssize_t position;
    STEP(PUT_LITERAL(b, "{\"id\":"));
    STEP(put_attribute(b, event, attribute_id, put_string));
    STEP(PUT_LITERAL(b, ",\"label\":"));
    STEP(best == NULL ? PUT_LITERAL(b, "null") : put_string(b, best));
    STEP(PUT_LITERAL(b, ",\"proba\":{"));
    position = 0;
    for (int first = 1; PyDict_Next(probabilities, &position, &cls, &p); first = 0) {
        if (!PyFloat_CheckExact(p) || !isfinite(PyFloat_AS_DOUBLE(p)))
            return DECLINED;
        if (!first)
            STEP(PUT_LITERAL(b, ","));
        STEP(put_string(b, cls));
        STEP(PUT_LITERAL(b, ":"));
        STEP(put_float(b, PyFloat_AS_DOUBLE(p)));
    }
    STEP(PUT_LITERAL(b, "}"));
    STEP(put_score(b, score));
    STEP(PUT_LITERAL(b, ",\"model\":"));
    Py_ssize_t n;
    const char *model = PyUnicode_AsUTF8AndSize(model_json, &n);
    if (model == NULL) {
        PyErr_Clear();
        return DECLINED;
    }
    STEP(put(b, model, n));
    PyObject *source = PyObject_GetAttr(event, attribute_source);
    if (source == NULL)
        return FAILED;
    int outcome = PUT_LITERAL(b, ",\"source\":{\"topic\":");
    if (outcome == WRITTEN)
        outcome = put_attribute(b, source, attribute_topic, put_string);
    if (outcome == WRITTEN)
        outcome = PUT_LITERAL(b, ",\"partition\":");
    if (outcome == WRITTEN)
        outcome = put_attribute(b, source, attribute_partition, put_int);
    if (outcome == WRITTEN)
        outcome = PUT_LITERAL(b, ",\"offset\":");
    if (outcome == WRITTEN)
        outcome = put_attribute(b, source, attribute_offset, put_int);
    Py_DECREF(source);
    STEP(outcome);
    STEP(PUT_LITERAL(b, "}"));
    if (verdict != Py_None) {
        STEP(PUT_LITERAL(b, ",\"verdict\":"));
        STEP(put_string(b, verdict));
    }
    if (clues != Py_None) {
        STEP(PUT_LITERAL(b, ",\"clues\":["));
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(clues); j++) {
            PyObject *clue = PyList_GET_ITEM(clues, j);
            if (!PyTuple_CheckExact(clue) || PyTuple_GET_SIZE(clue) != 2)
                return DECLINED;
            PyObject *weight = PyTuple_GET_ITEM(clue, 1);
            if (!PyFloat_CheckExact(weight) || !isfinite(PyFloat_AS_DOUBLE(weight)))
                return DECLINED; /* infinite evidence is written as a string: Python's path */
            if (j)
                STEP(PUT_LITERAL(b, ","));
            STEP(PUT_LITERAL(b, "["));
            STEP(put_string(b, PyTuple_GET_ITEM(clue, 0)));
            STEP(PUT_LITERAL(b, ","));
            STEP(put_float(b, PyFloat_AS_DOUBLE(weight)));
            STEP(PUT_LITERAL(b, "]"));
        }
        STEP(PUT_LITERAL(b, "]"));
    }
    return PUT_LITERAL(b, "}");
}

/* One message into b (emptied first): WRITTEN, DECLINED or FAILED. */
static int
message(Buffer *b, PyObject *event, PyObject *probabilities, PyObject *model_json, PyObject *verdict,
        PyObject *clues, PyObject *score)
{
    b->len = 0;
    if (!PyDict_Check(probabilities) || !PyUnicode_CheckExact(model_json)
        || (verdict != Py_None && !PyUnicode_CheckExact(verdict)) || (clues != Py_None && !PyList_CheckExact(clues)))
        return DECLINED;
    /* the label: the first class of largest probability; every class a str, every p finite */
    PyObject *best = NULL, *cls, *p;
    double best_p = -1.0;
    Py_ssize_t position = 0;
    while (PyDict_Next(probabilities, &position, &cls, &p)) {
        if (!PyUnicode_CheckExact(cls) || !PyFloat_CheckExact(p) || !isfinite(PyFloat_AS_DOUBLE(p)))
            return DECLINED;
        if (best == NULL || PyFloat_AS_DOUBLE(p) > best_p) {
            best = cls;
            best_p = PyFloat_AS_DOUBLE(p);
        }
    }
    Py_XINCREF(best);
    int outcome = message_with_label(b, event, best, probabilities, model_json, verdict, clues, score);
    Py_XDECREF(best);
    return outcome;
}

PyDoc_STRVAR(encode_predictions_doc,
"encode_predictions(events, probabilities, model_json, verdicts, clues, scores) -> list\n\n"
"PredictionEncoder.encode's (key, value) for each event, byte for byte, where its message has\n"
"the common shape (see the module's doc); None where it does not, or where probabilities[i]\n"
"is None. model_json is the encoder's shared \"model\" part; verdicts, clues and scores are lists\n"
"(an item None: no field) or None.");

static PyObject *
encode_predictions(PyObject *module, PyObject *args)
{
    PyObject *events, *probabilities, *model_json, *verdicts, *clues, *scores = Py_None;
    if (!PyArg_ParseTuple(args, "O!O!UOO|O:encode_predictions", &PyList_Type, &events, &PyList_Type, &probabilities,
                          &model_json, &verdicts, &clues, &scores))
        return NULL;
    const Py_ssize_t n = PyList_GET_SIZE(events);
    if (PyList_GET_SIZE(probabilities) != n || (verdicts != Py_None && (!PyList_Check(verdicts) || PyList_GET_SIZE(verdicts) != n))
        || (clues != Py_None && (!PyList_Check(clues) || PyList_GET_SIZE(clues) != n))
        || (scores != Py_None && (!PyList_Check(scores) || PyList_GET_SIZE(scores) != n))) {
        PyErr_SetString(PyExc_ValueError,
                        "encode_predictions: events, probabilities, verdicts, clues and scores differ in length");
        return NULL;
    }
    PyObject *result = PyList_New(n);
    if (result == NULL)
        return NULL;
    Buffer b = {NULL, 0, 0};
    for (Py_ssize_t i = 0; i < n; i++) {
        /* an event's attributes can run any code, which may empty these lists: the items are held */
        if (i >= PyList_GET_SIZE(events) || i >= PyList_GET_SIZE(probabilities)
            || (verdicts != Py_None && i >= PyList_GET_SIZE(verdicts)) || (clues != Py_None && i >= PyList_GET_SIZE(clues))
            || (scores != Py_None && i >= PyList_GET_SIZE(scores))) {
            PyErr_SetString(PyExc_RuntimeError, "encode_predictions: a list changed size while it was encoded");
            Py_DECREF(result);
            PyMem_Free(b.data);
            return NULL;
        }
        PyObject *proba = Py_NewRef(PyList_GET_ITEM(probabilities, i)), *item = NULL;
        if (proba != Py_None) {
            PyObject *event = Py_NewRef(PyList_GET_ITEM(events, i));
            PyObject *verdict = Py_NewRef(verdicts == Py_None ? Py_None : PyList_GET_ITEM(verdicts, i));
            PyObject *clue_list = Py_NewRef(clues == Py_None ? Py_None : PyList_GET_ITEM(clues, i));
            PyObject *score = Py_NewRef(scores == Py_None ? Py_None : PyList_GET_ITEM(scores, i));
            int outcome = message(&b, event, proba, model_json, verdict, clue_list, score);
            Py_DECREF(verdict);
            Py_DECREF(clue_list);
            Py_DECREF(score);
            if (outcome == FAILED) {
                Py_DECREF(event);
                Py_DECREF(proba);
                Py_DECREF(result);
                PyMem_Free(b.data);
                return NULL;
            }
            if (outcome == WRITTEN) {
                /* read again, so it may differ from the id written: one that is no str is declined */
                PyObject *id = PyObject_GetAttr(event, attribute_id);
                int declined = id != NULL && !PyUnicode_CheckExact(id);
                PyObject *key = id && !declined ? PyUnicode_AsUTF8String(id) : NULL;
                if (key == NULL && id != NULL && !declined && PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
                    PyErr_Clear();
                    declined = 1;
                }
                PyObject *value = key ? PyBytes_FromStringAndSize(b.data, b.len) : NULL;
                item = value ? PyTuple_Pack(2, key, value) : NULL;
                Py_XDECREF(id);
                Py_XDECREF(key);
                Py_XDECREF(value);
                if (item == NULL && !declined) {
                    Py_DECREF(event);
                    Py_DECREF(proba);
                    Py_DECREF(result);
                    PyMem_Free(b.data);
                    return NULL;
                }
            }
            Py_DECREF(event);
        }
        Py_DECREF(proba);
        PyList_SET_ITEM(result, i, item ? item : Py_NewRef(Py_None));
    }
    PyMem_Free(b.data);
    return result;
}


/* ---- decode_event ------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *p, *end;
} Cursor;

static inline void
skip_space(Cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int
hex4(const unsigned char *p, unsigned int *out)
{
    unsigned int value = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char ch = p[i];
        value <<= 4;
        if (ch >= '0' && ch <= '9')
            value |= (unsigned int)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            value |= (unsigned int)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F')
            value |= (unsigned int)(ch - 'A' + 10);
        else
            return 0;
    }
    *out = value;
    return 1;
}

static int
put_utf8(Buffer *b, unsigned int code)
{
    STEP(reserve(b, 4));
    char *out = b->data + b->len;
    if (code < 0x80) {
        out[0] = (char)code;
        b->len += 1;
    } else if (code < 0x800) {
        out[0] = (char)(0xC0 | (code >> 6));
        out[1] = (char)(0x80 | (code & 0x3F));
        b->len += 2;
    } else if (code < 0x10000) {
        out[0] = (char)(0xE0 | (code >> 12));
        out[1] = (char)(0x80 | ((code >> 6) & 0x3F));
        out[2] = (char)(0x80 | (code & 0x3F));
        b->len += 3;
    } else {
        out[0] = (char)(0xF0 | (code >> 18));
        out[1] = (char)(0x80 | ((code >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((code >> 6) & 0x3F));
        out[3] = (char)(0x80 | (code & 0x3F));
        b->len += 4;
    }
    return WRITTEN;
}

/* Bytes decoded strictly as UTF-8 into a str: WRITTEN, DECLINED (not UTF-8) or FAILED. */
static int
utf8_string(const char *data, Py_ssize_t len, PyObject **out)
{
    *out = PyUnicode_DecodeUTF8(data, len, NULL);
    if (*out != NULL)
        return WRITTEN;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        return FAILED;
    PyErr_Clear();
    return DECLINED;
}

/* A JSON string at c->p (its opening quote) as a str in *out: WRITTEN, DECLINED (a raw control
 * character, a bad or lone-surrogate escape, bytes that are not UTF-8, no closing quote) or
 * FAILED. Escapes are written out as UTF-8 into `scratch`, then decoded strictly, as
 * bytes.decode("utf-8") and json would. */
static int
read_string(Cursor *c, Buffer *scratch, PyObject **out)
{
    const unsigned char *start = ++c->p, *p = start, *end = c->end;
    while (p < end && *p != '"' && *p != '\\' && *p >= 0x20)
        p++;
    if (p >= end || *p < 0x20)
        return DECLINED;
    if (*p == '"') { /* no escapes: the bytes as they are */
        c->p = p + 1;
        return utf8_string((const char *)start, p - start, out);
    }
    scratch->len = 0;
    const unsigned char *run = start;
    for (;;) {
        while (p < end && *p != '"' && *p != '\\' && *p >= 0x20)
            p++;
        if (p >= end || *p < 0x20)
            return DECLINED;
        if (p > run) /* (memcpy wants a buffer even for no bytes) */
            STEP(put(scratch, (const char *)run, p - run));
        if (*p == '"')
            break;
        if (end - p < 2)
            return DECLINED;
        unsigned int code;
        switch (p[1]) {
        case '"': code = '"'; break;
        case '\\': code = '\\'; break;
        case '/': code = '/'; break;
        case 'b': code = '\b'; break;
        case 'f': code = '\f'; break;
        case 'n': code = '\n'; break;
        case 'r': code = '\r'; break;
        case 't': code = '\t'; break;
        case 'u':
            if (end - p < 6 || !hex4(p + 2, &code))
                return DECLINED;
            if (code >= 0xDC00 && code <= 0xDFFF)
                return DECLINED; /* a lone low surrogate */
            if (code >= 0xD800 && code <= 0xDBFF) {
                unsigned int low;
                if (end - p < 12 || p[6] != '\\' || p[7] != 'u' || !hex4(p + 8, &low) || low < 0xDC00 || low > 0xDFFF)
                    return DECLINED; /* a lone high surrogate */
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                p += 6;
            }
            p += 4;
            break;
        default:
            return DECLINED;
        }
        STEP(put_utf8(scratch, code));
        p += 2;
        run = p;
    }
    c->p = p + 1;
    return utf8_string(scratch->data, scratch->len, out);
}

/* An integer label as json reads it ("-0" is 0; no leading zeros, fraction or exponent), up to
 * 18 digits so that it fits a long long. */
static int
read_integer(Cursor *c, PyObject **out)
{
    const unsigned char *p = c->p;
    int negative = 0;
    if (p < c->end && *p == '-') {
        negative = 1;
        p++;
    }
    const unsigned char *digits = p;
    long long value = 0;
    while (p < c->end && *p >= '0' && *p <= '9') {
        /* at most 18 digits fit a long long; counted before the product, which would overflow */
        if (p - digits == 18)
            return DECLINED;
        value = value * 10 + (*p - '0');
        p++;
    }
    if (p == digits || (p - digits > 1 && *digits == '0'))
        return DECLINED;
    if (p < c->end && (*p == '.' || *p == 'e' || *p == 'E'))
        return DECLINED;
    c->p = p;
    *out = PyLong_FromLongLong(negative ? -value : value);
    return *out == NULL ? FAILED : WRITTEN;
}

enum { FIELD_ID, FIELD_TEXT, FIELD_LABEL, FIELD_UNLEARN, FIELDS };

/* The object's fields into fields[]; WRITTEN, DECLINED or FAILED (fields[] then holds
 * references for the caller to drop). */
static int
read_event(Cursor *c, Buffer *scratch, int labeled, PyObject **fields)
{
    skip_space(c);
    if (c->p >= c->end || *c->p != '{')
        return DECLINED;
    c->p++;
    for (;;) {
        skip_space(c);
        if (c->p >= c->end || *c->p != '"')
            return DECLINED; /* {} and a trailing comma alike: json refuses or codec.py decides */
        /* the key, compared as raw bytes: an escaped spelling of a name is declined */
        const unsigned char *key = c->p + 1, *q = key;
        while (q < c->end && *q != '"' && *q != '\\')
            q++;
        if (q >= c->end || *q != '"')
            return DECLINED;
        int field;
        if (q - key == 2 && memcmp(key, "id", 2) == 0)
            field = FIELD_ID;
        else if (q - key == 4 && memcmp(key, "text", 4) == 0)
            field = FIELD_TEXT;
        else if (labeled && q - key == 5 && memcmp(key, "label", 5) == 0)
            field = FIELD_LABEL;
        else if (labeled && q - key == 7 && memcmp(key, "unlearn", 7) == 0)
            field = FIELD_UNLEARN;
        else
            return DECLINED;
        if (fields[field] != NULL)
            return DECLINED; /* a duplicate key: refused by codec.py */
        c->p = q + 1;
        skip_space(c);
        if (c->p >= c->end || *c->p != ':')
            return DECLINED;
        c->p++;
        skip_space(c);
        if (c->p >= c->end)
            return DECLINED;
        if (*c->p == '"')
            STEP(read_string(c, scratch, &fields[field]));
        else if (field == FIELD_LABEL || field == FIELD_UNLEARN)
            STEP(read_integer(c, &fields[field]));
        else
            return DECLINED;
        skip_space(c);
        if (c->p >= c->end)
            return DECLINED;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p != '}')
            return DECLINED;
        c->p++;
        skip_space(c);
        return c->p == c->end ? WRITTEN : DECLINED;
    }
}

static PyObject *attribute_text, *attribute_features, *attribute_label, *attribute_mail, *attribute_unlearn,
    *attribute_key;

/* A label field's str or int, read by read_string or read_integer: an empty str is declined. */
static int
empty_label(PyObject *label)
{
    return label != NULL && PyUnicode_Check(label) && PyUnicode_GET_LENGTH(label) == 0;
}

/* unlearn equal to label, value and type (codec.py refuses it as unlearn_is_label): 1, 0 or -1. */
static int
same_label(PyObject *label, PyObject *unlearn)
{
    if (label == NULL || unlearn == NULL || Py_TYPE(label) != Py_TYPE(unlearn))
        return 0;
    return PyObject_RichCompareBool(label, unlearn, Py_EQ);
}

PyDoc_STRVAR(decode_event_doc,
"decode_event(value, labeled, max_bytes, source, event_type) -> Event | None\n\n"
"The Event codec.py's decoder makes of `value` when the value has the common shape (see the\n"
"module's doc), made as event_type(id, text, None, label or None, source, mail=None, unlearn=unlearn or None,\n"
"key=None);\n"
"None for any other\n"
"value, valid or not: codec.py decides it.");

static PyObject *
decode_event(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyType_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "decode_event(value, labeled, max_bytes, source, event_type)");
        return NULL;
    }
    PyObject *value = args[0], *source = args[3];
    PyTypeObject *event_type = (PyTypeObject *)args[4];
    int labeled = PyObject_IsTrue(args[1]);
    Py_ssize_t max_bytes = PyLong_AsSsize_t(args[2]);
    if (labeled < 0 || (max_bytes == -1 && PyErr_Occurred()))
        return NULL;
    if (!PyBytes_CheckExact(value) || PyBytes_GET_SIZE(value) == 0 || PyBytes_GET_SIZE(value) > max_bytes)
        Py_RETURN_NONE;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(value);
    Cursor c = {data, data + PyBytes_GET_SIZE(value)};
    Buffer scratch = {NULL, 0, 0};
    PyObject *fields[FIELDS] = {NULL, NULL, NULL, NULL};
    int outcome = read_event(&c, &scratch, labeled, fields);
    PyMem_Free(scratch.data);
    PyObject *event = NULL;
    if (outcome == WRITTEN) {
        PyObject *id = fields[FIELD_ID], *text = fields[FIELD_TEXT], *label = fields[FIELD_LABEL];
        PyObject *unlearn = fields[FIELD_UNLEARN];
        if (id == NULL || PyUnicode_GET_LENGTH(id) == 0 || text == NULL || (labeled && label == NULL && unlearn == NULL)
            || empty_label(label) || empty_label(unlearn))
            outcome = DECLINED;
        else {
            int same = same_label(label, unlearn);
            if (same < 0)
                outcome = FAILED;
            else if (same)
                outcome = DECLINED;
        }
    }
    if (outcome == WRITTEN) {
        /* the frozen dataclass's __init__ sets its slots with object.__setattr__: so does this */
        event = event_type->tp_alloc(event_type, 0);
        if (event == NULL
            || PyObject_GenericSetAttr(event, attribute_id, fields[FIELD_ID]) < 0
            || PyObject_GenericSetAttr(event, attribute_text, fields[FIELD_TEXT]) < 0
            || PyObject_GenericSetAttr(event, attribute_features, Py_None) < 0
            || PyObject_GenericSetAttr(event, attribute_label, fields[FIELD_LABEL] ? fields[FIELD_LABEL] : Py_None) < 0
            || PyObject_GenericSetAttr(event, attribute_source, source) < 0
            || PyObject_GenericSetAttr(event, attribute_mail, Py_None) < 0  /* a mail event takes codec.py's path */
            || PyObject_GenericSetAttr(event, attribute_unlearn,
                                       fields[FIELD_UNLEARN] ? fields[FIELD_UNLEARN] : Py_None) < 0
            || PyObject_GenericSetAttr(event, attribute_key, Py_None) < 0)  /* a keyed event takes codec.py's path */
            Py_CLEAR(event);
    }
    for (int i = 0; i < FIELDS; i++)
        Py_XDECREF(fields[i]);
    if (outcome == FAILED)
        return NULL;
    if (outcome == DECLINED)
        Py_RETURN_NONE;
    return event;
}

static PyMethodDef codec_methods[] = {
    {"encode_predictions", encode_predictions, METH_VARARGS, encode_predictions_doc},
    {"decode_event", (PyCFunction)(void (*)(void))decode_event, METH_FASTCALL, decode_event_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef codec_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "stream_nb.events._codec",
    .m_doc = "Prediction messages in C (see codec.py, which stays the definition).",
    .m_size = -1,
    .m_methods = codec_methods,
};

PyMODINIT_FUNC
PyInit__codec(void)
{
    if ((attribute_id = PyUnicode_InternFromString("id")) == NULL
        || (attribute_source = PyUnicode_InternFromString("source")) == NULL
        || (attribute_topic = PyUnicode_InternFromString("topic")) == NULL
        || (attribute_partition = PyUnicode_InternFromString("partition")) == NULL
        || (attribute_offset = PyUnicode_InternFromString("offset")) == NULL
        || (attribute_text = PyUnicode_InternFromString("text")) == NULL
        || (attribute_features = PyUnicode_InternFromString("features")) == NULL
        || (attribute_label = PyUnicode_InternFromString("label")) == NULL
        || (attribute_mail = PyUnicode_InternFromString("mail")) == NULL
        || (attribute_unlearn = PyUnicode_InternFromString("unlearn")) == NULL
        || (attribute_key = PyUnicode_InternFromString("key")) == NULL)
        return NULL;
    return PyModule_Create(&codec_module);
}
