"""A configured sandbox runtime (`sandbox.python`): numpy and sympy import inside the sandbox,
isolation unchanged, and a bad path is one sentence before anything runs."""

import os
import shutil
import subprocess

import pytest

import tracerl.sandbox as sb
from tracerl.cli import main
from tracerl.errors import UserError
from tracerl.sandbox import Limits, Sandbox
from tracerl.sandbox.runtime import SandboxConfig, check_interpreter, configure

SYSPY = "/usr/bin/python3"
CACHE = "/var/tmp/tracerl-test-runtime"  # outside /tmp: kept between runs (building it takes ~30 s)


@pytest.fixture(scope="session")
def runtime() -> str:
    """A venv of the system interpreter with numpy and sympy (`make sandbox-runtime`'s recipe)."""
    py = f"{CACHE}/bin/python"
    probe = [py, "-I", "-c", "import numpy, sympy"]
    if not (os.path.exists(py) and subprocess.run(probe, capture_output=True).returncode == 0):
        if not os.path.exists(SYSPY):
            pytest.skip("no system interpreter to make a runtime from")
        shutil.rmtree(CACHE, ignore_errors=True)
        made = subprocess.run([SYSPY, "-m", "venv", CACHE], capture_output=True)
        pip = subprocess.run([f"{CACHE}/bin/pip", "install", "-q", "numpy", "sympy"], capture_output=True, text=True)
        if made.returncode or pip.returncode:
            pytest.skip(f"could not build a runtime venv here (offline?): {pip.stderr[-200:]}")
        subprocess.run(["chmod", "-R", "a+rX", CACHE], check=True)
    return py


def test_numpy_and_sympy_import_in_the_configured_runtime_at_the_same_level(runtime):
    code = "import numpy, sympy, sys; print(int(numpy.arange(5).sum()), sympy.sqrt(8), sys.prefix)"
    with Sandbox(python=runtime, preload=("numpy", "sympy")) as box, Sandbox() as plain:
        r = box.run(code, limits=Limits(wall_s=20, cpu_s=10))
        assert (r.status, r.stdout) == ("ok", "10 2*sqrt(2) /runtime\n" if box.level == "full" else r.stdout)
        assert box.level == plain.level  # the runtime does not cost isolation
        bare = plain.run("import numpy", limits=Limits(wall_s=20, cpu_s=10))
        assert bare.status == "error" and "No module named 'numpy'" in bare.stderr
        if box.level == "full":  # the host's files stay out of reach with the runtime bound in
            leak = box.run("import os; print(os.path.exists('/work/wt-surface2'), os.path.exists('/root'))")
            assert leak.stdout == "False False\n"


def test_configure_makes_the_default_sandbox_use_it(runtime):
    try:
        configure(SandboxConfig(python=runtime, modules=["numpy", "sympy"]))
        r = sb.default_sandbox().run("import numpy; print(numpy.zeros(2).tolist())")
        assert (r.status, r.stdout) == ("ok", "[0.0, 0.0]\n")
    finally:
        configure(None)
    assert sb.default_sandbox().python != runtime


@pytest.mark.parametrize("path,message", [
    ("/nonexistent/bin/python", "does not exist"),
    ("relative/python", "is not an absolute path"),
    ("/etc", "is not an executable file"),
    ("/bin/true", "is not a working Python 3.10 or newer"),
])
def test_a_bad_interpreter_is_one_sentence(path, message):
    with pytest.raises(UserError, match=message) as err:
        check_interpreter(path, [])
    assert "\n" not in str(err.value) and str(err.value).startswith(f"sandbox.python {path!r}")


def test_a_missing_module_names_the_install_command(runtime):
    with pytest.raises(UserError, match=r"cannot import numpy, surely_not_a_module .*-m pip install numpy surely_not_a_module"):
        configure(SandboxConfig(python=runtime, modules=["numpy", "surely_not_a_module"]))
    with pytest.raises(UserError, match="is not a module name"):
        check_interpreter(runtime, ["numpy; import os"])


def test_cli_bad_runtime_exits_2_and_creates_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "smoke", "sandbox.python=/nonexistent/python", "run.threads=1"]) == 2
    err = capsys.readouterr().err
    assert "sandbox.python '/nonexistent/python' does not exist" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()
