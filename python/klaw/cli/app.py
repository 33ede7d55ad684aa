"""`klaw` entry point.

Every command imports its implementation inside the function body so that
`klaw --help` loads only typer (the bar is 150 ms wall time).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(
    name="klaw",
    help="Klaw: a light, reliable personal AI agent.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
memory_app = typer.Typer(help="Core and archival memory.", no_args_is_help=True)
model_app = typer.Typer(help="The embedding model.", no_args_is_help=True)
app.add_typer(memory_app, name="memory")
app.add_typer(model_app, name="model")


def _exit(code: int) -> None:
    if code:
        raise typer.Exit(code)


@app.command()
def init(
    workspace: Annotated[
        Optional[Path],  # noqa: UP045 - typer needs Optional on 3.11
        typer.Option(help="Workspace directory (default $KLAW_WORKSPACE or ~/klaw-workspace)."),
    ] = None,
) -> None:
    """Create the workspace skeleton and the config files (never overwrites)."""
    from klaw.cli.setup_cmds import init as run

    _exit(run(workspace))


@app.command()
def doctor() -> None:
    """Check config, paths, model files, ONNX Runtime, the store and disk; print fixes."""
    from klaw.cli.setup_cmds import doctor as run

    _exit(run())


@app.command()
def reindex(
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Rebuild klaw.db from the files (conversations, summaries, memory, workspace)."""
    from klaw.cli.memory_cmds import reindex as run

    _exit(run(progress=progress))


@app.command()
def logs(
    chat: Annotated[Optional[str], typer.Option(help="Chat id, e.g. telegram_123.")] = None,  # noqa: UP045
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", help="How many last lines.")] = 50,
) -> None:
    """Print conversation logs (JSONL) in a readable form."""
    from klaw.cli.logs_cmds import logs as run

    _exit(run(chat=chat, follow=follow, lines=lines))


@memory_app.command("show")
def memory_show() -> None:
    """Print core memory (core_memory.json)."""
    from klaw.cli.logs_cmds import memory_show as run

    _exit(run())


@memory_app.command("edit")
def memory_edit() -> None:
    """Open core memory in $EDITOR and validate it on save."""
    from klaw.cli.logs_cmds import memory_edit as run

    _exit(run())


@memory_app.command("save")
def memory_save(
    text: str,
    source: Annotated[str, typer.Option(help="Source label of the fact.")] = "manual",
) -> None:
    """Save a fact to archival memory."""
    from klaw.cli.memory_cmds import save as run

    _exit(run(text, source=source))


@memory_app.command("search")
def memory_search(
    query: Annotated[Optional[str], typer.Argument()] = None,  # noqa: UP045
    json_out: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
    top_k: Annotated[int, typer.Option("--top-k", help="How many hits.")] = 10,
    interactive: Annotated[bool, typer.Option(help="Ask queries in a loop.")] = False,
) -> None:
    """Hybrid (vector + keyword) search over archival memory."""
    from klaw.cli.memory_cmds import search as run

    _exit(run(query, json_out=json_out, top_k=top_k, interactive=interactive))


@memory_app.command("import")
def memory_import(path: Path) -> None:
    """Index a Markdown file or a directory of them into archival memory."""
    from klaw.cli.memory_cmds import import_path as run

    _exit(run(path))


@memory_app.command("index")
def memory_index() -> None:
    """Index the workspace memory (MEMORY.md, memory/*.md); unchanged files are skipped."""
    from klaw.cli.memory_cmds import index_workspace as run

    _exit(run())


@model_app.command("install")
def model_install(
    from_hub: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--from-hub", help="Download model.onnx and tokenizer.json from this URL."),
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an installed model.")] = False,
) -> None:
    """Copy the embedding model into $XDG_CACHE_HOME/klaw/models (or download it)."""
    from klaw.cli.setup_cmds import model_install as run

    _exit(run(from_hub=from_hub, force=force))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
