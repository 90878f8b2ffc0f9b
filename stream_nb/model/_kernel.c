/*
 * stream_nb.model._kernel: MultinomialNB's prequential loop (score, decide, learn) in C, one
 * event after another, for a batch whose counts are exact.
 *
 * counting.py stays the definition. This module repeats MultinomialNB's kernel for a batch of
 * one (`_class_prefix`, `_score`, `training.learn_decisions`, `_learn_counts`) by the same
 * floating-point operations in the same order, so its results equal the per-event loop bit for
 * bit. Two things make that hold:
 *  - logarithms are numpy's own float64 log loop, found on `numpy.log` at import (numpy's SIMD
 *    log can differ from the C library's in the last bit), called on each event's arguments;
 *  - it runs only where counts are exact (whole numbers, or forgetting's grid with room below
 *    2^33, `_batch_is_exact`), so sums of counts do not depend on the order of addition, as the
 *    numpy kernel's prefix sums do not.
 * A labeled event whose active scores are not all finite (alpha = 0) is left to the caller,
 * which decides it by the definition (`should_learn`); the call returns there.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <fenv.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h>
#include <numpy/ufuncobject.h>

/* Training modes, as training.TRAINING_MODES orders them. */
enum { MODE_ALL = 0, MODE_ON_ERROR = 1, MODE_THICK = 2 };

static PyUFuncGenericFunction log_loop = NULL;
static void *log_loop_data = NULL;
static PyObject *log_ufunc = NULL; /* held for the module's life: log_loop lives in it */

/* numpy.log's first float64 -> float64 loop: the one numpy runs for a float64 array. */
static int
find_log_loop(void)
{
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL)
        return -1;
    PyObject *log = PyObject_GetAttrString(numpy, "log");
    PyObject *ufunc_type = PyObject_GetAttrString(numpy, "ufunc");
    Py_DECREF(numpy);
    if (log == NULL || ufunc_type == NULL || !PyType_Check(ufunc_type)
        || !PyObject_TypeCheck(log, (PyTypeObject *)ufunc_type)) {
        Py_XDECREF(log);
        Py_XDECREF(ufunc_type);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ImportError, "numpy.log is not a numpy ufunc");
        return -1;
    }
    Py_DECREF(ufunc_type);
    PyUFuncObject *ufunc = (PyUFuncObject *)log;
    if (ufunc->nin == 1 && ufunc->nout == 1 && ufunc->types != NULL && ufunc->functions != NULL) {
        for (int i = 0; i < ufunc->ntypes; i++) {
            if (ufunc->types[2 * i] == NPY_DOUBLE && ufunc->types[2 * i + 1] == NPY_DOUBLE) {
                log_loop = ufunc->functions[i];
                log_loop_data = ufunc->data ? ufunc->data[i] : NULL;
                break;
            }
        }
    }
    if (log_loop == NULL) {
        Py_DECREF(log);
        PyErr_SetString(PyExc_ImportError, "numpy.log has no float64 loop this module can call");
        return -1;
    }
    log_ufunc = log;
    return 0;
}

/* out[k] = numpy.log(in[k]) for k < n. */
static void
numpy_log(const double *in, double *out, npy_intp n)
{
    if (n <= 0)
        return;
    char *args[2] = {(char *)in, (char *)out};
    npy_intp steps[2] = {sizeof(double), sizeof(double)};
    log_loop(args, &n, steps, log_loop_data);
}

/* A growable scratch array of doubles or indices. */
typedef struct {
    void *items;
    Py_ssize_t cap; /* in items */
} Scratch;

static int
reserve(Scratch *scratch, Py_ssize_t needed, size_t item_size)
{
    if (needed <= scratch->cap)
        return 0;
    Py_ssize_t cap = scratch->cap ? scratch->cap : 256;
    while (cap < needed)
        cap *= 2;
    void *items = PyMem_RawRealloc(scratch->items, (size_t)cap * item_size);
    if (items == NULL)
        return -1;
    scratch->items = items;
    scratch->cap = cap;
    return 0;
}

/* The model's arrays and settings for one call. */
typedef struct {
    const int64_t *event, *column, *label;
    const double *value, *weight;
    Py_ssize_t n_events, n_occurrences, n_rows, n_classes;
    double *counts, *class_counts, *class_totals; /* N_fc (rows x classes), N_c, T_c */
    double alpha, prior_alpha, log_alpha;         /* log_alpha: unknown="smooth", else NaN */
    int smooth, mode, predict;
    const double *margin;       /* (events,): thick_threshold's margin for each event */
    double *scores, *log_prior; /* (events x classes) */
    uint8_t *active;            /* (events x classes) */
    uint8_t *learned;           /* (events,) */
} Run;

/* The run's outcome: where it stopped, |V| and the weight learned (never decayed). */
typedef struct {
    Py_ssize_t stop;
    Py_ssize_t features_seen;
    double learned_weight;
    int no_memory;
} Outcome;

/* learn_decisions for one row of finite active scores. */
static int
decide(const double *scores, const uint8_t *active, Py_ssize_t n_classes, int64_t label, int mode, double margin)
{
    if (mode == MODE_ALL || !active[label])
        return 1;
    int other = 0;
    Py_ssize_t predicted = -1;
    double best = -INFINITY, best_other = -INFINITY;
    for (Py_ssize_t c = 0; c < n_classes; c++) {
        double masked = active[c] ? scores[c] : -INFINITY;
        if (predicted < 0 || masked > best) { /* argmax: the first largest */
            best = masked;
            predicted = c;
        }
        if (c != label && active[c]) {
            other = 1;
            if (masked > best_other)
                best_other = masked;
        }
    }
    if (!other || predicted != label)
        return 1;
    if (mode == MODE_ON_ERROR)
        return 0;
    return !(scores[label] - best_other >= margin);
}

static void
run_events(const Run *r, Py_ssize_t start, Outcome *out)
{
    const Py_ssize_t C = r->n_classes;
    Scratch known = {NULL, 0}, args = {NULL, 0}, logs = {NULL, 0};
    double total = 0.0; /* N: exact, so any order of addition gives numpy's sum */
    int active_classes = 0;
    for (Py_ssize_t c = 0; c < C; c++) {
        total += r->class_counts[c];
        active_classes += r->class_counts[c] > 0;
    }
    Py_ssize_t lo = 0; /* first occurrence of event `start` */
    {
        Py_ssize_t a = 0, b = r->n_occurrences;
        while (a < b) {
            Py_ssize_t mid = a + (b - a) / 2;
            if (r->event[mid] < start)
                a = mid + 1;
            else
                b = mid;
        }
        lo = a;
    }
    Py_ssize_t i = start;
    for (; i < r->n_events; i++) {
        Py_ssize_t hi = lo;
        while (hi < r->n_occurrences && r->event[hi] == i)
            hi++;
        const int64_t label = r->label[i];
        double *score = r->scores + i * C, *log_prior = r->log_prior + i * C;
        uint8_t *active = r->active + i * C;
        if (r->predict) {
            /* The event's known features: learned before it, in some class (row sum > 0). */
            if (reserve(&known, hi - lo, sizeof(Py_ssize_t)) < 0) {
                out->no_memory = 1;
                goto finish;
            }
            Py_ssize_t *known_rows = known.items, n_known = 0;
            for (Py_ssize_t o = lo; o < hi; o++) {
                int64_t column = r->column[o];
                if (column < 0)
                    continue;
                const double *row = r->counts + column * C;
                double sum = row[0];
                for (Py_ssize_t c = 1; c < C; c++)
                    sum += row[c];
                if (sum > 0)
                    known_rows[n_known++] = o;
            }
            /* One log call: N_fc + alpha (row after row), T_c + alpha |V|, N_c + lambda, N + K lambda. */
            Py_ssize_t n_args = n_known * C + 2 * C + 1;
            if (reserve(&args, n_args, sizeof(double)) < 0 || reserve(&logs, n_args, sizeof(double)) < 0) {
                out->no_memory = 1;
                goto finish;
            }
            double *arg = args.items, *log = logs.items;
            Py_ssize_t k = 0;
            for (Py_ssize_t j = 0; j < n_known; j++) {
                const double *row = r->counts + r->column[known_rows[j]] * C;
                for (Py_ssize_t c = 0; c < C; c++)
                    arg[k++] = row[c] + r->alpha;
            }
            const Py_ssize_t denominators = k;
            for (Py_ssize_t c = 0; c < C; c++)
                arg[k++] = r->class_totals[c] + r->alpha * (double)out->features_seen;
            const Py_ssize_t priors = k;
            for (Py_ssize_t c = 0; c < C; c++)
                arg[k++] = r->class_counts[c] + r->prior_alpha;
            arg[k++] = total + (double)active_classes * r->prior_alpha;
            numpy_log(arg, log, k);
            const double log_total = log[k - 1];
            for (Py_ssize_t c = 0; c < C; c++) {
                active[c] = r->class_counts[c] > 0;
                log_prior[c] = active[c] ? log[priors + c] - log_total : -INFINITY;
                score[c] = 0.0; /* the evidence, summed in occurrence order as np.bincount does */
            }
            double n_counted = 0.0;
            for (Py_ssize_t j = 0; j < n_known; j++) {
                const double x = r->value[known_rows[j]];
                const double *log_numerator = log + j * C;
                for (Py_ssize_t c = 0; c < C; c++)
                    score[c] += x * log_numerator[c];
                n_counted += x;
            }
            if (r->smooth) { /* unseen features at count 0: x log(alpha) each */
                double n_unseen = 0.0;
                Py_ssize_t j = 0;
                for (Py_ssize_t o = lo; o < hi; o++) {
                    if (j < n_known && known_rows[j] == o)
                        j++;
                    else
                        n_unseen += r->value[o];
                }
                for (Py_ssize_t c = 0; c < C; c++)
                    score[c] = score[c] + n_unseen * r->log_alpha;
                n_counted = n_counted + n_unseen;
            }
            int finite = 1;
            for (Py_ssize_t c = 0; c < C; c++) {
                const double denominator = arg[denominators + c];
                if (denominator == 0) /* alpha = 0 and no tokens in c yet: 0/0, decided here */
                    score[c] = n_counted > 0 ? -INFINITY : log_prior[c];
                else
                    score[c] = (log_prior[c] + score[c]) - n_counted * log[denominators + c];
                if (active[c] && !isfinite(score[c]))
                    finite = 0;
            }
            if (label >= 0 && !finite && r->mode != MODE_ALL)
                break; /* the caller decides it by should_learn */
        }
        r->learned[i] = 0;
        if (label >= 0 && (r->mode == MODE_ALL || decide(score, active, C, label, r->mode, r->margin[i]))) {
            const double w = r->weight[i];
            double *class_total = r->class_totals + label;
            for (Py_ssize_t o = lo; o < hi; o++) {
                int64_t column = r->column[o];
                if (column < 0)
                    continue;
                double *row = r->counts + column * C;
                int unseen = 1;
                for (Py_ssize_t c = 0; c < C; c++)
                    unseen &= row[c] == 0;
                const double added = r->value[o] * w;
                row[label] += added;
                *class_total += added;
                out->features_seen += unseen;
            }
            if (r->class_counts[label] == 0 && w > 0)
                active_classes++;
            r->class_counts[label] += w;
            total += w;
            out->learned_weight += w;
            r->learned[i] = 1;
        }
        lo = hi;
    }
finish:
    out->stop = i;
    PyMem_RawFree(known.items);
    PyMem_RawFree(args.items);
    PyMem_RawFree(logs.items);
}

/* A buffer of exactly `count` items of `item_size` bytes (or of a multiple with `multiple`). */
static int
check_size(const Py_buffer *buffer, const char *name, Py_ssize_t item_size, Py_ssize_t count)
{
    if (buffer->len != item_size * count) {
        PyErr_Format(PyExc_ValueError, "%s has %zd bytes, expected %zd", name, buffer->len, item_size * count);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(settle_doc,
"settle(start, event, column, value, label, weight, counts, class_counts, class_totals,\n"
"       settings, scores, active, log_prior, learned, margins) -> (stop, features_seen, learned_weight)\n\n"
"Events start.. of an encoded batch (event, column: int64; value, weight: float64; label: int64,\n"
"-1 unlabeled), one after another: score each with the state so far (when predicting), decide\n"
"by the training mode, learn it if decided. counts (N_fc, rows x classes), class_counts and\n"
"class_totals are float64 arrays changed in place; scores, log_prior (float64), active and\n"
"learned (bool) receive each event's row. settings = (features_seen, alpha, prior_alpha,\n"
"log_alpha or None, mode, predict); mode 0 all, 1 on_error, 2 thick_threshold; margins (float64)\n"
"the thick threshold of each event (one margin, or margin * sqrt(n_features) per event). stop <\n"
"n_events: that labeled event's active scores are not all finite; nothing of it is done.");

static PyObject *
settle(PyObject *module, PyObject *args)
{
    Py_ssize_t start, features_seen;
    Py_buffer event, column, value, label, weight, counts, class_counts, class_totals, scores, active, log_prior,
        learned, margins;
    double alpha, prior_alpha;
    PyObject *log_alpha;
    int mode, predict;
    if (!PyArg_ParseTuple(args, "ny*y*y*y*y*w*w*w*(nddOip)w*w*w*w*y*:settle", &start, &event, &column, &value, &label,
                          &weight, &counts, &class_counts, &class_totals, &features_seen, &alpha, &prior_alpha,
                          &log_alpha, &mode, &predict, &scores, &active, &log_prior, &learned, &margins))
        return NULL;
    Py_buffer *buffers[] = {&event, &column, &value, &label, &weight, &counts, &class_counts, &class_totals,
                            &scores, &active, &log_prior, &learned, &margins};
    PyObject *result = NULL;
    Run r;
    memset(&r, 0, sizeof(r));
    r.n_occurrences = event.len / 8;
    r.n_events = label.len / 8;
    r.n_classes = class_counts.len / 8;
    const Py_ssize_t C = r.n_classes;
    if (C < 1) {
        PyErr_SetString(PyExc_ValueError, "settle needs at least one class");
        goto done;
    }
    r.n_rows = counts.len / (8 * C);
    if (check_size(&event, "event", 8, r.n_occurrences) < 0 || check_size(&column, "column", 8, r.n_occurrences) < 0
        || check_size(&value, "value", 8, r.n_occurrences) < 0 || check_size(&label, "label", 8, r.n_events) < 0
        || check_size(&weight, "weight", 8, r.n_events) < 0 || check_size(&counts, "counts", 8 * C, r.n_rows) < 0
        || check_size(&class_counts, "class_counts", 8, C) < 0 || check_size(&class_totals, "class_totals", 8, C) < 0
        || check_size(&scores, "scores", 8 * C, r.n_events) < 0
        || check_size(&active, "active", C, r.n_events) < 0
        || check_size(&log_prior, "log_prior", 8 * C, r.n_events) < 0
        || check_size(&learned, "learned", 1, r.n_events) < 0 || check_size(&margins, "margins", 8, r.n_events) < 0)
        goto done;
    if (mode < MODE_ALL || mode > MODE_THICK || start < 0 || start > r.n_events || (!predict && mode != MODE_ALL)) {
        PyErr_SetString(PyExc_ValueError,
                        "settle: mode must be 0, 1 or 2 (0 without predicting) and start within the batch");
        goto done;
    }
    for (Py_ssize_t i = 0; i < r.n_events; i++) {
        int64_t c = ((const int64_t *)label.buf)[i];
        if (c >= C) {
            PyErr_Format(PyExc_ValueError, "settle: event %zd has label %lld, beyond the %zd classes", i, (long long)c, C);
            goto done;
        }
    }
    /* every column and event index checked before anything is learned */
    for (Py_ssize_t o = 0; o < r.n_occurrences; o++) {
        int64_t column_o = ((const int64_t *)column.buf)[o], event_o = ((const int64_t *)event.buf)[o];
        if (column_o >= r.n_rows || event_o < 0 || event_o >= r.n_events
            || (o > 0 && event_o < ((const int64_t *)event.buf)[o - 1])) {
            PyErr_Format(PyExc_ValueError,
                         "settle: occurrence %zd names event %lld and column %lld: events must be in order "
                         "within the batch and columns within the %zd rows of counts",
                         o, (long long)event_o, (long long)column_o, r.n_rows);
            goto done;
        }
    }
    r.event = event.buf;
    r.column = column.buf;
    r.value = value.buf;
    r.label = label.buf;
    r.weight = weight.buf;
    r.counts = counts.buf;
    r.class_counts = class_counts.buf;
    r.class_totals = class_totals.buf;
    r.alpha = alpha;
    r.prior_alpha = prior_alpha;
    r.smooth = log_alpha != Py_None;
    r.log_alpha = r.smooth ? PyFloat_AsDouble(log_alpha) : NAN;
    if (r.smooth && r.log_alpha == -1.0 && PyErr_Occurred())
        goto done;
    r.mode = mode;
    r.margin = margins.buf;
    r.predict = predict;
    r.scores = scores.buf;
    r.log_prior = log_prior.buf;
    r.active = active.buf;
    r.learned = learned.buf;

    Outcome out = {start, features_seen, 0.0, 0};
    Py_BEGIN_ALLOW_THREADS
    run_events(&r, start, &out);
    feclearexcept(FE_ALL_EXCEPT); /* log(0) = -inf on purpose; numpy reports its own ufuncs' flags */
    Py_END_ALLOW_THREADS
    if (out.no_memory)
        PyErr_NoMemory();
    else
        result = Py_BuildValue("nnd", out.stop, out.features_seen, out.learned_weight);
done:
    for (size_t b = 0; b < sizeof(buffers) / sizeof(buffers[0]); b++)
        PyBuffer_Release(buffers[b]);
    return result;
}

PyDoc_STRVAR(clues_doc,
"clues(names, bounds, columns, best, runner_up, counts, denominators, alpha, top, by_column=False)\n"
"    -> list\n\n"
"explain.strongest_clues_many's lists: for each event i with best[i] >= 0, its `top` learned\n"
"features (names[bounds[i]:bounds[i+1]], columns likewise: int64, -1 never learned) by evidence\n"
"log((N_fc + alpha) / D_c) - log((N_fk + alpha) / D_k) for c = best[i], k = runner_up[i]\n"
"(math.log's libm log), largest first, ties in the event's order, as [(name, evidence rounded\n"
"as np.round(., 6))]; None for the others. alpha, D_c and D_k must be positive. by_column:\n"
"`names` lists the vocabulary's names by column instead, feature o's name is names[columns[o]].");

static PyObject *
clues(PyObject *module, PyObject *args)
{
    PyObject *names;
    Py_buffer bounds, columns, best, runner_up, counts, denominators;
    double alpha;
    Py_ssize_t top;
    int by_column = 0;
    if (!PyArg_ParseTuple(args, "O!y*y*y*y*y*y*dn|p:clues", &PyList_Type, &names, &bounds, &columns, &best,
                          &runner_up, &counts, &denominators, &alpha, &top, &by_column))
        return NULL;
    Py_buffer *buffers[] = {&bounds, &columns, &best, &runner_up, &counts, &denominators};
    PyObject *result = NULL;
    double *evidence = NULL;
    Py_ssize_t *chosen = NULL;
    const Py_ssize_t n = best.len / 8, C = denominators.len / 8, m = columns.len / 8;
    /* no class (C = 0) is fine while no event asks for clues: each is checked below */
    if (check_size(&bounds, "bounds", 8, n + 1) < 0 || check_size(&runner_up, "runner_up", 8, n) < 0
        || check_size(&columns, "columns", 8, by_column ? columns.len / 8 : PyList_GET_SIZE(names)) < 0
        || (C > 0 && check_size(&counts, "counts", 8 * C, counts.len / (8 * C)) < 0))
        goto done;
    const int64_t *bound = bounds.buf, *column = columns.buf, *first = best.buf, *second = runner_up.buf;
    const double *count = counts.buf, *denominator = denominators.buf;
    const Py_ssize_t n_rows = C > 0 ? counts.len / (8 * C) : 0;
    if (top < 0)
        top = 0;
    evidence = PyMem_Malloc(sizeof(double) * (size_t)(top + 1));
    chosen = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(top + 1));
    result = PyList_New(n);
    if (evidence == NULL || chosen == NULL || result == NULL) {
        Py_CLEAR(result);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t c = first[i], k = second[i];
        if (c < 0) {
            PyList_SET_ITEM(result, i, Py_NewRef(Py_None));
            continue;
        }
        if (c >= C || k < 0 || k >= C || bound[i] < 0 || bound[i] > bound[i + 1] || bound[i + 1] > m
            || !(alpha > 0 && denominator[c] > 0 && denominator[k] > 0)) {
            PyErr_Format(PyExc_ValueError,
                         "clues: event %zd has classes or bounds out of range, or a non-positive alpha or denominator", i);
            Py_CLEAR(result);
            goto done;
        }
        Py_ssize_t kept = 0;
        for (Py_ssize_t o = bound[i]; o < bound[i + 1]; o++) {
            const int64_t col = column[o];
            if (col < 0)
                continue;
            if (col >= n_rows || (by_column && col >= PyList_GET_SIZE(names))) {
                PyErr_Format(PyExc_ValueError, "clues: column %lld beyond the %zd rows of counts or the names",
                             (long long)col, n_rows);
                Py_CLEAR(result);
                goto done;
            }
            const double *row = count + col * C;
            int learned = 0;
            for (Py_ssize_t j = 0; j < C; j++)
                learned |= row[j] != 0;
            if (!learned || top == 0)
                continue;
            /* the ratio, then its log: as numpy divides and math.log takes the log */
            const double e = log((row[c] + alpha) / denominator[c]) - log((row[k] + alpha) / denominator[k]);
            if (kept == top && !(e > evidence[top - 1]))
                continue; /* ties keep the earlier feature */
            Py_ssize_t j = kept < top ? kept : top - 1;
            for (; j > 0 && evidence[j - 1] < e; j--) {
                evidence[j] = evidence[j - 1];
                chosen[j] = chosen[j - 1];
            }
            evidence[j] = e;
            chosen[j] = o;
            if (kept < top)
                kept++;
        }
        PyObject *list = PyList_New(kept);
        if (list == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, list);
        for (Py_ssize_t j = 0; j < kept; j++) {
            PyObject *name = PyList_GET_ITEM(names, by_column ? (Py_ssize_t)column[chosen[j]] : chosen[j]);
            PyObject *pair = Py_BuildValue("(Od)", name, rint(evidence[j] * 1e6) / 1e6);
            if (pair == NULL) {
                Py_CLEAR(result);
                goto done;
            }
            PyList_SET_ITEM(list, j, pair);
        }
    }
done:
    PyMem_Free(evidence);
    PyMem_Free(chosen);
    for (size_t b = 0; b < sizeof(buffers) / sizeof(buffers[0]); b++)
        PyBuffer_Release(buffers[b]);
    return result;
}

static PyMethodDef kernel_methods[] = {
    {"settle", settle, METH_VARARGS, settle_doc},
    {"clues", clues, METH_VARARGS, clues_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "stream_nb.model._kernel",
    .m_doc = "MultinomialNB's prequential loop in C (see counting.py, which stays the definition).",
    .m_size = -1,
    .m_methods = kernel_methods,
};

PyMODINIT_FUNC
PyInit__kernel(void)
{
    if (log_loop == NULL && find_log_loop() < 0)
        return NULL;
    return PyModule_Create(&kernel_module);
}
