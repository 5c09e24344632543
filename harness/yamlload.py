"""Load a YAML file into pydantic models, turning every mistake into one line: file:line: field: why.

PyYAML's composed node tree keeps the line of every key and value; a pydantic error location
(('faults', 0, 'schedule', 'random', 'count')) is walked down that tree to find the line to blame.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from rundir.errors import UserError

M = TypeVar("M", bound=BaseModel)
Loc = tuple[str | int, ...]


class SpecError(UserError):
    """A mistake at a place in a YAML file."""

    def __init__(self, path: Path | str, line: int | None, field: str, message: str):
        self.path, self.line, self.field, self.message = str(path), line, field, message
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


MAX_FLOW_DEPTH = 100   # a spec nests a few brackets; PyYAML's scanner takes seconds on 100,000


def _too_deep(text: str) -> int | None:
    """The line where [ and { (outside quotes and comments) nest deeper than MAX_FLOW_DEPTH, or None:
    checked before PyYAML, whose scanner looks ahead through every bracket before failing."""
    depth, quote, line, comment = 0, "", 1, False
    for ch in text:
        if ch == "\n":
            line, comment = line + 1, False
        elif comment:
            continue
        elif quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            comment = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_FLOW_DEPTH:
                return line
        elif ch in "]}":
            depth = max(depth - 1, 0)
    return None


class YamlDoc:
    """A parsed YAML document: its data plus a line finder."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        try:
            text = self.path.read_text()
        except OSError as e:
            raise UserError(f"{self.path}: cannot read: {e.strerror}") from None
        deep = _too_deep(text)
        if deep is not None:
            raise SpecError(self.path, deep, "", f"invalid YAML: brackets nested deeper than {MAX_FLOW_DEPTH}")
        try:
            self.node = yaml.compose(text, Loader=yaml.SafeLoader)
            self.data: Any = yaml.safe_load(text)
        except RecursionError:
            raise SpecError(self.path, None, "", "invalid YAML: nested deeper than a spec can be") from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise SpecError(self.path, mark.line + 1 if mark else None, "", f"invalid YAML: {problem}") from None
        if not isinstance(self.data, dict):
            raise SpecError(self.path, 1, "", "expected a mapping of fields at the top level")

    def at(self, loc: Loc) -> Any:
        """The data at `loc` (None where the path does not exist)."""
        data = self.data
        for part in loc:
            if isinstance(data, dict) and part in data:
                data = data[part]
            elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
                data = data[part]
            else:
                return None
        return data

    def line(self, loc: Loc) -> int | None:
        """Line (1-based) of the deepest node on the path `loc` that exists."""
        node, line = self.node, self.node.start_mark.line + 1
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    if key.value == str(part):
                        # The key's line: a value may be a block starting on the next line.
                        node, line = value, key.start_mark.line + 1
                        break
                else:
                    return line
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                return line
        return line

    def error(self, loc: Loc, message: str) -> SpecError:
        return SpecError(self.path, self.line(loc), format_loc(loc), message)

    def parse(self, model: type[M]) -> M:
        try:
            return model.model_validate(self.data)
        except ValidationError as e:
            err = e.errors()[0]
            # Union members and validators add non-field parts to the location; keep real fields.
            loc = tuple(p for p in err["loc"] if isinstance(p, int) or not str(p).startswith(("function-", "tagged-union")))
            raise self.error(loc, _explain(err)) from None


def format_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _explain(err: dict) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field is missing"
    if kind == "literal_error":
        return msg.replace("Input should be", "expected")
    if msg.startswith("Value error, "):
        return msg[len("Value error, "):]
    return msg[0].lower() + msg[1:]


class MergedDoc(YamlDoc):
    """Mappings from one or more YAML files read as one: the first part that has a top-level field
    gives it. An error about a field names the file and line where that field was written; a
    missing field names the first part. Used for an experiment in a suite: the suite's entry over
    the spec file it names over the suite's defaults (harness.suite)."""

    def __init__(self, parts: list[tuple[YamlDoc, Loc]], drop: tuple[str, ...] = ()):
        self.parts = [(doc, tuple(loc)) for doc, loc in parts]
        self.path = self.parts[0][0].path
        data: dict = {}
        for doc, loc in reversed(self.parts):
            data.update(doc.at(loc) or {})
        self.data = {k: v for k, v in data.items() if k not in drop}

    def line(self, loc: Loc) -> int | None:
        doc, prefix = self._owner(loc)
        return doc.line(prefix + tuple(loc))

    def _owner(self, loc: Loc) -> tuple[YamlDoc, Loc]:
        for doc, prefix in self.parts:
            if loc and loc[0] in (doc.at(prefix) or {}):
                return doc, prefix
        return self.parts[0]

    def error(self, loc: Loc, message: str) -> SpecError:
        doc, prefix = self._owner(loc)
        return doc.error(prefix + tuple(loc), message)
