"""Lint and types are part of the test command: ruff (with a complexity limit), and
mypy strict on the package, its tests and the benchmarks (pyproject's [tool.mypy] files)
but the files that need the agent frameworks, whose imports it skips (those are
type-checked with the frameworks, by ``contract/test_integration_types.py``)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest's own dependency on 3.10
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_lint() -> None:
    result = _run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = _run("ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


#: The files that import an agent framework (the ``test-frameworks`` extra), as mypy's
#: ``exclude`` regex: the integrations, their tests and support, the framework benchmarks.
FRAMEWORK_FILES = (
    r"^redis_msglog/integrations/",
    r"^tests/contract/test_(integration_.*|strands_hostile|hostile_content|bad_arguments)\.py$",
    r"^tests/faults/test_tenant_isolation_integrations\.py$",
    r"^tests/support/(agent_framework_client|strands_env|strands_model)\.py$",
    r"^benchmarks/(agent_loop|agent_loop_maf|contenders)\.py$",
)
#: Their imports, skipped (``Any``) where the files checked here reach them.
FRAMEWORK_IMPORTS = (
    "langchain", "langchain.*", "strands", "strands.*", "pydantic_ai", "pydantic_ai.*",
    "agent_framework", "agent_framework.*",
    "google.adk.*", "google.genai.*", "redis_msglog.integrations.*", "agents", "agents.*",
    "llama_index", "llama_index.*",
)  # fmt: skip


def core_mypy_config() -> str:
    """pyproject's ``[tool.mypy]`` as an ini file, less the framework files, whose
    imports are skipped where the files checked here reach them."""
    settings = dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"])
    overrides = settings.pop("overrides")
    assert settings.pop("files") == ["redis_msglog", "tests", "benchmarks", "scripts"]
    lines = ["[mypy]", f"exclude = ({'|'.join(FRAMEWORK_FILES)})"]
    lines += [f"{key} = {_ini(value)}" for key, value in settings.items()]
    for override in overrides:
        lines.append(f"[mypy-{','.join(override['module'])}]")
        lines += [f"{k} = {_ini(v)}" for k, v in override.items() if k != "module"]
    skipped = ["follow_imports = skip", "ignore_missing_imports = True"]  # installed or not
    lines += [f"[mypy-{','.join(FRAMEWORK_IMPORTS)}]", *skipped]
    return "\n".join(lines) + "\n"


def _ini(value: object) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def test_mypy_strict_on_what_needs_no_framework(tmp_path: Path) -> None:
    config = tmp_path / "mypy.ini"
    config.write_text(core_mypy_config())
    # A cache of its own: the framework tier's mypy run may be running at the same time.
    cache = ROOT / ".mypy_cache" / "core"
    args = ("--config-file", str(config), "--cache-dir", str(cache))
    result = _run("mypy", *args, "redis_msglog", "tests", "benchmarks", "scripts")
    assert result.returncode == 0, result.stdout + result.stderr
    checked = re.search(r"in (\d+) source files", result.stdout)
    assert checked and int(checked[1]) > 150, result.stdout  # the exclusion is no blanket


def test_the_sync_client_is_generated_from_the_async_one() -> None:
    """Every file of ``_sync/`` is exactly what ``scripts/unasync.py`` makes of its twin in
    ``_async/`` (and ``_sync/`` holds no other)."""
    result = subprocess.run(
        [sys.executable, "scripts/unasync.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


_BINDING = re.compile(
    r"^-- == Binding block.*?$(.*?)^-- == End of the binding block ==$", re.M | re.S
)
_BOUND = re.compile(r"^(?:tonumber\()?(ARGV|KEYS)\[(\d+)\]\)?$")
_NUMBERED = re.compile(r"\b(?:ARGV|KEYS)\[\s*\d")


def _bindings(script: str) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The ``(name, position)`` pairs the script's binding block binds from ``ARGV`` and
    from ``KEYS``, in order (a multiple assignment pairs its names and values)."""
    found = _BINDING.search((ROOT / "lua" / script).read_text(encoding="utf-8"))
    assert found, f"{script} has no binding block"
    bound: dict[str, list[tuple[str, int]]] = {"ARGV": [], "KEYS": []}
    for line in found[1].splitlines():
        code = line.split("--")[0].strip().removeprefix("local ")
        if "=" not in code or code.startswith("if "):
            continue
        names, values = (part.split(",") for part in code.split("=", 1))
        for name, value in zip(names, values, strict=True):
            is_argument = _BOUND.match(value.strip())
            if is_argument:
                bound[is_argument[1]].append((name.strip(), int(is_argument[2])))
    return bound["ARGV"], bound["KEYS"]


def _documented(script: str) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The ``(name, position)`` pairs the script's header documents, ARGV then KEYS."""
    header = (ROOT / "lua" / script).read_text(encoding="utf-8")
    pairs = re.findall(r"^-- (ARGV|KEYS)\[(\d+)\]\s+(\w+):", header, flags=re.M)
    return (
        [(name, int(at)) for kind, at, name in pairs if kind == "ARGV"],
        [(name, int(at)) for kind, at, name in pairs if kind == "KEYS"],
    )


def _positions(names: tuple[str, ...], *, keys: bool = False) -> list[tuple[str, int]]:
    return [(name.upper() if keys else name, at) for at, name in enumerate(names, start=1)]


def test_the_append_scripts_bindings_match_its_wrapper() -> None:
    """``lua/append.lua`` binds each argument to a local of the name the wrapper sends it
    under, at the same position, and its header documents each by that name."""
    from redis_msglog._lua.contract import ARGV_NAMES, KEY_NAMES

    argv, keys = _bindings("append.lua")
    assert argv == _positions(ARGV_NAMES)
    # Every key layout the wrapper sends (view and hidden, and a record, only sometimes)
    # is one the script binds; the last binding of each name is the full layout.
    layouts = [
        KEY_NAMES[:2], (*KEY_NAMES[:2], "producers"), KEY_NAMES[:4],
        (*KEY_NAMES[:4], "record", "records"), KEY_NAMES[:6], KEY_NAMES,
    ]  # fmt: skip
    assert set(keys) == {pair for layout in layouts for pair in _positions(layout, keys=True)}
    assert sorted(dict(keys).items(), key=lambda pair: pair[1]) == _positions(KEY_NAMES, keys=True)
    assert _documented("append.lua") == (_positions(ARGV_NAMES), _positions(KEY_NAMES, keys=True))
    block = _BINDING.search((ROOT / "lua" / "append.lua").read_text(encoding="utf-8"))
    assert block and f"local NAMED = {len(ARGV_NAMES)} " in block[1]  # the tail's base


def test_the_plain_append_scripts_bindings_match_its_wrapper() -> None:
    """``lua/append_plain.lua`` binds the names ``PLAIN_ARGV_NAMES`` and
    ``PLAIN_KEY_NAMES`` say, where they say, and documents each; its owner record is the
    last key, bound by count."""
    from redis_msglog._lua.contract import PLAIN_ARGV_NAMES, PLAIN_KEY_NAMES

    expected = (_positions(PLAIN_ARGV_NAMES), _positions(PLAIN_KEY_NAMES[:3], keys=True))
    assert _bindings("append_plain.lua") == expected
    assert _documented("append_plain.lua") == expected
    block = _BINDING.search((ROOT / "lua" / "append_plain.lua").read_text(encoding="utf-8"))
    assert block and f"local NAMED = {len(PLAIN_ARGV_NAMES)} " in block[1]
    assert "OWNER = KEYS[#KEYS]" in block[1]


def test_a_plain_append_call_sends_its_keys_and_names_by_position() -> None:
    """A plain call of a scoped log with a producer: every key and name read back."""
    from redis_msglog._core.stored.keys import ConversationKeys
    from redis_msglog._lua.contract import PLAIN_ARGV_NAMES, AppendCall
    from redis_msglog._lua.load import load_script

    keys = ConversationKeys.build("msglog", "conv")
    call = AppendCall(
        keys, (b"m1", b"m2"), "", publish="PUBLISH", record_ttl_ms=7, look_up=True,
        producer="prod", pseq=4, floor=3, scope="acme/eu",
    )  # fmt: skip
    assert call.plain
    command = ("EVALSHA", load_script("append_plain.lua").sha, *call.keys_and_args())
    assert AppendCall.sent_keys(command) == {
        "seq": keys.seq, "stream": keys.stream, "producers": keys.producers, "owner": keys.owner,
    }  # fmt: skip
    assert {name: AppendCall.argument(command, name) for name in PLAIN_ARGV_NAMES} == {
        "publish": "PUBLISH", "channel": keys.channel, "record_ttl_ms": 7, "look_up": "1",
        "call": "", "producer": "prod", "pseq": 4, "floor": 3, "scope": "acme/eu",
    }  # fmt: skip
    assert AppendCall.argument(command, "op") == "" and command[-2:] == (b"m1", b"m2")
    # Anything the plain script does not take makes it append.lua's call.
    assert not dataclasses.replace(call, expected_seq=2).plain


def test_the_keyed_append_scripts_bindings_match_its_wrapper() -> None:
    """``lua/append_keyed.lua`` binds ``KEYED_ARGV_NAMES`` in order, and its third key as
    the producers hash or, with a record, the record and its set (never both); its
    owner record is the last key, bound by count. Its header documents each."""
    from redis_msglog._lua.contract import KEYED_ARGV_NAMES, KEYED_KEY_NAMES

    keys = [("SEQ", 1), ("STREAM", 2), ("PRODUCERS", 3), ("RECORD", 3), ("RECORDS", 4)]
    assert [name.lower() for name, _ in keys] == list(KEYED_KEY_NAMES[:5])
    expected = (_positions(KEYED_ARGV_NAMES), keys)
    assert _bindings("append_keyed.lua") == expected
    assert _documented("append_keyed.lua") == expected
    block = _BINDING.search((ROOT / "lua" / "append_keyed.lua").read_text(encoding="utf-8"))
    assert block and f"local NAMED = {len(KEYED_ARGV_NAMES)} " in block[1]
    assert "OWNER = KEYS[#KEYS]" in block[1]


@pytest.mark.parametrize("keyed_by", ["record", "producer", "neither"])
def test_a_keyed_append_call_sends_its_keys_and_names_by_position(keyed_by: str) -> None:
    """A call with a caller's record, a producer (an in-doubt key's, or the process's with
    ``expected_seq``) or neither: every key and name read back; anything else the general
    script takes makes it that script's call."""
    from redis_msglog._core.stored.keys import ConversationKeys
    from redis_msglog._lua.contract import KEYED_ARGV_NAMES, AppendCall
    from redis_msglog._lua.load import load_script

    keys = ConversationKeys.build("msglog", "conv")
    record = keys.idempotency_record("k") if keyed_by == "record" else None
    producer = "prod" if keyed_by == "producer" else ""
    call = AppendCall(
        keys, (b"m1", b"m2"), "tok", publish="PUBLISH", record=record, record_ttl_ms=7,
        fingerprint="fp" if record else "", look_up=True, expected_seq=5, producer=producer,
        pseq=4 if producer else 0, floor=3, scope="acme",
    )  # fmt: skip
    name, sent = call.script_and_args()
    assert name == call.script_name == "append_keyed.lua" and not call.plain
    command = ("EVALSHA", load_script(name).sha, *sent)
    named = {"seq": keys.seq, "stream": keys.stream}
    if record:
        named |= {"record": record, "records": keys.records}
    elif producer:
        named["producers"] = keys.producers
    assert AppendCall.sent_keys(command) == named | {"owner": keys.owner}
    assert {name: AppendCall.argument(command, name) for name in KEYED_ARGV_NAMES} == {
        "publish": "PUBLISH", "channel": keys.channel, "record_ttl_ms": 7 if keyed_by !=
        "neither" else "", "look_up": "1", "call": "tok", "producer": producer,
        "pseq": 4 if producer else "", "floor": 3, "scope": "acme",
        "fingerprint": "fp" if record else "", "expected_seq": 5,
    }  # fmt: skip
    assert AppendCall.argument(command, "op") == "" and command[-2:] == (b"m1", b"m2")
    assert dataclasses.replace(call, ttl_ms=9).script_name == "append.lua"
    assert dataclasses.replace(call, expected_seq=None, record=None).script_name == (
        "append_plain.lua"
    )


def test_the_view_scripts_bindings_match_its_names() -> None:
    from redis_msglog._lua.load import VIEW_ARGV_NAMES, VIEW_KEY_NAMES

    expected = (_positions(VIEW_ARGV_NAMES), _positions(VIEW_KEY_NAMES, keys=True))
    assert _bindings("view.lua") == expected
    assert _documented("view.lua") == expected


def _tailed_scripts() -> list[tuple[str, tuple[str, ...], tuple[str, ...], str]]:
    """Scripts with named arguments then a tail: (script, KEYS, ARGV, the base of the
    tail as the binding block writes it)."""
    from redis_msglog._core.lifecycle.values import VALUES_ARGV_NAMES, VALUES_KEY_NAMES
    from redis_msglog._lua.load import ERASE_ARGV_NAMES, ERASE_KEY_NAMES

    return [
        ("erase.lua", ERASE_KEY_NAMES, ERASE_ARGV_NAMES, f"NAMED_KEYS = {len(ERASE_KEY_NAMES)}"),
        ("values.lua", VALUES_KEY_NAMES, VALUES_ARGV_NAMES, f"NAMED = {len(VALUES_ARGV_NAMES)}"),
    ]


@pytest.mark.parametrize("script, keys, argv, base", _tailed_scripts())
def test_the_tailed_scripts_bindings_match_their_names(
    script: str, keys: tuple[str, ...], argv: tuple[str, ...], base: str
) -> None:
    expected = (_positions(argv), _positions(keys, keys=True))
    assert _bindings(script) == expected
    assert _documented(script) == expected
    block = _BINDING.search((ROOT / "lua" / script).read_text(encoding="utf-8"))
    assert block and f"local {base} " in block[1]  # the tail's base


def test_no_script_reads_a_numbered_argument_outside_its_binding_block() -> None:
    """Past the header (comments) and the binding block, KEYS and ARGV are read by name
    (the variable-length tail through a named base index); include files never."""
    for path in sorted((ROOT / "lua").glob("*.lua")):
        text = path.read_text(encoding="utf-8")
        block = _BINDING.search(text)
        if block is None:
            assert not _NUMBERED.search(text), path.name
            continue
        head, rest = text[: block.start()], text[block.end() :]
        assert all(line.startswith(("--", "#!")) for line in head.splitlines() if line), path.name
        assert not _NUMBERED.search(rest), path.name
        assert len(_BINDING.findall(text)) == 1, path.name


def test_an_append_call_sends_each_field_at_its_named_position() -> None:
    """``keys_and_args`` builds its tuple by hand (it is on every append's path): each
    field lands where ``ARGV_NAMES`` and ``KEY_NAMES`` say, read back by name."""
    from redis_msglog._core.stored.keys import ConversationKeys
    from redis_msglog._lua.contract import ARGV_NAMES, AppendCall

    keys = ConversationKeys.build("msglog", "conv")
    call = AppendCall(
        keys, (b"m1", b"m2"), "tok", blobs=(("d" * 64, b"bytes"),), publish="PUBLISH",
        record="rec", record_ttl_ms=111, fingerprint="fp", look_up=False, ttl_ms=222,
        expected_seq=333, op="attrs", op_arg="arg", entry=b"{}", attrs=(("a", "1"),),
        attrs_json=b'{"a":"1"}', producer="prod", pseq=444, floor=555, blob_refs="0.1:ab",
        max_age_us=666, rewrite="8 100", usage="1 2 0 0 0 ",
    )  # fmt: skip
    command = ("EVALSHA", "sha", *call.keys_and_args())
    assert {name: AppendCall.argument(command, name) for name in ARGV_NAMES} == {
        "publish": "PUBLISH", "channel": keys.channel, "record_ttl_ms": 111, "rest": "1",
        "fingerprint": "fp", "look_up": "0", "ttl_ms": 222, "call": "tok", "blob_count": 1,
        "expected_seq": 333, "op": "attrs", "op_arg": "arg", "entry": b"{}",
        "producer": "prod", "pseq": 444, "floor": 555, "attr_count": 1,
        "attrs_json": b'{"a":"1"}', "blob_refs": "0.1:ab", "max_age_us": 666, "scope": "",
        "rewrite": "8 100", "usage": "1 2 0 0 0 ",
    }  # fmt: skip
    assert AppendCall.sent_keys(command) == {
        "seq": keys.seq, "stream": keys.stream, "blobs": keys.blobs,
        "producers": keys.producers, "view": keys.view, "hidden": keys.hidden, "record": "rec",
        "records": keys.records, "usage": keys.usage,
    }  # fmt: skip
    tail = command[3 + 9 + len(ARGV_NAMES) :]
    assert tail == ("d" * 64, b"bytes", "+a", "1", b"m1", b"m2")
    plain = AppendCall(keys, (b"m",), "")
    assert plain.script_name == "append_plain.lua"
    assert AppendCall.sent_keys(plain.keys_and_args()) == {"seq": keys.seq, "stream": keys.stream}
    # No producer: nothing to look up, whatever the try.
    assert AppendCall.argument(plain.keys_and_args(), "look_up") == "0"
    # A plain append sends PLAIN_ARGV_NAMES, then its messages; no placeholder key.
    sent = plain.keys_and_args()
    assert sent == (2, keys.seq, keys.stream, "", keys.channel, "", "0", "", "", "", "", "", b"m")
    assert AppendCall.argument(sent, "blob_count") == 0 and AppendCall.argument(sent, "op") == ""
