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

/* ---- per-key models (personal.py): a part of a batch, event after event ------------------ */

/* numpy.logaddexp of two float64 (npy_logaddexp: the C library's exp and log1p). */
static double
numpy_logaddexp(double x, double y)
{
    if (x == y)
        return x + 0.693147180559945309417232121458176568; /* infinities of one sign too */
    const double tmp = x - y;
    if (tmp > 0)
        return x + log1p(exp(-tmp));
    if (tmp <= 0)
        return y + log1p(exp(tmp));
    return tmp; /* NaN */
}

/* math.log's log, -inf at 0 (personal._log). */
static double
plain_log(double value)
{
    return value > 0 ? log(value) : -INFINITY;
}

/* should_learn on a posterior's log scores (effective_log_row of the key's scores): the
 * label's class must be active, have rivals, be predicted (the first largest score), and beat
 * the best rival by `margin` for thick_threshold. */
static int
decide_effective(const double *effective, const uint8_t *active, Py_ssize_t n_classes, int64_t label, int mode,
                 double margin)
{
    if (mode == MODE_ALL || !active[label])
        return 1;
    Py_ssize_t predicted = -1;
    double best = 0.0, best_other = -INFINITY;
    int other = 0;
    for (Py_ssize_t c = 0; c < n_classes; c++) {
        if (!active[c])
            continue;
        if (predicted < 0 || effective[c] > best) {
            best = effective[c];
            predicted = c;
        }
        if (c != label) {
            if (!other || effective[c] > best_other)
                best_other = effective[c];
            other = 1;
        }
    }
    if (!other || predicted != label)
        return 1;
    if (mode == MODE_ON_ERROR)
        return 0;
    const double log_odds = effective[label] - best_other;
    return !(log_odds >= margin) || isnan(log_odds);
}

enum { KEYED_DONE = 0, KEYED_NEEDS_PYTHON = 1, KEYED_OVER_BUDGET = 2 };
enum { SHRINK_KEY = 0, SHRINK_CLASS = 1 };

typedef struct {
    Py_ssize_t n_events, n_names, n_classes, n_slots;
    const int64_t *starts, *uid, *pair, *slot, *key_label, *global_label, *capacity;
    const double *value, *margin;
    const uint8_t *addable, *exists;
    double *counts, *class_counts, *class_totals; /* the global model's, of the part's names */
    double **matrices;                            /* each slot's N_fc,k (capacity x classes) */
    double *slot_counts, *slot_totals;            /* N_c,k and T_c,k (slots x classes) */
    int64_t *rows, *row_of;                       /* each slot's rows; its row of each of its names (pairs) */
    uint8_t *touched;                             /* (pairs) */
    double alpha, prior_alpha, beta, prior_beta;
    int smooth, shrinkage, mode;
    Py_ssize_t budget;
    double *scores, *log_prior;
    uint8_t *active, *scored, *key_learned;
} KeyedRun;

static Py_ssize_t
run_keyed(const KeyedRun *r, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t *features_seen, int *status,
          int *no_memory)
{
    const Py_ssize_t C = r->n_classes;
    Scratch args = {NULL, 0}, logs = {NULL, 0};
    double global_log_prior[C], own_scale[C], global_scale[C], denominator[C], effective[C];
    const double log_prior_beta = plain_log(r->prior_beta);
    Py_ssize_t i = start;
    *status = KEYED_DONE;
    for (; i < stop; i++) {
        const Py_ssize_t lo = r->starts[i], hi = r->starts[i + 1];
        const int64_t s = r->slot[i], key_label = r->key_label[i];
        r->scored[i] = r->key_learned[i] = 0;
        if (s >= 0) {
            double *own_counts = r->slot_counts + s * C, *own_totals = r->slot_totals + s * C;
            double events = 0.0;
            for (Py_ssize_t c = 0; c < C; c++)
                events += own_counts[c];
            if (!r->exists[s] || !(events > 0)) {
                if (key_label >= 0) { /* the key learns on the global model's prediction: the caller's */
                    *status = KEYED_NEEDS_PYTHON;
                    break;
                }
                goto global_step; /* predicted as by the global model */
            }
            double *matrix = r->matrices[s];
            const int64_t *row_of = r->row_of;
            double *score = r->scores + i * C, *log_prior = r->log_prior + i * C;
            uint8_t *active = r->active + i * C;
            /* the global prior now: log((N_c + lambda) / (N + K lambda)) over classes with N_c > 0 */
            double total = 0.0;
            int n_active = 0;
            for (Py_ssize_t c = 0; c < C; c++) {
                total += r->class_counts[c];
                n_active += r->class_counts[c] > 0;
            }
            const Py_ssize_t n_features = hi - lo;
            if (reserve(&args, n_features * C + C, sizeof(double)) < 0
                || reserve(&logs, n_features * C + C, sizeof(double)) < 0) {
                *no_memory = 1;
                break;
            }
            double *arg = args.items, *lg = logs.items;
            for (Py_ssize_t c = 0; c < C; c++)
                arg[c] = r->class_counts[c] + r->prior_alpha;
            numpy_log(arg, lg, C);
            const double log_total = n_active ? log(total + (double)n_active * r->prior_alpha) : 0.0;
            for (Py_ssize_t c = 0; c < C; c++)
                global_log_prior[c] = r->class_counts[c] > 0 ? lg[c] - log_total : -INFINITY;
            /* the key's prior: log(N_c,k + prior_beta pi_c) - log(N_k + prior_beta) */
            const double log_events = plain_log(events + r->prior_beta);
            int any_active = 0;
            for (Py_ssize_t c = 0; c < C; c++) {
                log_prior[c] = numpy_logaddexp(plain_log(own_counts[c]), log_prior_beta + global_log_prior[c])
                               - log_events;
                active[c] = log_prior[c] > -INFINITY;
                any_active |= active[c];
            }
            /* the weights of N_fc,k and theta_fc in theta_fc,k */
            double own_total = 0.0;
            for (Py_ssize_t c = 0; c < C; c++)
                own_total += own_totals[c];
            for (Py_ssize_t c = 0; c < C; c++) {
                const double t = own_totals[c];
                if (r->shrinkage == SHRINK_KEY) {
                    const double d = own_total + r->beta;
                    own_scale[c] = t > 0 ? own_total / d / t : 0.0;
                    global_scale[c] = t > 0 ? r->beta / d : 1.0;
                } else {
                    const double d = t + r->beta;
                    own_scale[c] = d > 0 ? 1.0 / d : 0.0;
                    global_scale[c] = d > 0 ? r->beta / d : 1.0;
                }
                denominator[c] = r->class_totals[c] + r->alpha * (double)*features_seen;
            }
            /* theta_fc,k of each feature and class, then one log call */
            for (Py_ssize_t o = lo; o < hi; o++) {
                const int64_t u = r->uid[o], row = row_of[r->pair[o]];
                const double *global_row = r->counts + u * C;
                double *mixed = arg + (o - lo) * C;
                for (Py_ssize_t c = 0; c < C; c++) {
                    const double theta = denominator[c] == 0 ? 0.0 : (global_row[c] + r->alpha) / denominator[c];
                    const double own = row >= 0 ? matrix[row * C + c] : 0.0;
                    mixed[c] = own_scale[c] * own + global_scale[c] * theta;
                }
            }
            numpy_log(arg, lg, n_features * C);
            double evidence[C];
            for (Py_ssize_t c = 0; c < C; c++)
                evidence[c] = 0.0;
            for (Py_ssize_t o = lo; o < hi; o++) {
                const int64_t u = r->uid[o], row = row_of[r->pair[o]];
                const double *global_row = r->counts + u * C, *numerator = lg + (o - lo) * C;
                int counts = r->smooth, producible = 0;
                for (Py_ssize_t c = 0; c < C; c++) {
                    counts |= global_row[c] != 0 || (row >= 0 && matrix[row * C + c] != 0);
                    producible |= active[c] && numerator[c] > -INFINITY;
                }
                if (!(counts && producible))
                    continue; /* unknown to both, or no class can produce it: dropped */
                const double x = r->value[o];
                for (Py_ssize_t c = 0; c < C; c++)
                    evidence[c] += x * numerator[c];
            }
            for (Py_ssize_t c = 0; c < C; c++)
                score[c] = log_prior[c] + evidence[c];
            r->scored[i] = 1;
            if (key_label >= 0 && any_active) {
                /* the log scores of the posterior: a hopeless row falls back to the prior */
                double best = -INFINITY;
                for (Py_ssize_t c = 0; c < C; c++) {
                    effective[c] = active[c] ? score[c] : -INFINITY;
                    if (effective[c] > best)
                        best = effective[c];
                }
                if (best == -INFINITY)
                    for (Py_ssize_t c = 0; c < C; c++)
                        effective[c] = active[c] ? log_prior[c] : -INFINITY;
                if (decide_effective(effective, active, C, key_label, r->mode, r->margin[i])) {
                    /* N_fc,k += x_f, N_c,k += 1, T_c,k += sum x_f; a new name gets the next row */
                    double added = 0.0;
                    int64_t *own_row_of = r->row_of;
                    for (Py_ssize_t o = lo; o < hi; o++) {
                        const int64_t u = r->uid[o], at = r->pair[o];
                        int64_t row = own_row_of[at];
                        if (row < 0) {
                            if (!r->addable[u])
                                continue;
                            if (r->rows[s] >= r->capacity[s]) { /* the caller reserves every new row */
                                *no_memory = 2;
                                goto finish;
                            }
                            row = r->rows[s]++;
                            own_row_of[at] = row;
                        }
                        matrix[row * C + key_label] += r->value[o];
                        added += r->value[o];
                        r->touched[at] = 1;
                    }
                    own_counts[key_label] += 1.0;
                    own_totals[key_label] += added;
                    r->key_learned[i] = 1;
                    if (r->budget > 0 && r->rows[s] > r->budget)
                        *status = KEYED_OVER_BUDGET;
                }
            }
        }
    global_step:
        if (r->global_label[i] >= 0) { /* the global model learned it: N_fc += x_f, N_c += 1, T_c, |V| */
            const int64_t c = r->global_label[i];
            double added = 0.0;
            for (Py_ssize_t o = lo; o < hi; o++) {
                double *global_row = r->counts + r->uid[o] * C;
                int unseen = 1;
                for (Py_ssize_t k = 0; k < C; k++)
                    unseen &= global_row[k] == 0;
                *features_seen += unseen;
                global_row[c] += r->value[o];
                added += r->value[o];
            }
            r->class_counts[c] += 1.0;
            r->class_totals[c] += added;
        }
        if (*status == KEYED_OVER_BUDGET) {
            i++;
            break;
        }
    }
finish:
    PyMem_RawFree(args.items);
    PyMem_RawFree(logs.items);
    return i;
}

PyDoc_STRVAR(keyed_events_doc,
"keyed_events(start, stop, features_seen, starts, uid, pair, value, slot, key_label, global_label,\n"
"             margin, addable, counts, class_counts, class_totals, matrices, capacity, exists,\n"
"             slot_counts, slot_totals, rows, row_of, touched, settings, scores, active, log_prior,\n"
"             scored, key_learned)\n"
"    -> (stop, status, features_seen)\n\n"
"PersonalMultinomialNB._keyed_step for events start..stop-1 of a part (personal.py stays the\n"
"definition): event i's features are names uid[starts[i]:starts[i+1]] (int64, < the part's names)\n"
"with non-zero values `value`. slot[i] >= 0: the key (a slot) whose prediction it gets: scored by\n"
"_key_scores over the global state (counts: N_fc of the part's names, class_counts, class_totals,\n"
"changed in place as the global model learns, global_label[i] >= 0), then learned by the key as\n"
"key_label[i] (>= 0) when the training mode on its posterior says so (margin[i]: the event's\n"
"thick threshold). A key's counts: matrices[s] (capacity[s] x classes), rows[s] of them used,\n"
"slot_counts and slot_totals (N_c,k, T_c,k). pair[o]: the (slot, name) of occurrence o of a slot's\n"
"event (number_pairs), whose row_of is the key's row of the name (-1: none; a new name gets the\n"
"next row when addable) and whose touched is set when the row changes. settings = (alpha,\n"
"prior_alpha, smooth, beta, prior_beta, shrinkage (0 key, 1 class), mode, budget). Status 1: event\n"
"`stop` is labeled for a key with no counts (exists[s] = 0 or N_k = 0): nothing of it is done;\n"
"status 2: event stop-1 took its key past `budget` rows (0: none).");

static PyObject *
keyed_events(PyObject *module, PyObject *args)
{
    Py_ssize_t start, stop, features_seen, budget;
    Py_buffer starts, uid, pair, value, slot, key_label, global_label, margin, addable, counts, class_counts,
        class_totals, capacity, exists, slot_counts, slot_totals, rows, row_of, touched, scores, active, log_prior,
        scored, key_learned;
    PyObject *matrices;
    double alpha, prior_alpha, beta, prior_beta;
    int smooth, shrinkage, mode;
    if (!PyArg_ParseTuple(args, "nnny*y*y*y*y*y*y*y*y*w*w*w*O!y*y*w*w*w*w*w*(ddpddiin)w*w*w*w*w*:keyed_events",
                          &start, &stop, &features_seen, &starts, &uid, &pair, &value, &slot, &key_label, &global_label,
                          &margin, &addable, &counts, &class_counts, &class_totals, &PyTuple_Type, &matrices,
                          &capacity, &exists, &slot_counts, &slot_totals, &rows, &row_of, &touched, &alpha,
                          &prior_alpha, &smooth, &beta, &prior_beta, &shrinkage, &mode, &budget, &scores, &active,
                          &log_prior, &scored, &key_learned))
        return NULL;
    Py_buffer *buffers[] = {&starts, &uid, &pair, &value, &slot, &key_label, &global_label, &margin, &addable, &counts,
                            &class_counts, &class_totals, &capacity, &exists, &slot_counts, &slot_totals, &rows,
                            &row_of, &touched, &scores, &active, &log_prior, &scored, &key_learned};
    PyObject *result = NULL;
    Py_ssize_t n_slots = PyTuple_GET_SIZE(matrices), held = 0;
    Py_buffer *views = PyMem_Calloc(n_slots ? n_slots : 1, sizeof(Py_buffer));
    double **matrix_of = PyMem_Calloc(n_slots ? n_slots : 1, sizeof(double *));
    if (views == NULL || matrix_of == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    KeyedRun r;
    const Py_ssize_t C = class_counts.len / 8, n = slot.len / 8, occurrences = uid.len / 8;
    const Py_ssize_t U = C > 0 ? counts.len / (8 * C) : 0, P = row_of.len / 8;
    if (C < 1) {
        PyErr_SetString(PyExc_ValueError, "keyed_events needs at least one class");
        goto done;
    }
    if (check_size(&starts, "starts", 8, n + 1) < 0 || check_size(&value, "value", 8, occurrences) < 0
        || check_size(&pair, "pair", 8, occurrences) < 0
        || check_size(&key_label, "key_label", 8, n) < 0 || check_size(&global_label, "global_label", 8, n) < 0
        || check_size(&margin, "margin", 8, n) < 0 || check_size(&addable, "addable", 1, U) < 0
        || check_size(&counts, "counts", 8 * C, U) < 0 || check_size(&class_totals, "class_totals", 8, C) < 0
        || check_size(&capacity, "capacity", 8, n_slots) < 0 || check_size(&exists, "exists", 1, n_slots) < 0
        || check_size(&slot_counts, "slot_counts", 8 * C, n_slots) < 0
        || check_size(&slot_totals, "slot_totals", 8 * C, n_slots) < 0 || check_size(&rows, "rows", 8, n_slots) < 0
        || check_size(&touched, "touched", 1, P) < 0
        || check_size(&scores, "scores", 8 * C, n) < 0 || check_size(&active, "active", C, n) < 0
        || check_size(&log_prior, "log_prior", 8 * C, n) < 0 || check_size(&scored, "scored", 1, n) < 0
        || check_size(&key_learned, "key_learned", 1, n) < 0)
        goto done;
    if (start < 0 || stop < start || stop > n || mode < MODE_ALL || mode > MODE_THICK
        || (shrinkage != SHRINK_KEY && shrinkage != SHRINK_CLASS) || features_seen < 0 || budget < 0) {
        PyErr_SetString(PyExc_ValueError, "keyed_events: start..stop within the part, mode 0-2, shrinkage 0-1");
        goto done;
    }
    const int64_t *starts_of = starts.buf, *uid_of = uid.buf, *slot_of = slot.buf, *capacity_of = capacity.buf;
    const int64_t *rows_of = rows.buf, *row_of_of = row_of.buf, *pair_of = pair.buf;
    for (Py_ssize_t s = 0; s < n_slots; s++) {
        PyObject *item = PyTuple_GET_ITEM(matrices, s);
        if (PyObject_GetBuffer(item, &views[s], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        held++;
        if (views[s].len != capacity_of[s] * 8 * C || rows_of[s] < 0 || rows_of[s] > capacity_of[s]) {
            PyErr_Format(PyExc_ValueError, "keyed_events: slot %zd's matrix has %zd bytes for %lld rows of "
                         "%zd classes (%lld used)", s, views[s].len, (long long)capacity_of[s], C,
                         (long long)rows_of[s]);
            goto done;
        }
        matrix_of[s] = views[s].buf;
    }
    if (starts_of[0] != 0 || starts_of[n] != occurrences) {
        PyErr_SetString(PyExc_ValueError, "keyed_events: starts must run from 0 to the occurrences");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t kl = ((const int64_t *)key_label.buf)[i], gl = ((const int64_t *)global_label.buf)[i];
        if (starts_of[i + 1] < starts_of[i] || slot_of[i] < -1 || slot_of[i] >= n_slots || kl < -1 || kl >= C
            || gl < -1 || gl >= C) {
            PyErr_Format(PyExc_ValueError, "keyed_events: event %zd has bad bounds, slot or class", i);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++)
        for (Py_ssize_t o = starts_of[i]; o < starts_of[i + 1]; o++) {
            if (uid_of[o] < 0 || uid_of[o] >= U) {
                PyErr_Format(PyExc_ValueError, "keyed_events: occurrence %zd names %lld of %zd names", o,
                             (long long)uid_of[o], U);
                goto done;
            }
            const int64_t at = pair_of[o], s = slot_of[i];
            if (s >= 0 && (at < 0 || at >= P || row_of_of[at] >= rows_of[s])) {
                PyErr_Format(PyExc_ValueError, "keyed_events: occurrence %zd of slot %lld names pair %lld of %zd "
                             "(row %lld of the slot's %lld)", o, (long long)s, (long long)at, P,
                             (long long)(at >= 0 && at < P ? row_of_of[at] : -1), (long long)rows_of[s]);
                goto done;
            }
        }
    r = (KeyedRun){.n_events = n, .n_names = U, .n_classes = C, .n_slots = n_slots, .starts = starts_of,
                   .uid = uid_of, .pair = pair_of, .slot = slot_of, .key_label = key_label.buf,
                   .global_label = global_label.buf, .capacity = capacity_of, .value = value.buf,
                   .margin = margin.buf, .addable = addable.buf, .exists = exists.buf, .counts = counts.buf,
                   .class_counts = class_counts.buf, .class_totals = class_totals.buf, .matrices = matrix_of,
                   .slot_counts = slot_counts.buf, .slot_totals = slot_totals.buf, .rows = rows.buf,
                   .row_of = row_of.buf, .touched = touched.buf, .alpha = alpha, .prior_alpha = prior_alpha,
                   .beta = beta, .prior_beta = prior_beta, .smooth = smooth, .shrinkage = shrinkage, .mode = mode,
                   .budget = budget, .scores = scores.buf, .log_prior = log_prior.buf, .active = active.buf,
                   .scored = scored.buf, .key_learned = key_learned.buf};
    int status = 0, failed = 0;
    Py_ssize_t reached;
    Py_BEGIN_ALLOW_THREADS
    reached = run_keyed(&r, start, stop, &features_seen, &status, &failed);
    feclearexcept(FE_ALL_EXCEPT);
    Py_END_ALLOW_THREADS
    if (failed == 1)
        PyErr_NoMemory();
    else if (failed == 2)
        PyErr_SetString(PyExc_RuntimeError, "keyed_events: a key ran out of the rows reserved for it");
    else
        result = Py_BuildValue("nin", reached, status, features_seen);
done:
    for (Py_ssize_t s = 0; s < held; s++)
        PyBuffer_Release(&views[s]);
    PyMem_Free(views);
    PyMem_Free(matrix_of);
    for (size_t b = 0; b < sizeof(buffers) / sizeof(buffers[0]); b++)
        PyBuffer_Release(buffers[b]);
    return result;
}

PyDoc_STRVAR(rows_of_hashes_doc,
"rows_of_hashes(row_hashes, hashes, out, row_names=None, names=None, picks=None) -> None\n\n"
"out[i] = the row r with row_hashes[r] == hashes[i] (int64 arrays), -1 when no row has that hash,\n"
"-2 when several rows do. With row_names (a list, a name a row), names (a list) and picks (int64):\n"
"a row r is kept only when row_names[r] == names[picks[i]], else -2: personal_batch.rows_by_hash,\n"
"which looks the -2 up by name.");

static PyObject *
rows_of_hashes(PyObject *module, PyObject *args)
{
    Py_buffer row_hashes, hashes, out, picks = {0};
    PyObject *row_names = Py_None, *names = Py_None;
    if (!PyArg_ParseTuple(args, "y*y*w*|OOy*:rows_of_hashes", &row_hashes, &hashes, &out, &row_names, &names, &picks))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = row_hashes.len / 8, m = hashes.len / 8;
    const int checked = row_names != Py_None;
    int64_t *table = NULL;
    uint8_t *shared = NULL;
    if (check_size(&row_hashes, "row_hashes", 8, n) < 0 || check_size(&hashes, "hashes", 8, m) < 0
        || check_size(&out, "out", 8, m) < 0)
        goto done;
    if (checked && (!PyList_Check(row_names) || !PyList_Check(names) || picks.buf == NULL
                    || PyList_GET_SIZE(row_names) != n || check_size(&picks, "picks", 8, m) < 0)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "rows_of_hashes: row_names (a name a row), names and picks go together");
        goto done;
    }
    if (checked)
        for (Py_ssize_t i = 0; i < m; i++) {
            const int64_t pick = ((const int64_t *)picks.buf)[i];
            if (pick < 0 || pick >= PyList_GET_SIZE(names)) {
                PyErr_Format(PyExc_ValueError, "rows_of_hashes: pick %lld of %zd names", (long long)pick,
                             PyList_GET_SIZE(names));
                goto done;
            }
        }
    int bits = 4;
    while (((Py_ssize_t)1 << bits) < 2 * n)
        bits++;
    const Py_ssize_t size = (Py_ssize_t)1 << bits;
    const uint64_t mask = (uint64_t)size - 1;
    /* open addressing with linear probing: a slot holds its row + 1 (0: empty) */
    table = PyMem_Calloc((size_t)size, sizeof(int64_t));
    shared = PyMem_Calloc((size_t)size, 1);
    if (table == NULL || shared == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *key = row_hashes.buf, *query = hashes.buf;
    int64_t *found = out.buf;
    for (Py_ssize_t r = 0; r < n; r++) {
        uint64_t h = ((uint64_t)key[r] * 0x9E3779B97F4A7C15ull) >> (64 - bits);
        while (table[h] != 0 && key[table[h] - 1] != key[r])
            h = (h + 1) & mask;
        if (table[h] == 0)
            table[h] = r + 1;
        else
            shared[h] = 1; /* a second row of this hash: the caller compares names */
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        uint64_t h = ((uint64_t)query[i] * 0x9E3779B97F4A7C15ull) >> (64 - bits);
        int64_t at = -1;
        for (; table[h] != 0; h = (h + 1) & mask)
            if (key[table[h] - 1] == query[i]) {
                at = shared[h] ? -2 : table[h] - 1;
                break;
            }
        if (checked && at >= 0) {
            PyObject *mine = PyList_GET_ITEM(row_names, at);
            PyObject *theirs = PyList_GET_ITEM(names, ((const int64_t *)picks.buf)[i]);
            if (mine != theirs) {
                const int equal = PyObject_RichCompareBool(mine, theirs, Py_EQ);
                if (equal < 0)
                    goto done;
                if (!equal)
                    at = -2;
            }
        }
        found[i] = at;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(table);
    PyMem_Free(shared);
    PyBuffer_Release(&row_hashes);
    PyBuffer_Release(&hashes);
    PyBuffer_Release(&out);
    if (picks.buf != NULL)
        PyBuffer_Release(&picks);
    return result;
}

PyDoc_STRVAR(number_pairs_doc,
"number_pairs(slot, uid, n_slots) -> (pair, offsets, pair_uid)\n\n"
"The distinct (slot, name) of a part's occurrences, numbered slot after slot, in the order each first\n"
"comes within its slot: occurrence o (slot[o] >= 0) is pair[o] (-1 where slot[o] is -1); slot s's\n"
"pairs are offsets[s]..offsets[s+1]-1, pair_uid their names (int64 arrays).");

static PyObject *
number_pairs(PyObject *module, PyObject *args)
{
    Py_buffer slot, uid;
    Py_ssize_t n_slots;
    if (!PyArg_ParseTuple(args, "y*y*n:number_pairs", &slot, &uid, &n_slots))
        return NULL;
    PyObject *result = NULL, *pair = NULL, *offsets = NULL, *pair_uid = NULL;
    int64_t *first = NULL, *order = NULL, *local_of = NULL, *names = NULL;
    const Py_ssize_t m = uid.len / 8;
    if (check_size(&slot, "slot", 8, m) < 0 || check_size(&uid, "uid", 8, m) < 0)
        goto done;
    if (n_slots < 0) {
        PyErr_SetString(PyExc_ValueError, "number_pairs: n_slots must be >= 0");
        goto done;
    }
    const int64_t *slot_of = slot.buf, *uid_of = uid.buf;
    int64_t n_names = 0;
    for (Py_ssize_t o = 0; o < m; o++) {
        if (slot_of[o] < -1 || slot_of[o] >= n_slots || uid_of[o] < 0) {
            PyErr_Format(PyExc_ValueError, "number_pairs: occurrence %zd has slot %lld of %zd, name %lld", o,
                         (long long)slot_of[o], n_slots, (long long)uid_of[o]);
            goto done;
        }
        if (uid_of[o] >= n_names)
            n_names = uid_of[o] + 1;
    }
    /* the slots' occurrences in order, slot after slot (a counting sort), then each slot's names
       numbered as they first come, with a name -> pair table reset after each slot */
    first = PyMem_Calloc((size_t)n_slots + 1, sizeof(int64_t));
    order = PyMem_Malloc((size_t)(m ? m : 1) * sizeof(int64_t));
    local_of = PyMem_Malloc((size_t)(n_names ? n_names : 1) * sizeof(int64_t));
    names = PyMem_Malloc((size_t)(m ? m : 1) * sizeof(int64_t));
    if (first == NULL || order == NULL || local_of == NULL || names == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t o = 0; o < m; o++)
        if (slot_of[o] >= 0)
            first[slot_of[o] + 1]++;
    for (Py_ssize_t s = 0; s < n_slots; s++)
        first[s + 1] += first[s];
    for (Py_ssize_t o = 0; o < m; o++)
        if (slot_of[o] >= 0)
            order[first[slot_of[o]]++] = o;
    for (Py_ssize_t s = n_slots; s > 0; s--) /* back to each slot's first place */
        first[s] = first[s - 1];
    first[0] = 0;
    for (int64_t u = 0; u < n_names; u++)
        local_of[u] = -1;
    pair = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(m * 8));
    offsets = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)((n_slots + 1) * 8));
    if (pair == NULL || offsets == NULL)
        goto done;
    int64_t *pair_out = (int64_t *)PyByteArray_AS_STRING(pair), *offsets_out = (int64_t *)PyByteArray_AS_STRING(offsets);
    for (Py_ssize_t o = 0; o < m; o++)
        pair_out[o] = -1;
    int64_t n_pairs = 0;
    for (Py_ssize_t s = 0; s < n_slots; s++) {
        offsets_out[s] = n_pairs;
        const int64_t begin = n_pairs;
        for (int64_t k = first[s]; k < first[s + 1]; k++) {
            const int64_t o = order[k], u = uid_of[o];
            if (local_of[u] < 0) {
                local_of[u] = n_pairs;
                names[n_pairs++] = u;
            }
            pair_out[o] = local_of[u];
        }
        for (int64_t q = begin; q < n_pairs; q++)
            local_of[names[q]] = -1;
    }
    offsets_out[n_slots] = n_pairs;
    pair_uid = PyByteArray_FromStringAndSize((const char *)names, (Py_ssize_t)(n_pairs * 8));
    if (pair_uid == NULL)
        goto done;
    result = PyTuple_Pack(3, pair, offsets, pair_uid);
done:
    Py_XDECREF(pair);
    Py_XDECREF(offsets);
    Py_XDECREF(pair_uid);
    PyMem_Free(first);
    PyMem_Free(order);
    PyMem_Free(local_of);
    PyMem_Free(names);
    PyBuffer_Release(&slot);
    PyBuffer_Release(&uid);
    return result;
}

PyDoc_STRVAR(name_facts_doc,
"name_facts(by_column, columns, unknown, ranks, max_chars) -> (names, hashes, addable)\n\n"
"For each i: names[i] = by_column[columns[i]] when columns[i] >= 0, else unknown[ranks[i]] (each a\n"
"str); hashes[i] = hash(names[i]) (int64 bytes); addable[i] = len(names[i]) <= max_chars (uint8\n"
"bytes). personal_batch.BatchNames' names in one pass.");

static PyObject *
name_facts(PyObject *module, PyObject *args)
{
    PyObject *by_column, *unknown;
    Py_buffer columns, ranks;
    Py_ssize_t max_chars;
    if (!PyArg_ParseTuple(args, "O!y*Oy*n:name_facts", &PyList_Type, &by_column, &columns, &unknown, &ranks,
                          &max_chars))
        return NULL;
    PyObject *result = NULL, *names = NULL, *hashes = NULL, *addable = NULL;
    const Py_ssize_t n = columns.len / 8;
    if (check_size(&ranks, "ranks", 8, n) < 0)
        goto done;
    names = PyList_New(n);
    hashes = PyByteArray_FromStringAndSize(NULL, n * 8);
    addable = PyByteArray_FromStringAndSize(NULL, n);
    if (names == NULL || hashes == NULL || addable == NULL)
        goto done;
    const int64_t *column_of = columns.buf, *rank_of = ranks.buf;
    int64_t *hash_out = (int64_t *)PyByteArray_AS_STRING(hashes);
    uint8_t *addable_out = (uint8_t *)PyByteArray_AS_STRING(addable);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name;
        if (column_of[i] >= 0) {
            if (column_of[i] >= PyList_GET_SIZE(by_column)) {
                PyErr_Format(PyExc_ValueError, "name_facts: column %lld of %zd", (long long)column_of[i],
                             PyList_GET_SIZE(by_column));
                goto done;
            }
            name = Py_NewRef(PyList_GET_ITEM(by_column, column_of[i]));
        } else {
            name = PySequence_GetItem(unknown, (Py_ssize_t)rank_of[i]);
            if (name == NULL)
                goto done;
        }
        PyList_SET_ITEM(names, i, name);
        if (!PyUnicode_Check(name)) {
            PyErr_Format(PyExc_TypeError, "name_facts: a name is a str, got %s", Py_TYPE(name)->tp_name);
            goto done;
        }
        const Py_hash_t hash = PyObject_Hash(name);
        if (hash == -1 && PyErr_Occurred())
            goto done;
        hash_out[i] = (int64_t)hash;
        addable_out[i] = PyUnicode_GET_LENGTH(name) <= max_chars;
    }
    result = PyTuple_Pack(3, names, hashes, addable);
done:
    Py_XDECREF(names);
    Py_XDECREF(hashes);
    Py_XDECREF(addable);
    PyBuffer_Release(&columns);
    PyBuffer_Release(&ranks);
    return result;
}

PyDoc_STRVAR(learned_new_rows_doc,
"learned_new_rows(event, column, learned, size, n_new) -> bytes\n\n"
"The columns size.. (a batch's n_new new names) that occurrences of learned events name, each once, in\n"
"the order they first come (int64 bytes): counting.py's\n\n"
"    size + first_occurrences(column[learned[event] & (column >= size)] - size, n_new)\n\n"
"in one pass (event, column: int64 arrays of the batch's occurrences; learned: one uint8 an event).");

static PyObject *
learned_new_rows(PyObject *module, PyObject *args)
{
    Py_buffer event, column, learned;
    Py_ssize_t size, n_new;
    if (!PyArg_ParseTuple(args, "y*y*y*nn:learned_new_rows", &event, &column, &learned, &size, &n_new))
        return NULL;
    PyObject *result = NULL;
    unsigned char *seen = NULL;
    int64_t *rows = NULL;
    const Py_ssize_t m = column.len / 8, n_events = learned.len;
    if (check_size(&event, "event", 8, m) < 0 || check_size(&column, "column", 8, m) < 0)
        goto done;
    if (size < 0 || n_new < 0 || size > INT64_MAX - n_new) {
        PyErr_Format(PyExc_ValueError, "learned_new_rows: size %zd, n_new %zd", size, n_new);
        goto done;
    }
    seen = PyMem_Calloc((size_t)(n_new ? n_new : 1), 1);
    rows = PyMem_Malloc((size_t)(n_new ? n_new : 1) * sizeof(int64_t));
    if (seen == NULL || rows == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *event_of = event.buf, *column_of = column.buf;
    const unsigned char *learned_of = learned.buf;
    Py_ssize_t found = 0;
    for (Py_ssize_t o = 0; o < m; o++) {
        const int64_t c = column_of[o], e = event_of[o];
        if (e < 0 || e >= n_events || c >= (int64_t)size + n_new) {
            PyErr_Format(PyExc_ValueError, "learned_new_rows: occurrence %zd names event %lld of %zd, column %lld of %zd",
                         o, (long long)e, n_events, (long long)c, size + n_new);
            goto done;
        }
        if (c >= size && learned_of[e] && !seen[c - size]) {
            seen[c - size] = 1;
            rows[found++] = c;
        }
    }
    result = PyBytes_FromStringAndSize((const char *)rows, found * (Py_ssize_t)sizeof(int64_t));
done:
    PyMem_Free(seen);
    PyMem_Free(rows);
    PyBuffer_Release(&event);
    PyBuffer_Release(&column);
    PyBuffer_Release(&learned);
    return result;
}

PyDoc_STRVAR(filled_columns_doc,
"filled_columns(columns, ranks, size) -> (filled, missing, largest)\n\n"
"A batch's columns with each absent name's column given, base.py's\n\n"
"    missing = flatnonzero(columns < 0)\n"
"    filled = columns.copy(); filled[missing] = size + ranks[missing]\n\n"
"in one pass: `filled` as int64 bytes, how many columns were missing, and the largest of their\n"
"ranks (-1: none). columns, ranks: int64 arrays of the batch's occurrences, ranks[i] >= 0\n"
"wherever columns[i] < 0 (ValueError otherwise).");

static PyObject *
filled_columns(PyObject *module, PyObject *args)
{
    Py_buffer columns, ranks;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*y*n:filled_columns", &columns, &ranks, &size))
        return NULL;
    PyObject *filled = NULL, *result = NULL;
    const Py_ssize_t m = columns.len / 8;
    if (check_size(&columns, "columns", 8, m) < 0 || check_size(&ranks, "ranks", 8, m) < 0)
        goto done;
    if (size < 0) {
        PyErr_Format(PyExc_ValueError, "filled_columns: size %zd", size);
        goto done;
    }
    if ((filled = PyBytes_FromStringAndSize(NULL, columns.len)) == NULL)
        goto done;
    const int64_t *column_of = columns.buf, *rank_of = ranks.buf;
    int64_t *out = (int64_t *)PyBytes_AS_STRING(filled), largest = -1;
    Py_ssize_t missing = 0;
    for (Py_ssize_t o = 0; o < m; o++) {
        const int64_t c = column_of[o];
        if (c >= 0) {
            out[o] = c;
            continue;
        }
        const int64_t r = rank_of[o];
        if (r < 0 || r > INT64_MAX - (int64_t)size) {
            PyErr_Format(PyExc_ValueError, "filled_columns: occurrence %zd is missing with rank %lld", o, (long long)r);
            Py_CLEAR(filled);
            goto done;
        }
        out[o] = (int64_t)size + r;
        missing++;
        if (r > largest)
            largest = r;
    }
    result = Py_BuildValue("(NnL)", filled, missing, (long long)largest);
    filled = NULL;
done:
    Py_XDECREF(filled);
    PyBuffer_Release(&columns);
    PyBuffer_Release(&ranks);
    return result;
}

static PyMethodDef kernel_methods[] = {
    {"settle", settle, METH_VARARGS, settle_doc},
    {"clues", clues, METH_VARARGS, clues_doc},
    {"keyed_events", keyed_events, METH_VARARGS, keyed_events_doc},
    {"rows_of_hashes", rows_of_hashes, METH_VARARGS, rows_of_hashes_doc},
    {"number_pairs", number_pairs, METH_VARARGS, number_pairs_doc},
    {"name_facts", name_facts, METH_VARARGS, name_facts_doc},
    {"learned_new_rows", learned_new_rows, METH_VARARGS, learned_new_rows_doc},
    {"filled_columns", filled_columns, METH_VARARGS, filled_columns_doc},
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
