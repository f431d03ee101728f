"""The package never imports a framework: importing ``redis_msglog`` (its public names,
adapters, the command line, the testing plugin, the integrations package) loads none of
them; each integration module imports its own framework when the user imports it."""

from __future__ import annotations

import subprocess
import sys

import pytest

FRAMEWORKS = (
    "agents",
    "langchain",
    "langchain_core",
    "langgraph",
    "openai",
    "anthropic",
    "strands",
)

CHECK = """
import sys
import redis_msglog, redis_msglog.adapters, redis_msglog._cli, redis_msglog.testing
import redis_msglog.integrations
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))
assert not loaded, f"imported by redis_msglog: {loaded}"
"""


def test_the_package_imports_no_framework() -> None:
    subprocess.run([sys.executable, "-c", CHECK, *FRAMEWORKS], check=True)


@pytest.mark.parametrize(
    ("module", "framework"),
    [("openai_agents", "agents"), ("langchain", "langchain_core"), ("strands", "strands")],
)
def test_an_integration_imports_its_framework(module: str, framework: str) -> None:
    program = (
        "import sys\n"
        f"import redis_msglog.integrations.{module}\n"
        f"assert {framework!r} in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", program], check=True)
