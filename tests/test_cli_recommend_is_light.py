"""`polyplan recommend --profile` is pure planning: it must not import torch or transformers
(importing torch alone takes over a second; the issue asks for a plan in under 2 s)."""

import subprocess
import sys

from conftest import shipped_paper_profile

CHECK = """
import sys
from typer.testing import CliRunner
from polyplan.cli.app import app
result = CliRunner().invoke(app, ["recommend", "--profile", sys.argv[1], "--out", sys.argv[2]])
assert result.exit_code == 0, result.output
heavy = sorted(name for name in ("torch", "transformers") if name in sys.modules)
print("heavy:", ",".join(heavy) or "none")
"""


def test_recommend_from_a_profile_imports_no_torch(tmp_path):
    out = subprocess.run([sys.executable, "-c", CHECK, str(shipped_paper_profile()), str(tmp_path / "plan.json")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("heavy: none"), out.stdout
    assert (tmp_path / "plan.json").is_file()
