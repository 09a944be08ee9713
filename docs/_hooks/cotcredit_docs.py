"""MkDocs hook for the cotcredit site (listed under `hooks:` in mkdocs.yml).

Four jobs, so that the pages stay true to the code and the repository:

- Every method command of the method registry (`cotcredit.methods.method_commands`: the
  package's methods and those registered by entry point) gets its page `commands/NAME.md`,
  made here from its `MethodCommand` (the prose its method file gives as `page`, its Python
  function, its options), and its place in the nav after `segment`; the command index lists it
  where `<!-- method-commands -->` stands, the methods' table has a row for each method it does
  not describe yet where `<!-- more-methods -->` stands, and the API reference documents every
  module of the methods package, and the module of each method registered from outside it,
  where `<!-- method-modules -->` stands. A method added in one file needs no page written by hand.
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
COMMANDS_MARKER = "<!-- method-commands -->"
METHODS_MARKER = "<!-- more-methods -->"
MODULES_MARKER = "<!-- method-modules -->"
COMMANDS_NAV, AFTER = "Commands", "segment"  # method commands go after this one in the nav
# [text](target) and ![alt](target); titles after the target are kept as they are.
LINK = re.compile(
    r"(?P<bang>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")
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


# ---- the method commands' pages, from the registry -----------------------------------------
def method_commands() -> dict:
    """Command name -> (MethodCommand, specs) of the method registry."""
    from cotcredit.methods import method_commands as registered

    return registered()


def method_command_page(name: str) -> str:
    """The Markdown of the page of method command `name`: title, its method file's prose (else
    its help's first paragraph), its Python function, its options."""
    from cotcredit.pipeline.api import python_name

    command, specs = method_commands()[name]
    prose = command.page.strip() or command.help.split("\n\n", 1)[0].replace("\n", " ")
    function = f"cotcredit.{python_name(name)}"
    if len(specs) == 1:
        options = specs[0].options_type
        call = (f"`{function}(traces, output, options={options.__name__}(...), label=None)` "
                f"(`{options.__module__}.{options.__name__}`)")
    else:
        call = (f"`{function}(traces, output, methods=[...])` (methods among "
                f"{', '.join(f'`{s.name}`' for s in specs)}, or a mapping name -> options)")
    return (f"# `cotcredit {name}`\n\n{prose}\n\n## From Python\n\n{call}, with the other "
            "keyword arguments of `cotcredit.score`; it returns the run's summary "
            "([From Python](../guides/python-api.md)).\n\n## Options\n\n"
            f"<!-- cli-options {name} -->\n")


def method_commands_rows() -> str:
    """Rows of the command index's table for the method commands."""
    rows = []
    for name, (command, _) in method_commands().items():
        what = command.help.split("\n", 1)[0].split(". ")[0].rstrip(".")
        rows.append(f"| [`{name}`]({name}.md) | {_cell(what)} | `{command.default_output}` |")
    return "\n".join(rows)


def more_method_rows(markdown: str) -> str:
    """Rows of the methods' table for each registered method none of whose row labels the
    page names yet (a method added later): its name, labels and description."""
    from cotcredit.methods import registry

    rows = []
    for name, spec in registry().items():
        if any(f"`{label}`" in markdown for label in spec.all_labels):
            continue
        labels = ", ".join(f"`{label}`" for label in spec.all_labels)
        command = (f" ([`cotcredit {spec.command.name}`](../commands/{spec.command.name}.md))"
                   if spec.command else "")
        rows.append(f"| {name}{command} | {labels} | {_cell(spec.description)} | | |")
    return "\n".join(rows)


def method_modules() -> list[str]:
    """Every module of the methods package (its packages' modules too), then the module of each
    method registered from outside it."""
    import importlib
    import pkgutil

    from cotcredit.methods import registry

    package = importlib.import_module("cotcredit.methods")
    names = sorted(m.name for m in pkgutil.walk_packages(package.__path__, "cotcredit.methods."))
    outside = [s.run.__module__ for s in registry().values()
               if not s.run.__module__.startswith("cotcredit.")]
    return names + list(dict.fromkeys(outside))


def on_config(config):
    """Put each method command's page in the nav, after `segment` (registry order)."""
    for item in config.nav or []:
        if isinstance(item, dict) and COMMANDS_NAV in item:
            section = item[COMMANDS_NAV]
            at = next(i for i, e in enumerate(section) if isinstance(e, dict) and AFTER in e)
            pages = [{name: f"commands/{name}.md"} for name in method_commands()]
            section[at + 1 : at + 1] = [p for p in pages if p not in section]
    return config


def on_files(files, config):
    """Add each method command's page, and the repository images that pages show (under
    _repo/), to the site."""
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
    if (docs_dir / "commands").is_dir():  # a site with command pages (not a test's stub)
        for name in method_commands():
            files.append(File.generated(config, f"commands/{name}.md",
                                        content=method_command_page(name)))
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
    """Usage and a table of the arguments and options of `cotcredit NAME` (None: no such
    command)."""
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
            log.warning(f"{page.file.src_uri}: no command `cotcredit {m[1]}` for "
                        "<!-- cli-options -->")
            return m[0]
        return table

    return CLI_MARKER.sub(replace, markdown)


def _repo_links(markdown: str, page, config) -> str:
    docs_dir = Path(config.docs_dir).resolve()
    root = _repo_root(config)
    # A generated page (a method command's) stands where its file would.
    src = Path(page.file.abs_src_path or docs_dir / page.file.src_uri)
    repo_url = (config.repo_url or "").rstrip("/")

    def replace(m: re.Match) -> str:
        target = _repo_target(m["target"], src, docs_dir, root)
        if target is None:
            return m[0]
        rel = target.relative_to(root).as_posix()
        if not target.exists():
            log.warning(f"{page.file.src_uri}: link to '{m['target']}': no file {rel} in the "
                        "repository")
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


def _registry_markers(markdown: str) -> str:
    if METHODS_MARKER in markdown:
        markdown = markdown.replace(METHODS_MARKER, more_method_rows(markdown))
    if COMMANDS_MARKER in markdown:
        markdown = markdown.replace(COMMANDS_MARKER, method_commands_rows())
    if MODULES_MARKER in markdown:
        markdown = markdown.replace(MODULES_MARKER,
                                    "\n\n".join(f"::: {m}" for m in method_modules()))
    return markdown


def on_page_markdown(markdown: str, page, config, files) -> str:
    return _repo_links(_cli_options(_registry_markers(markdown), page), page, config)
