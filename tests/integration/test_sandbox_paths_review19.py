"""Programs import what is installed where rlxf runs (found running the suite as a non-root user).

- The sandbox server runs the venv's base interpreter (a venv's python is a link that a
  private /tmp can hide), so programs got the base installation's packages, not the venv's:
  ``import numpy`` failed wherever numpy was installed in the venv only. Now the programs'
  search path is the caller's site-packages.
- A venv under /tmp (a clone in ``mktemp -d``) was bound into the sandbox's root and then
  hidden by each job's private /tmp; the job now binds it back.
- Run as a non-root user, strict mode could not bound SysV shared memory (the IPC limits are
  writable only by uid 0 of the user namespace owning the IPC namespace): the unprivileged
  test in test_sandbox_modes.py checks that a segment past the memory limit is refused.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from rlxf.rewards.sandbox import Sandbox, SandboxLimits, TestCase

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")


@pytest.fixture
def site_under_tmp(monkeypatch):
    """A site-packages folder under /tmp that only the caller has on its sys.path."""
    top = Path(tempfile.mkdtemp(prefix="rlxf-site-review19-"))
    site = top / "lib" / "site-packages"
    site.mkdir(parents=True)
    (site / "rlxf_probe_review19.py").write_text("VALUE = 42\n")
    for path in [top, *top.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # the program's uid reads it
    monkeypatch.syspath_prepend(str(site))
    yield site
    shutil.rmtree(top)


@pytest.mark.parametrize("isolation", ["strict", "weak"])
def test_a_program_imports_a_package_only_the_caller_has_even_under_tmp(site_under_tmp, isolation):
    with Sandbox(SandboxLimits(cpu_s=2, wall_s=20), concurrency=1, isolation=isolation) as box:
        out = box.run("import rlxf_probe_review19 as m\nprint(m.VALUE)", [TestCase.stdio("")]).tests[0]
    assert (out.status, out.stdout) == ("ok", "42\n"), out.stderr


def test_the_programs_search_path_holds_the_callers_site_packages():
    wanted = sorted({os.path.realpath(p) for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))})
    with Sandbox(SandboxLimits(cpu_s=2, wall_s=20), concurrency=1) as box:
        code = "import sys, os\nprint(sorted(p for p in sys.path if os.path.isdir(p)))"
        out = box.run(code, [TestCase.stdio("")]).tests[0]
    assert out.status == "ok", out.stderr
    seen = eval(out.stdout)  # noqa: S307 - a list of strings we printed
    assert [p for p in wanted if os.path.isdir(p) and p not in seen] == []
