"""MkDocs hook for the cotcredit site (listed under `hooks:` in mkdocs.yml).

Three jobs, so that the pages stay true to the code and the repository:

- `<!-- cli-options CMD -->` in a page becomes the usage line and a table of every argument and
  option of `cotcredit CMD`, read from the command line itself (the same records `--help`
  prints), so a command page cannot fall behind its flags. An unknown command is a warning
  (an error under `mkdocs build --strict`).
- A link from a page to a file of the repository outside docs/ (a study's folder, a script,
  a benchmark) is checked: a missing file is a warning, hence an error under --strict. On the
  site it points to `repo_url` when mkdocs.yml sets one, else it shows as its text.
- An image of the repository outside docs/ (a study's figure) is copied into the site, so the
  figures are not duplicated under docs/.

Links are written relative to the page's Markdown file, so they also work when the Markdown is
read in a repository browser.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.cotcredit")

CLI_MARKER = re.compile(r"^<!-- cli-options ([\w-]+) -->$", re.M)
# [text](target) and ![alt](target); titles after the target are kept as they are.
LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
REPO_IMAGES = "_repo"  # where the repository's images land inside the site


def _repo_root(config) -> Path:
    return Path(config.config_file_path).resolve().parent


def _outside_text(markdown: str):
    """Yield (is_code, chunk) pieces of `markdown`: fenced code blocks are left alone."""
    chunk: list[str] = []
    in_fence = False
    for line in markdown.splitlines(keepends=True):
        if FENCE.match(line):
            if not in_fence:
                if chunk:
                    yield False, "".join(chunk)
                chunk, in_fence = [line], True
                continue
            chunk.append(line)
            yield True, "".join(chunk)
            chunk, in_fence = [], False
            continue
        chunk.append(line)
    if chunk:
        yield in_fence, "".join(chunk)


def _repo_target(target: str, page_src: Path, docs_dir: Path, root: Path) -> Path | None:
    """The repository file a relative link points to, when it lies outside docs/."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return None
    path = target.split("#", 1)[0]
    if not path:
        return None
    resolved = (page_src.parent / path).resolve()
    if resolved == docs_dir or docs_dir in resolved.parents:
        return None
    if root not in resolved.parents:
        return None
    return resolved


def on_files(files, config):
    """Add the repository images that pages show to the site (under _repo/)."""
    docs_dir = Path(config.docs_dir).resolve()
    root = _repo_root(config)
    added: set[Path] = set()
    for page in files.documentation_pages():
        src = Path(page.abs_src_path)
        text = src.read_text(encoding="utf-8")
        for is_code, chunk in _outside_text(text):
            if is_code:
                continue
            for m in LINK.finditer(chunk):
                if not m["bang"]:
                    continue
                target = _repo_target(m["target"], src, docs_dir, root)
                if target is None or target in added or not target.is_file():
                    continue
                added.add(target)
                uri = f"{REPO_IMAGES}/{target.relative_to(root).as_posix()}"
                files.append(File.generated(config, uri, abs_src_path=str(target)))
    return files


def _cli_group():
    """The click group behind `cotcredit` (typer builds it from the app)."""
    import importlib
    import types

    import typer

    app = importlib.import_module("cotcredit.cli").app
    if isinstance(app, types.ModuleType):  # a package `cli` with a module `app`
        app = app.app
    return typer.main.get_command(app)


def _cell(text: str) -> str:
    """Help text as one Markdown table cell: no HTML, no emphasis, no cell breaks; `code`
    spans kept."""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    for i, part in enumerate(parts):
        if i % 2:  # a code span: the table extension leaves its pipes alone
            continue
        for ch, esc in (("\\", "\\\\"), ("|", "\\|"), ("<", "&lt;"), ("*", "\\*"), ("_", "\\_")):
            part = part.replace(ch, esc)
        parts[i] = part
    return "".join(parts)


def cli_options_markdown(name: str) -> str | None:
    """Usage and a table of the arguments and options of `cotcredit NAME` (None: no such command)."""
    import typer

    group = _cli_group()
    command = group.commands.get(name)
    if command is None:
        return None
    root = typer.Context(group, info_name="cotcredit")
    ctx = typer.Context(command, info_name=name, parent=root)
    usage = command.get_usage(ctx).removeprefix("Usage: ").strip()
    lines = [f"```text\n{usage}\n```", "", "| argument or option | what it does |", "|---|---|"]
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        flags, help_text = record
        flags = flags.replace("`", "'")
        lines.append(f"| `{flags}` | {_cell(help_text)} |")
    if len(lines) == 4:
        lines.append("| (none) | |")
    return "\n".join(lines) + "\n"


def _cli_options(markdown: str, page) -> str:
    def replace(m: re.Match) -> str:
        table = cli_options_markdown(m[1])
        if table is None:
            log.warning(f"{page.file.src_uri}: no command `cotcredit {m[1]}` for <!-- cli-options -->")
            return m[0]
        return table

    return CLI_MARKER.sub(replace, markdown)


def _repo_links(markdown: str, page, config) -> str:
    docs_dir = Path(config.docs_dir).resolve()
    root = _repo_root(config)
    src = Path(page.file.abs_src_path)
    repo_url = (config.repo_url or "").rstrip("/")

    def replace(m: re.Match) -> str:
        target = _repo_target(m["target"], src, docs_dir, root)
        if target is None:
            return m[0]
        rel = target.relative_to(root).as_posix()
        if not target.exists():
            log.warning(f"{page.file.src_uri}: link to '{m['target']}': no file {rel} in the repository")
            return m[0]
        if m["bang"]:
            site_path = docs_dir / REPO_IMAGES / rel
            new = os.path.relpath(site_path, src.parent).replace(os.sep, "/")
            return f"![{m['text']}]({new}{m['title'] or ''})"
        if repo_url:
            kind = "tree" if target.is_dir() else "blob"
            anchor = "#" + m["target"].split("#", 1)[1] if "#" in m["target"] else ""
            return f"[{m['text']}]({repo_url}/{kind}/main/{rel}{anchor})"
        return m["text"]

    return "".join(chunk if is_code else LINK.sub(replace, chunk)
                   for is_code, chunk in _outside_text(markdown))


def on_page_markdown(markdown: str, page, config, files) -> str:
    return _repo_links(_cli_options(markdown, page), page, config)
