"""The command line: ``python -m tapegrad demo`` and the entry point of ``check``."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tapegrad import cli, graph


def test_demo_checks_derivatives_and_draws_its_tape(tmp_path, capsys):
    before = np.get_printoptions()
    assert cli.main(["demo", "--graph-dir", str(tmp_path)]) == 0
    assert np.get_printoptions() == before  # the demo's print options stay inside it
    out = capsys.readouterr().out
    assert "all derivatives agree with finite differences" in out
    errors = [float(e) for e in re.findall(r"finite differences[^=]*= ([0-9.e+-]+)", out)]
    assert len(errors) == 4 and max(errors) < 1e-5  # steps 1-3 and scipy.ndimage.gaussian_filter
    # SciPy through the door: the likelihood's gradient against finite differences, brentq's
    # root derivative against its closed form.
    assert float(re.search(r"relative error against finite differences ([0-9.e+-]+)", out).group(1)) < 1e-6
    root, closed = re.search(r"d root / d k = (\S+) \(closed form (\S+)\)", out).groups()
    assert root == closed
    # a sparse Hessian of a spring mesh: 144 vertices and 385 edges, a 3 x 3 block per vertex and two per edge
    assert "scipy.sparse.csr_array, 8226 nonzeros of 186624, every entry equal to the dense Hessian's: True" in out
    dot_path = tmp_path / "tapegrad-demo-tape.dot"
    assert str(dot_path) in out
    dot = dot_path.read_text()
    assert dot.startswith("digraph tape {") and "energy = sum" in dot and "positions" in dot
    svg_path = tmp_path / "tapegrad-demo-tape.svg"
    assert svg_path.exists() == graph.can_render()
    assert (str(svg_path) in out) == graph.can_render()


def test_demo_tape_picture_defaults_to_a_temporary_directory():
    files = cli.draw_demo_tape(np.eye(3))
    try:
        assert os.path.basename(files[0]) == "tapegrad-demo-tape.dot"
        assert "tapegrad-demo-" in os.path.dirname(files[0])
    finally:
        for f in files:
            os.remove(f)
        os.rmdir(os.path.dirname(files[0]))


def test_module_entry_point_runs_check(tmp_path):
    (tmp_path / "mycode.py").write_text("import numpy as np\n\ndef f(x):\n    return np.sum(np.exp(x))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(cli.__file__))]
                                                      + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    done = subprocess.run([sys.executable, "-m", "tapegrad", "check", "mycode:f", "--shape", "3"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "numpy.exp" in done.stdout and "agrees" in done.stdout


def test_unknown_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["nope"])
    assert exc.value.code == 2
