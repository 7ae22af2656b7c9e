"""Sixty scikit-learn calls differentiated with ``array_api_dispatch=True`` (issue 25).

Each case is written the way a PyTorch user writes it: the float arrays in
``args`` are differentiated, and every other array the call needs (labels,
sample weights, a second data set held fixed) is passed through the tracer's
own namespace, ``xp = X.__array_namespace__(); c = xp.asarray(c)``.  Estimators
are fitted inside the differentiated function, so their fitted attributes are
functions of the training data.

Run in SciPy's array-API mode (scikit-learn's dispatch needs it), which SciPy
reads once, at import::

    SCIPY_ARRAY_API=1 python -m tests.sklearn_cases          # the table
    SCIPY_ARRAY_API=1 python -m tests.sklearn_cases -v       # and what does not pass
    SCIPY_ARRAY_API=1 python -m tests.sklearn_cases --json   # every case's status

Each case is classified by :func:`tests.scipy_cases.run_case` (first order, then
second order, against central finite differences): ``pass``, ``pass1`` (first
order only), ``clear`` (a tapegrad error), ``wrong`` (must never happen) or
``other``.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from .scipy_cases import Case, run_case

GROUPS = ("preprocessing", "decomposition", "linear_model", "discriminant", "kernel", "metrics", "pairwise", "utils")

_rng = np.random.default_rng(20251125)


def _u(*shape, lo=-1.0, hi=1.0):
    return _rng.uniform(lo, hi, shape)


def _pos(*shape, lo=0.5, hi=2.0):
    return _rng.uniform(lo, hi, shape)


def _prob_rows(n, k):
    p = _rng.uniform(0.2, 1.0, (n, k))
    return p / p.sum(axis=1, keepdims=True)


def _xp(x):
    return x.__array_namespace__()


# Fixed data, passed through the tracer's namespace inside each case.
Y_CLASS = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2])   # three classes, three samples each
Y_BIN = np.array([0, 1, 1, 0, 1, 0, 0, 1])
W_SAMPLE = np.linspace(0.5, 1.5, 8)
Z_FIXED = _u(4, 3)


def cases() -> list:
    """The sixty cases (imports scikit-learn and turns on ``array_api_dispatch``)."""
    import sklearn
    from sklearn import preprocessing as pp
    from sklearn.decomposition import PCA
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis as LDA
    from sklearn.kernel_approximation import Nystroem
    from sklearn.kernel_ridge import KernelRidge
    from sklearn.linear_model import LinearRegression, Ridge, RidgeClassifier
    from sklearn.naive_bayes import GaussianNB
    import sklearn.metrics as skm
    import sklearn.metrics.pairwise as pw
    from sklearn.utils import extmath

    sklearn.set_config(array_api_dispatch=True)
    raw = {"multioutput": "raw_values"}

    def c(xp_of, a):
        return _xp(xp_of).asarray(a)

    def lda_fit(X):
        return LDA(solver="svd").fit(X, c(X, Y_CLASS))

    P = "preprocessing"
    D = "decomposition"
    L = "linear_model"
    Q = "discriminant"
    K = "kernel"
    M = "metrics"
    W = "pairwise"
    U = "utils"
    X63, X93 = _u(6, 3), _u(9, 3) + np.repeat(np.eye(3), 3, axis=0)
    return [
        # ------------------------------------------------------------ preprocessing
        Case(P, "StandardScaler.fit_transform", lambda X: pp.StandardScaler().fit_transform(X), (X63,)),
        Case(P, "StandardScaler.fit(X).transform(Z)", lambda X, Z: pp.StandardScaler().fit(X).transform(Z), (_u(6, 3), _u(4, 3))),
        Case(P, "StandardScaler(sample_weight)", lambda X: pp.StandardScaler().fit(X, sample_weight=c(X, W_SAMPLE[:6])).transform(X), (_u(6, 3),)),
        Case(P, "StandardScaler.inverse_transform", lambda X, Z: pp.StandardScaler().fit(X).inverse_transform(Z), (_u(6, 3), _u(4, 3))),
        Case(P, "MinMaxScaler.fit_transform", lambda X: pp.MinMaxScaler().fit_transform(X), (_u(6, 3),)),
        Case(P, "MaxAbsScaler.fit_transform", lambda X: pp.MaxAbsScaler().fit_transform(X), (_u(6, 3),)),
        Case(P, "RobustScaler.fit_transform", lambda X: pp.RobustScaler().fit_transform(X), (_u(7, 3),)),
        Case(P, "Normalizer(l2)", lambda X: pp.Normalizer().fit_transform(X), (_u(5, 3),)),
        Case(P, "Normalizer(l1)", lambda X: pp.Normalizer(norm="l1").fit_transform(X), (_pos(5, 3),)),
        Case(P, "PolynomialFeatures(2)", lambda X: pp.PolynomialFeatures(2).fit_transform(X), (_u(4, 3),)),
        Case(P, "scale", pp.scale, (_u(6, 3),)),
        Case(P, "normalize", pp.normalize, (_u(5, 3),)),
        Case(P, "minmax_scale", pp.minmax_scale, (_u(6, 3),)),
        Case(P, "maxabs_scale", pp.maxabs_scale, (_u(6, 3),)),
        Case(P, "add_dummy_feature", lambda X: pp.add_dummy_feature(X, value=2.0), (_u(4, 3),)),
        # ------------------------------------------------------------ decomposition
        Case(D, "PCA.fit_transform", lambda X: PCA(n_components=2, svd_solver="full").fit_transform(X), (_u(7, 3),)),
        Case(D, "PCA.fit(X).transform(Z)", lambda X, Z: PCA(n_components=2, svd_solver="full").fit(X).transform(Z), (_u(7, 3), _u(3, 3))),
        Case(D, "PCA.inverse_transform", lambda X: (lambda p: p.inverse_transform(p.transform(X)))(PCA(n_components=2, svd_solver="full").fit(X)), (_u(7, 3),)),
        Case(D, "PCA.explained_variance_", lambda X: PCA(svd_solver="full").fit(X).explained_variance_, (_u(7, 3),)),
        Case(D, "PCA(whiten=True).fit_transform", lambda X: PCA(n_components=2, whiten=True, svd_solver="full").fit_transform(X), (_u(7, 3),)),
        Case(D, "PCA(covariance_eigh).transform", lambda X, Z: PCA(n_components=2, svd_solver="covariance_eigh").fit(X).transform(Z), (_u(8, 3), _u(3, 3))),
        # ------------------------------------------------------------ linear models
        Case(L, "Ridge.fit.coef_ (X, y)", lambda X, y: Ridge(alpha=0.5).fit(X, y).coef_, (_u(6, 3), _u(6))),
        Case(L, "Ridge.fit.predict(Z)", lambda X, y: Ridge(alpha=0.5).fit(X, y).predict(c(X, Z_FIXED)), (_u(6, 3), _u(6))),
        Case(L, "Ridge.predict in Z", lambda Z: Ridge(alpha=0.5).fit(c(Z, X63), c(Z, X63[:, 0])).predict(Z), (_u(4, 3),)),
        Case(L, "Ridge(sample_weight).intercept_", lambda X, y: Ridge(alpha=0.5).fit(X, y, sample_weight=c(X, W_SAMPLE[:6])).intercept_, (_u(6, 3), _u(6))),
        Case(L, "LinearRegression.fit.coef_", lambda X, y: LinearRegression().fit(X, y).coef_, (_u(7, 3), _u(7))),
        Case(L, "LinearRegression.predict(Z)", lambda X, y: LinearRegression().fit(X, y).predict(c(X, Z_FIXED)), (_u(7, 3), _u(7))),
        Case(L, "RidgeClassifier.decision_function", lambda X: RidgeClassifier().fit(X, c(X, Y_CLASS)).decision_function(X), (X93.copy(),)),
        # ------------------------------------------------------------ discriminant analysis, naive Bayes
        Case(Q, "LDA.transform", lambda X: lda_fit(X).transform(X), (X93.copy(),)),
        Case(Q, "LDA.predict_proba", lambda X: lda_fit(X).predict_proba(X), (X93.copy(),)),
        Case(Q, "LDA.decision_function(Z)", lambda Z: LDA().fit(c(Z, X93), c(Z, Y_CLASS)).decision_function(Z), (_u(4, 3),)),
        Case(Q, "GaussianNB.predict_proba", lambda X: GaussianNB().fit(X, c(X, Y_CLASS)).predict_proba(X), (X93.copy(),)),
        # ------------------------------------------------------------ kernel methods
        Case(K, "KernelCenterer.fit_transform", lambda X: pp.KernelCenterer().fit_transform(X @ _xp(X).matrix_transpose(X)), (_u(5, 3),)),
        Case(K, "KernelRidge(rbf).predict", lambda X, y: KernelRidge(alpha=0.5, kernel="rbf").fit(X, y).predict(X), (_u(6, 3), _u(6))),
        Case(K, "Nystroem.fit_transform", lambda X: Nystroem(n_components=4, random_state=0).fit_transform(X), (_u(6, 3),)),
        # ------------------------------------------------------------ metrics
        Case(M, "mean_squared_error", lambda t, p: skm.mean_squared_error(t, p, **raw), (_u(6, 2), _u(6, 2))),
        Case(M, "mean_absolute_error", lambda t, p: skm.mean_absolute_error(t, p, **raw), (_u(6, 2), _u(6, 2))),
        Case(M, "r2_score", lambda t, p: skm.r2_score(t, p, **raw), (_u(6, 2), _u(6, 2))),
        Case(M, "explained_variance_score", lambda t, p: skm.explained_variance_score(t, p, **raw), (_u(6, 2), _u(6, 2))),
        Case(M, "mean_absolute_percentage_error", lambda t, p: skm.mean_absolute_percentage_error(t, p, **raw), (_pos(6, 2), _pos(6, 2))),
        Case(M, "mean_squared_log_error", lambda t, p: skm.mean_squared_log_error(t, p, **raw), (_pos(6, 2), _pos(6, 2))),
        Case(M, "mean_pinball_loss", lambda t, p: skm.mean_pinball_loss(t, p, alpha=0.3, **raw), (_u(6, 2), _u(6, 2))),
        Case(M, "d2_pinball_score", lambda t, p: skm.d2_pinball_score(t, p, **raw), (_u(6, 2), _u(6, 2))),
        Case(M, "mean_poisson_deviance(weights)", lambda t, p: skm.mean_tweedie_deviance(t, p, power=1, sample_weight=c(t, W_SAMPLE[:6])), (_pos(6), _pos(6))),
        Case(M, "log_loss (probabilities)", lambda p: skm.log_loss(c(p, Y_CLASS[:6]), p), (_prob_rows(6, 3),)),
        Case(M, "brier_score_loss", lambda p: skm.brier_score_loss(c(p, Y_BIN), p), (_pos(8, lo=0.1, hi=0.9),)),
        # ------------------------------------------------------------ pairwise kernels and distances
        Case(W, "linear_kernel", pw.linear_kernel, (_u(3, 2), _u(4, 2))),
        Case(W, "polynomial_kernel", lambda a, b: pw.polynomial_kernel(a, b, degree=3, coef0=1.0), (_u(3, 2), _u(4, 2))),
        Case(W, "rbf_kernel", lambda a, b: pw.rbf_kernel(a, b, gamma=0.5), (_u(3, 2), _u(4, 2))),
        Case(W, "laplacian_kernel", pw.laplacian_kernel, (_u(3, 2), _u(4, 2))),
        Case(W, "sigmoid_kernel", lambda a, b: pw.sigmoid_kernel(a, b, gamma=0.3), (_u(3, 2), _u(4, 2))),
        Case(W, "chi2_kernel", pw.chi2_kernel, (_pos(3, 2), _pos(4, 2))),
        Case(W, "cosine_similarity", pw.cosine_similarity, (_u(3, 2), _u(4, 2))),
        Case(W, "cosine_distances", pw.cosine_distances, (_u(3, 2), _u(4, 2))),
        Case(W, "euclidean_distances", pw.euclidean_distances, (_u(3, 2), _u(4, 2))),
        Case(W, "manhattan_distances", pw.manhattan_distances, (_u(3, 2), _u(4, 2))),
        Case(W, "paired_euclidean_distances", pw.paired_euclidean_distances, (_u(4, 2), _u(4, 2))),
        # ------------------------------------------------------------ utils
        Case(U, "extmath.softmax", lambda X: extmath.softmax(X, copy=True), (_u(4, 3),)),
        Case(U, "extmath.safe_sparse_dot", extmath.safe_sparse_dot, (_u(3, 4), _u(4, 2))),
        Case(U, "extmath.row_norms(squared)", lambda X: extmath.row_norms(X, squared=True), (_u(4, 3),)),
    ]


def run_all() -> dict:
    """``{case name: [group, status, detail]}`` for every case."""
    return {f"{c.module}:{c.name}": [c.module, *run_case(c)] for c in cases()}


def table(results: dict) -> str:
    lines = ["| group | cases | pass (1st + 2nd order) | 1st order only | clear error | wrong or other |", "|---|---|---|---|---|---|"]
    totals = np.zeros(5, dtype=int)
    for group in GROUPS:
        st = [s for g, s, _ in results.values() if g == group]
        row = np.array([len(st), st.count("pass"), st.count("pass1"), st.count("clear"), st.count("wrong") + st.count("other")])
        totals += row
        lines.append(f"| {group} | " + " | ".join(map(str, row)) + " |")
    lines.append("| **all** | " + " | ".join(f"**{t}**" for t in totals) + " |")
    return "\n".join(lines)


def main(argv: list) -> None:
    results = run_all()
    if "--json" in argv:
        print(json.dumps(results))
        return
    print(table(results))
    if "-v" in argv:
        for name, (_, status, detail) in results.items():
            if status != "pass":
                print(f"{name}: {status}: {detail[:400]}")


if __name__ == "__main__":
    main(sys.argv[1:])
