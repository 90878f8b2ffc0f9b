"""PNG plots of a replay's evaluation: rolling accuracy/F1 over the stream and the ROC curve.

matplotlib is imported inside the functions, with the Agg backend selected first, so importing
this module costs nothing and no display is ever needed.
"""

from __future__ import annotations

import numpy as np

from stream_nb.replay.evaluation import EvaluationRecorder, resolve_positive, roc_auc, roc_curve

_MAX_ROC_CLASSES = 10  # one-vs-rest curves drawn at most; more would be unreadable


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curve(series: dict, path, title: str = "Prequential accuracy and F1") -> None:
    """Rolling accuracy and F1 (from `evaluation.rolling_series`) against the event number."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    try:
        window = series.get("window")
        suffix = f" (last {window:,} labeled events)" if window else ""
        ax.plot(series["index"], series["accuracy"], label="accuracy" + suffix, color="tab:blue", linewidth=1.4)
        ax.plot(series["index"], series["f1"], label=series.get("f1_label", "F1") + suffix,
                color="tab:orange", linewidth=1.4)
        ax.set_xlabel("labeled events seen")
        ax.set_ylabel("score")
        low = min([0.0] + [float(np.min(series[key])) for key in ("accuracy", "f1") if len(series[key])])
        ax.set_ylim(max(low - 0.02, 0.0), 1.01)
        ax.set_xlim(left=0)
        ax.xaxis.set_major_formatter(_thousands())
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right")
        ax.set_title(title)
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def _thousands():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _: f"{value:,.0f}")


def plot_roc(recorder: EvaluationRecorder, path, positive=None, title: str = "ROC curve",
             binary: bool = True) -> None:
    """ROC curve(s) from the recorded scores (each class's log-odds, see evaluation.py).

    Two classes: the positive class's curve (see `resolve_positive`), left in linear axes with
    its AUC, right in TREC's form, ham misclassification % against spam misclassification %
    on logit axes (where the differences between good filters show). More classes: one
    one-vs-rest curve per class (at most 10, the most frequent), with their AUCs.
    """
    plt = _pyplot()
    labels = recorder.sorted_labels()
    positive = resolve_positive(labels, positive, binary)
    true = recorder.true_indices
    binary = positive is not None
    if binary:
        curves = [positive]
    else:
        counts = np.bincount(true, minlength=len(recorder.labels))
        curves = sorted(labels, key=lambda label: -counts[recorder._index[label]])[:_MAX_ROC_CLASSES]
    fig, axes = plt.subplots(1, 2 if binary else 1, figsize=(11 if binary else 6.2, 5.2), dpi=110, squeeze=False)
    try:
        ax = axes[0][0]
        for label in curves:
            i = recorder._index[label]
            is_positive = true == i
            scores = recorder.scores(label)  # the log-odds: they rank where P saturates
            fpr, tpr, _ = roc_curve(scores, is_positive)
            auc = roc_auc(scores, is_positive)
            name = f"{label} vs rest" if not binary else f"positive = {label}"
            ax.plot(fpr, tpr, drawstyle="default", linewidth=1.6,
                    label=f"{name}: AUC {auc:.4f}" if auc is not None else f"{name}: AUC undefined")
        ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=0.8, label="chance")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.005)
        ax.set_aspect("equal")
        ax.set_xlabel("false positive rate" + (" (ham called spam)" if binary else ""))
        ax.set_ylabel("true positive rate" + (" (spam caught)" if binary else ""))
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
        ax.set_title(title + ("" if binary else " (one vs rest)"))
        if binary:
            _plot_trec_roc(axes[0][1], recorder, positive)
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def _plot_trec_roc(ax, recorder: EvaluationRecorder, positive) -> None:
    i = recorder._index[positive]
    is_spam = recorder.true_indices == i
    fpr, tpr, _ = roc_curve(recorder.scores(positive), is_spam)
    hams, spams = int((~is_spam).sum()), int(is_spam.sum())
    # matplotlib's logit axes take fractions strictly inside (0, 1): keep the points half an
    # event (the resolution of the data) away from 0 and 1.
    low_h = 0.5 / hams if hams else 1e-4
    low_s = 0.5 / spams if spams else 1e-4
    hm = np.clip(fpr, low_h, 1 - low_h)
    sm = np.clip(1 - tpr, low_s, 1 - low_s)
    score = ("log-odds per sqrt(distinct features)" if recorder.score_scale == "sqrt_features"
             else "log-odds")  # the score ranked: the one predictions carry
    ax.plot(hm, sm, linewidth=1.6, color="tab:red", label=f"{score} of {positive} as spamminess")
    ax.set_xscale("logit")
    ax.set_yscale("logit")
    lo = min(1e-4, low_h, low_s)
    ax.set_xlim(lo, 0.5)
    ax.set_ylim(lo, 1 - lo)
    ax.axvline(0.001, color="grey", linestyle=":", linewidth=1.0, label="hm = 0.1 %")
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    candidates = (1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999)
    percent = FuncFormatter(lambda value, _: f"{100 * value:g}")
    for axis, upper in ((ax.xaxis, 0.5), (ax.yaxis, 1 - lo)):
        axis.set_major_locator(FixedLocator([t for t in candidates if lo <= t <= upper]))
        axis.set_minor_locator(NullLocator())
        axis.set_major_formatter(percent)
    ax.set_xlabel("ham misclassification % (logit scale)")
    ax.set_ylabel("spam misclassification % (logit scale)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize="small")
    ax.set_title("TREC form: hm% vs sm% (lower left is better)")
