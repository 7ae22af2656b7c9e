"""The allocator policy (tapegrad.memory): applied once by the first tape, opt-out respected, no result changes."""

import os
import subprocess
import sys

import numpy as np

import tapegrad as tg
from tapegrad import memory


def test_retain_freed_memory_toggles_and_keeps_results():
    x = np.linspace(-1, 1, 50_000)
    f = lambda x: np.sum(np.tanh(x) ** 2 * np.exp(x))  # noqa: E731
    before = tg.grad(f)(x)
    applied = tg.retain_freed_memory(False)
    try:
        assert isinstance(applied, bool)
        if sys.platform.startswith("linux"):
            assert applied  # glibc's mallopt exists on the Linux machines we test on
        np.testing.assert_array_equal(tg.grad(f)(x), before)
    finally:
        assert tg.retain_freed_memory(True) == applied


_PROBE = """
import sys
import numpy as np
import tapegrad as tg
from tapegrad import memory
calls = []
memory.retain_freed_memory = lambda enabled=True: calls.append(enabled) or True
assert not memory._decided          # importing tapegrad changes nothing
tg.grad(lambda x: np.sum(x * x))(np.ones(3))
tg.grad(lambda x: np.sum(x * x))(np.ones(3))
print(calls)
"""


def _probe(env_value):
    env = dict(os.environ)
    env.pop("TAPEGRAD_RETAIN_MEMORY", None)
    if env_value is not None:
        env["TAPEGRAD_RETAIN_MEMORY"] = env_value
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_first_tape_applies_the_policy_once_and_the_opt_out_is_respected():
    assert _probe(None) == "[True]"
    assert _probe("1") == "[True]"
    assert _probe("0") == "[]"


def test_an_explicit_choice_is_never_overridden(monkeypatch):
    monkeypatch.setattr(memory, "_decided", True)
    calls = []
    monkeypatch.setattr(memory, "retain_freed_memory", lambda enabled=True: calls.append(enabled))
    memory.apply_default_policy()
    assert calls == []
