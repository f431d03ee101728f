"""The package never imports a framework: importing ``redis_msglog`` (its public names,
adapters, the command line, the testing plugin, the integrations package) loads none of
them; each integration module imports its own framework when the user imports it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ..conftest import require_frameworks

FRAMEWORKS = (
    "agents",
    "langchain",
    "langchain_core",
    "langgraph",
    "openai",
    "anthropic",
    "agent_framework",
    "strands",
    "google",
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
    [
        ("openai_agents", "agents"),
        ("langchain", "langchain_core"),
        ("agent_framework", "agent_framework"),
        ("google_adk", "google.adk"),
        ("strands", "strands"),
    ],
)
def test_an_integration_imports_its_framework(module: str, framework: str) -> None:
    require_frameworks()
    program = (
        "import sys\n"
        f"import redis_msglog.integrations.{module}\n"
        f"assert {framework!r} in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", program], check=True)


def test_the_import_module_loads_a_framework_only_when_its_source_is_read() -> None:
    """``msglog import --from`` imports ``integrations.migrate``: the Agents SDK's items
    need no framework, LangChain's and LlamaIndex's rows load theirs when decoded."""
    frameworks = {*FRAMEWORKS, "llama_index"}
    program = (
        "import sys\n"
        "import redis_msglog.integrations.migrate as m\n"
        "m.layout('openai-agents'); m.layout('langchain')\n"
        f"loaded = {{x.split('.')[0] for x in sys.modules}} & {frameworks!r}\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", program], check=True)
