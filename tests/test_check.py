"""``python -m tapegrad check``: call survey, derivatives, finite-difference verdict, exit codes."""

import io
import json
import math

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import check, cli
from tapegrad.dispatch import primitive
from tapegrad.registry import lookup


# ----------------------------------------------------------------- functions checked below
def smooth(x, W):
    return np.sum(np.tanh(W @ x) ** 2) + np.sum(np.floor(x) * x)


def _cube(x):
    return x**3


cube = primitive(_cube)
# Deliberately wrong: d(x^3)/dx is 3x^2, not 2x^2.  `check` must catch it.
tg.defvjp(cube, lambda g, ans, x: g * 2 * x**2)


def uses_wrong_rule(x):
    return np.sum(cube(x) + x)


_erf_ufunc = np.frompyfunc(math.erf, 1, 1)  # a ufunc tapegrad has no rule for


def uses_unsupported(x):
    return np.sum(_erf_ufunc(x).astype(float) * np.sin(x))


def drops_gradient(x):
    return float(np.sum(x))


def vector_valued(x):
    return np.sin(x) * x[::-1]


def _run(argv):
    """Run the CLI in-process; return (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    parser_args = ["check"] + argv
    import argparse

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    check.add_arguments(sub.add_parser("check"))
    code = check.run(parser.parse_args(parser_args), out, err)
    return code, out.getvalue(), err.getvalue()


# ----------------------------------------------------------------- supported code
def test_supported_function_passes_with_closed_form_gradient():
    rng = np.random.default_rng(1)
    x, W = rng.standard_normal(3), rng.standard_normal((2, 3))
    report = check.check_function(smooth, [x, W])
    assert report.exit_code == 0 and report.ok and report.fd_error < 1e-8
    h = np.tanh(W @ x)
    dx = W.T @ (2 * h * (1 - h**2)) + np.floor(x)
    np.testing.assert_allclose(report.derivatives[0], dx, rtol=1e-12)
    np.testing.assert_allclose(report.derivatives[1], np.outer(2 * h * (1 - h**2), x), rtol=1e-12)
    kinds = {c.name: c.kind for c in report.calls}
    assert kinds["numpy.floor"] == lookup(np.floor).kind
    assert kinds["numpy.tanh"] == "primitive" and kinds["numpy.matmul"] == "primitive"
    counts = {c.name: c.count for c in report.calls}
    assert counts["numpy.sum"] == 2 and counts["numpy.add"] == 1


def test_cli_table_json_and_graph(tmp_path):
    code, out, err = _run(["tests.test_check:smooth", "--shape", "3", "--shape", "2,3", "--graph", str(tmp_path / "t.dot")])
    assert code == 0, out + err
    assert "numpy.matmul" in out and "agrees" in out and "\033[" not in out
    header = next(line for line in out.splitlines() if line.strip().startswith("function"))
    kind_column = header.index("kind")
    rows = [line for line in out.splitlines() if line.strip().startswith("numpy.")]
    assert rows and all(line[kind_column:].split()[0] in ("primitive", "constant", "composite") for line in rows)
    assert "digraph" in (tmp_path / "t.dot").read_text()

    code, out, _ = _run(["tests.test_check:smooth", "--shape", "3", "--shape", "2,3", "--json", "--color", "always"])
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["finite_differences"]["agree"]
    assert data["inputs"] == [{"shape": [3], "dtype": "float64"}, {"shape": [2, 3], "dtype": "float64"}]
    assert np.shape(data["derivatives"][1]) == (2, 3)


def test_jacobian_hessian_and_sum_gradient_modes():
    x = np.linspace(-1, 1, 4)
    report = check.check_function(vector_valued, [x])
    assert report.ok and "sum(output)" in report.note
    np.testing.assert_allclose(report.derivatives[0], tg.grad(lambda v: np.sum(vector_valued(v)))(x))
    report = check.check_function(vector_valued, [x], mode="jacobian")
    assert report.ok and report.derivatives[0].shape == (4, 4)
    np.testing.assert_allclose(np.diag(report.derivatives[0]), np.cos(x) * x[::-1])  # n even: i != n-1-i
    report = check.check_function(lambda v: np.sum(v**4), [x], mode="hessian")
    assert report.ok
    np.testing.assert_allclose(report.derivatives[0], np.diag(12 * x**2))


def test_float32_inputs_and_npz_inputs(tmp_path):
    code, out, _ = _run(["tests.test_check:vector_valued", "--shape", "5", "--dtype", "float32", "--jacobian", "--json"])
    data = json.loads(out)
    assert code == 0 and data["inputs"][0]["dtype"] == "float32" and data["finite_differences"]["tolerance"] == 2e-3

    W, x = np.eye(2, 3), np.array([0.5, -1.3, 2.2])  # away from floor's jumps
    np.savez(tmp_path / "in.npz", W=W, x=x)  # saved out of order: matched to parameter names
    code, out, _ = _run(["tests.test_check:smooth", "--inputs", str(tmp_path / "in.npz"), "--json"])
    data = json.loads(out)
    assert code == 0 and data["inputs"][0]["shape"] == [3] and data["value"] == pytest.approx(smooth(x, W))


def test_progress_goes_to_stderr():
    code, out, err = _run(["tests.test_check:vector_valued", "--shape", "30", "--progress"])
    assert code == 0 and "finite differences: 30/30 inputs" in err and "inputs\n" in err
    assert "finite differences: 30/30" not in out


# ----------------------------------------------------------------- failures
def test_unsupported_call_is_reported_with_exit_code_3():
    report = check.check_function(uses_unsupported, [np.array([0.1, 0.2])])
    assert report.exit_code == 3 and not report.derivatives
    (name,) = report.unsupported
    assert "erf" in name
    assert {c.name for c in report.calls if c.kind == "primitive"} >= {"numpy.sin", "numpy.multiply", "numpy.sum"}

    code, out, _ = _run(["tests.test_check:uses_unsupported", "--shape", "3"])
    assert code == 3 and "unsupported: erf (vectorized)" in out and "tapegrad.defvjp" in out


def test_wrong_custom_rule_is_caught():
    x = np.array([0.5, 1.0, -2.0])
    report = check.check_function(uses_wrong_rule, [x])
    assert report.exit_code == 1 and not report.ok
    np.testing.assert_allclose(report.derivatives[0], 2 * x**2 + 1)  # what the wrong rule says
    true_error = np.max(np.abs(x**2)) / max(1.0, np.max(3 * x**2 + 1))
    assert report.fd_error == pytest.approx(true_error, rel=1e-6)
    assert any(c.name.endswith("_cube") and c.kind == "primitive" for c in report.calls)

    code, out, _ = _run(["tests.test_check:uses_wrong_rule", "--shape", "4"])
    assert code == 1 and "DISAGREES" in out
    code, out, _ = _run(["tests.test_check:uses_wrong_rule", "--shape", "4", "--json"])
    assert code == 1 and json.loads(out)["finite_differences"]["agree"] is False


def test_dropped_gradient_is_an_error():
    code, out, _ = _run(["tests.test_check:drops_gradient", "--shape", "2"])
    assert code == 3 and "GradientDroppedError" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["tests.test_check:nope", "--shape", "2"], "no attribute"),
        (["no_such_module_xyz:f", "--shape", "2"], "cannot import"),
        (["tests.test_check:smooth"], "--shape"),
        (["tests.test_check:smooth", "--shape", "3,a"], "bad shape"),
        (["tests.test_check:smooth", "--inputs", "no-such-file.npz"], "no such file"),
        (["tests.test_check:smooth", "--shape", "3", "--shape", "2,3", "--argnums", "5"], "out of range"),
    ],
)
def test_usage_errors_exit_2(argv, message):
    code, out, err = _run(argv)
    assert code == 2 and message in err and out == ""


def test_function_from_a_file_path_and_main_entry(tmp_path, capsys):
    path = tmp_path / "user_code.py"
    path.write_text("import numpy as np\n\ndef energy(q):\n    return np.sum(np.cos(q) ** 2)\n")
    assert cli.main(["check", f"{path}:energy", "--shape", "2,2", "--uniform", "0", "1"]) == 0
    assert "agrees" in capsys.readouterr().out
