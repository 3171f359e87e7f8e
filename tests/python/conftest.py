"""Shared fixtures of the Python package tests (tests/python/run.sh runs
them in a fresh venv with the package installed as the README says)."""

import os
import subprocess
import sys

import pytest

SOURCE_DIR = os.environ["PAGODA_SOURCE_DIR"]
BINARY = os.environ["PAGODA_BINARY"]
STORIES = os.path.join(SOURCE_DIR, "models", "stories260k")


@pytest.fixture(scope="session")
def stories_llm():
    import pagoda
    return pagoda.LLM(STORIES, max_model_len=512, threads=2)


@pytest.fixture(scope="session")
def qwen3_dir(tmp_path_factory):
    """A tiny random Qwen3 with the real Qwen3 tokenizer and chat template
    (as tests/e2e/test_random_checkpoint.sh makes it)."""
    out = tmp_path_factory.mktemp("qwen3") / "tiny"
    subprocess.run(["/usr/bin/python3", os.path.join(SOURCE_DIR, "tools", "make_random_checkpoint.py"),
                    "--out", str(out), "--layers", "2", "--hidden", "32", "--heads", "4",
                    "--kv-heads", "2", "--head-dim", "16", "--intermediate", "64", "--seed", "3"],
                   check=True, stdout=subprocess.DEVNULL)
    return str(out)


def run_cli(*args):
    """`pagoda ARGS...`; its stdout."""
    r = subprocess.run([BINARY, *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


sys.path.insert(0, os.path.join(SOURCE_DIR, "tools"))  # the jinja2 chat-template oracle
