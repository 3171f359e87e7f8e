"""The README's Python examples run as written (from the repository root,
where their relative model path points)."""

import os
import re
import subprocess
import sys

from conftest import SOURCE_DIR


def python_section_blocks():
    readme = open(os.path.join(SOURCE_DIR, "README.md"), encoding="utf-8").read()
    section = readme.split("\n### Python\n", 1)[1].split("\n### ", 1)[0]
    return section, re.findall(r"```python\n(.*?)```", section, re.S)


def test_readme_install_command_is_the_tested_one():
    section, _ = python_section_blocks()
    assert ".venv/bin/pip install --no-build-isolation --no-index ." in section


def test_readme_examples_run():
    _, blocks = python_section_blocks()
    assert len(blocks) >= 2
    for code in blocks:
        r = subprocess.run([sys.executable, "-c", code], cwd=SOURCE_DIR, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip(), "an example printed nothing"
