"""Generate the manual's references from the code: every key of the run configuration (from the
config dataclasses and their docstrings) and every command and flag of the CLI (from the argparse
parsers). Never edit ``docs/reference/configuration.md`` or ``docs/reference/cli.md`` by hand:

    python tools/docs_reference.py           # rewrite them
    python tools/docs_reference.py --check   # exit 1 naming the stale file (tests run this)
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's package, not an installed copy

CONFIG_PAGE = ROOT / "docs" / "reference" / "configuration.md"
CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"
ERRORS_PAGE = ROOT / "docs" / "reference" / "errors.md"
# the exceptions a user's input can raise (a bug's assertion is not listed)
_USER_ERRORS = {
    "ValueError", "ConfigError", "UnknownTaskError", "UnknownAlgorithmError", "UnknownBenchmarkError",
    "CheckpointError", "EvalInputError", "CacheError", "RecordError", "SpecFileError", "JudgeFailed",
    "KeyError", "TypeError", "FileNotFoundError", "PluginFileError", "ToolError", "MediaFailure",
    "UserError", "PromptError", "GroundTruthError", "OutputError",
}  # fmt: skip
_VALIDATORS = {"require", "at_least", "non_negative", "positive", "one_of", "in_range", "whole_number"}
_RULES = {
    "at_least": "must be >= …", "non_negative": "must be >= 0", "positive": "must be > 0",
    "one_of": "must be one of …", "in_range": "must be in […, …]", "whole_number": "must be a whole number >= …",
}  # fmt: skip
# a field's entry in a class docstring: "name: text", "name (`type`, ...): text", "a / b: text"
_ENTRY = re.compile(r"^\s*((?:[\w`]+)(?:\s*(?:/|,)\s*[\w`]+)*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def config_fields(cls, prefix: str = ""):
    """``(dotted key, field, owning class, type)`` of every field of the config tree, depth first."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints.get(f.name)
        yield prefix + f.name, f, cls, kind
        if dataclasses.is_dataclass(kind):
            yield from config_fields(kind, prefix + f.name + ".")


def field_doc(cls, name: str) -> str:
    """The description of field ``name`` in ``cls``'s docstring (or a base class's); '' if none.

    Entries start a line (``name: ...`` or HF's ``name (`type`, ...):``) and run on over the more
    indented lines below; a line may also carry a second entry (``lr: ... weight_decay, betas: ...``).
    """
    for klass in cls.__mro__:
        lines = (klass.__doc__ or "").splitlines()
        for i, line in enumerate(lines):
            m = _ENTRY.match(line)
            if not m or name not in [n.strip(" `") for n in re.split(r"[/,]", m.group(1))]:
                continue
            indent = len(line) - len(line.lstrip())
            text = [m.group(2).strip()]
            for more in lines[i + 1 :]:
                if more.strip() and len(more) - len(more.lstrip()) > indent:
                    text.append(more.strip())
                else:
                    break
            return " ".join(t for t in text if t)
        doc = klass.__doc__ or ""
        inline = re.search(rf"(?:^|[\s.]){re.escape(name)}(?:\s*(?:/|,)\s*\w+)*\s*:\s*([^\n]*)", doc)
        if inline:
            return inline.group(1).strip()
    return ""


def _type_name(kind) -> str:
    text = getattr(kind, "__name__", None) if isinstance(kind, type) else None
    return (text or str(kind).replace("typing.", "")).replace(" | ", " or ")  # no pipe in a table


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
    else:
        return "(required)"
    if dataclasses.is_dataclass(value):
        return "(section)"
    return f"`{value!r}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def config_reference() -> str:
    from easyvideor1.config import RunConfig

    out = [
        "# Configuration reference",
        "",
        "Every key of the run configuration, generated from the config dataclasses and their docstrings",
        "by `python tools/docs_reference.py` (a test fails when this page is stale or a key has no",
        "description). Set keys in a YAML file (`config=run.yaml`) or as dotted overrides",
        "(`trainer.max_steps=10`); later ones win. See [Configuration](../how-to/configuration.md).",
        "",
    ]
    section = None
    for key, f, cls, kind in config_fields(RunConfig):
        top = key.split(".")[0]
        if dataclasses.is_dataclass(kind):
            if "." not in key:
                section = top
                out += ["", f"## `{top}`", "", _cell(field_doc(cls, f.name)), ""]
                out += ["| key | type | default | description |", "|---|---|---|---|"]
            else:
                out.append(f"| `{key}` | section | | {_cell(field_doc(cls, f.name))} |")
            continue
        assert section == top
        out.append(
            f"| `{key}` | `{_cell(_type_name(kind))}` | {_cell(_default(f))} | {_cell(field_doc(cls, f.name))} |"
        )
        if key == "algorithm.loss_options":
            out += loss_option_rows(key)
    return "\n".join(out).replace("\n\n\n", "\n\n") + "\n"


def loss_options(prefix: str = "algorithm.loss_options."):
    """``(dotted key, field, options class, type, losses)`` of every option a built-in policy loss
    declares (``algorithms/loss_options.py``), each once, with the losses that take it."""
    from easyvideor1.algorithms._registry import POLICY_LOSSES, policy_loss_options

    seen: dict[str, list] = {}
    for name in POLICY_LOSSES.names():
        options = policy_loss_options(name)
        hints = typing.get_type_hints(options)
        for f in dataclasses.fields(options):
            if f.name not in seen:
                seen[f.name] = [prefix + f.name, f, options, hints.get(f.name), []]
            seen[f.name][4].append(name)
    return [tuple(row) for row in seen.values()]


def loss_option_rows(key: str) -> list[str]:
    rows = []
    for option, f, cls, kind, losses in loss_options(key + "."):
        doc = f"{field_doc(cls, f.name)} (policy_loss: {', '.join(losses)})"
        rows.append(f"| `{option}` | `{_cell(_type_name(kind))}` | {_cell(_default(f))} | {_cell(doc)} |")
    return rows


def documented_keys() -> list[str]:
    """Every key the configuration reference lists (sections left out)."""
    from easyvideor1.config import RunConfig

    keys = [key for key, f, cls, kind in config_fields(RunConfig) if not dataclasses.is_dataclass(kind)]
    return keys + [key for key, *_ in loss_options()]


def missing_docs() -> list[str]:
    """Config keys without a description (a test fails on any)."""
    from easyvideor1.config import RunConfig

    keys = [key for key, f, cls, kind in config_fields(RunConfig) if not field_doc(cls, f.name)]
    return keys + [key for key, f, cls, kind, _ in loss_options() if not field_doc(cls, f.name)]


def cli_reference() -> str:
    from easyvideor1.cli import build_parser

    parser = build_parser()
    out = [
        "# Command-line reference",
        "",
        "Every `easyvideor1` command and flag, generated from the argument parsers by",
        "`python tools/docs_reference.py`. Each command also takes `config=FILE` and dotted",
        "`key=value` overrides of the [configuration](configuration.md).",
        "",
    ]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help or "" for c in sub._choices_actions}
    for name, command in sub.choices.items():
        out += [f"## `easyvideor1 {name}`", "", _cell(helps.get(name, "")), ""]
        rows = []
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flags = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}`"
            default = "" if action.default in (None, argparse.SUPPRESS) else f"`{action.default!r}`"
            if action.help == argparse.SUPPRESS:
                continue
            rows.append(f"| {flags} | {default} | {_cell(action.help or '')} |")
        if rows:
            out += ["| flag | default | what it does |", "|---|---|---|", *rows, ""]
    return "\n".join(out) + "\n"


def _template(node) -> str | None:
    """A message's text with each ``{...}`` value shown as ``…`` (None: not a literal message)."""
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # "a " + f"b"
        left, right = _template(node.left), _template(node.right)
        return None if left is None or right is None else left + right
    return None


def error_messages() -> dict[str, list[str]]:
    """Module -> the messages of the errors it raises on user input, in source order: every
    ``raise <user error>("...")`` with a literal message, and every config check
    (``require(ok, key, rule, value)`` and its kin: "<key> <rule>, got …")."""
    import ast

    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "src" / "easyvideor1").rglob("*.py")):
        module = str(path.relative_to(ROOT / "src")).removesuffix(".py").replace("/", ".")
        tree = ast.parse(path.read_text())
        messages: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                name = getattr(node.exc.func, "id", getattr(node.exc.func, "attr", ""))
                text = _template(node.exc.args[0]) if name in _USER_ERRORS else None
                if text and len(text.strip(" …")) > 8:
                    messages.append((node.lineno, text))
            elif (
                isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_check" and len(node.args) > 1
            ):
                text = _template(node.args[1])  # _check(condition, message)
                if text:
                    messages.append((node.lineno, text))
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", "") in _VALIDATORS
                and len(node.args) > 1
            ):
                if node.func.id == "require":  # require(ok, key, rule, value)
                    key, rule = (
                        _template(node.args[1]),
                        _template(node.args[2]) if len(node.args) > 2 else None,
                    )
                else:  # at_least(key, value, ...) and kin
                    key, rule = _template(node.args[0]), _RULES[node.func.id]
                if key and rule:
                    messages.append((node.lineno, f"{key} {rule}, got …"))
        if messages:
            found[module] = [m for _, m in sorted(set(messages))]
    return found


def errors_reference() -> str:
    out = [
        "# Error messages",
        "",
        "Every error a user's input can raise, with its message as written in the code (`…` stands",
        "for the value filled in at run time), by the module that raises it; generated by",
        "`python tools/docs_reference.py`. Most name the configuration key to change; the",
        "[troubleshooting](../troubleshooting.md) page explains the common ones.",
    ]
    for module, messages in error_messages().items():
        out += ["", f"## `{module}`", ""]
        out += [f"- `{' '.join(m.split()).replace('`', '')}`" for m in messages]
    return "\n".join(out) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a generated page is stale")
    a = p.parse_args()
    pages = {CONFIG_PAGE: config_reference(), CLI_PAGE: cli_reference(), ERRORS_PAGE: errors_reference()}
    stale = [path for path, text in pages.items() if not path.exists() or path.read_text() != text]
    if a.check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is stale: run python tools/docs_reference.py", file=sys.stderr)
        return 1 if stale else 0
    for path, text in pages.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
