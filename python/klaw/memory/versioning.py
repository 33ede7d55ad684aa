"""Versioned memory (issue 25 item 7; seed autopoiesis §3): each change Klaw makes to
the workspace's memory files is one git commit saying what and why.

- **When.** The workspace is a git repository (a `.git` at its top), or
  `memory.git: true`, which initialises one with a `.gitignore` keeping state, caches
  and secrets out and commits the memory files as they are (the baseline).
  `memory.git: false` turns it off; otherwise, and when git is not installed, every
  call here is a no-op (logged once).
- **Only Klaw's change.** A writer wraps its write in `change(paths, what, why)`, which
  reads each file before and after. The commit holds HEAD's version of each path with
  Klaw's change applied (the new content when HEAD had what Klaw found; the appended
  text added to HEAD's when Klaw appended; else a line-based three-way merge).
  An owner's uncommitted edit in the same file stays uncommitted, in the file as it is:
  the working tree is never touched. A change that overlaps the owner's uncommitted
  edit cannot be separated from it and is left out of history (logged).
- **Off the event loop.** `change` reads the files and queues the commit; one worker
  thread per workspace runs git. A reply never waits for a commit.
- **Why the git CLI.** Zero resident memory in the engine, no import cost, no
  dependency; numbers in docs/decisions.md. Plumbing only (hash-object, a private index,
  write-tree, commit-tree, update-ref with the old value); no program the repository's
  config names runs (hooks, fsmonitor, filter drivers, gpg are turned off). The owner's
  index is updated only for the committed paths and only when it held HEAD's version.
"""

from __future__ import annotations

import atexit
import contextlib
import difflib
import logging
import os
import queue
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from klaw.errors import KlawError

if TYPE_CHECKING:
    from klaw.config import EngineConfig

__all__ = [
    "AUTHOR_EMAIL",
    "GITIGNORE",
    "Change",
    "GitError",
    "LogEntry",
    "MemoryGit",
    "blob_id",
    "is_memory_path",
    "versioner",
]

log = logging.getLogger("klaw.memory")

AUTHOR_NAME: Final = "Klaw"
AUTHOR_EMAIL: Final = "klaw@localhost"
ZERO: Final = "0" * 40
#: The workspace's memory files: what the file tools' writes are committed for, and
#: the baseline when `memory.git: true` creates the repository.
MEMORY_PATHS: Final = ("MEMORY.md", "USER.md", "memory", "bank")
GITIGNORE: Final = """\
# Written by Klaw (memory.git): state, caches and secrets stay out of history.
.env
.env.*
*.key
*.pem
secrets/
.openclaw/
.sandbox-staging/
outputs/
inbox/
*.db
*.db-*
*.sqlite*
*.tmp
.*.tmp
__pycache__/
.cache/
"""
_TIMEOUT: Final = 60.0


class GitError(KlawError):
    """A git command failed; the message names it and what git said."""


@dataclass(frozen=True)
class Change:
    """One path Klaw wrote: its bytes before (None: absent) and after (None: removed)."""

    path: str  # relative to the workspace, with /
    before: bytes | None
    after: bytes | None


@dataclass(frozen=True)
class LogEntry:
    commit: str
    date: str  # ISO 8601
    subject: str
    body: str
    paths: tuple[str, ...]


@dataclass
class _Job:
    changes: list[Change]
    message: str


class MemoryGit:
    """Commits of Klaw's changes to one workspace; see the module docstring."""

    def __init__(self, workspace: Path, *, enabled: bool | None = None, git: str = "git") -> None:
        self.workspace = workspace
        self.setting = enabled  # memory.git: None = when the workspace is a repository
        self._git = shutil.which(git)
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._markers: list[threading.Event] = []  # flush() waiters, in queue order
        self._atexit = False
        self._index = workspace / ".git" / f"klaw-index-{os.getpid()}"

    # ------------------------------------------------------------------ state

    @property
    def is_repo(self) -> bool:
        return (self.workspace / ".git").exists()

    @property
    def active(self) -> bool:
        """Whether changes are committed (initialising the repository if configured)."""
        if self.setting is False:
            return False
        if self._git is None:
            self._warn_once("git", "memory versioning is off: git is not installed")
            return False
        if self.is_repo:
            return True
        if self.setting:
            try:
                self.init()
            except (GitError, OSError) as exc:
                self._warn_once("init", f"memory versioning is off: {exc}")
                return False
            return True
        return False

    def prepare(self) -> bool:
        """`active`, at a moment that may wait for git (engine start): `memory.git: true`
        initialises the repository here rather than in the first writer."""
        return self.active

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)

    # ----------------------------------------------------------- the writers' port

    @contextlib.contextmanager
    def change(self, paths: Sequence[Path | str], what: str, why: str = "") -> Iterator[None]:
        """Wrap a write of `paths` (absolute or workspace-relative): one commit of what
        the block changed in them, queued when it ends without an exception. A no-op
        when versioning is off."""
        if not self.active:
            yield
            return
        rels = [self._rel(p) for p in paths]
        before = {r: _read(self.workspace / r) for r in rels if r is not None}
        yield
        changes = [Change(r, b, _read(self.workspace / r)) for r, b in before.items()]
        self.record(changes, what, why)

    def record(self, changes: Sequence[Change], what: str, why: str = "") -> None:
        """Queue one commit of `changes` (unchanged ones are dropped; none left: no
        commit). Never blocks on git."""
        real = [c for c in changes if c.before != c.after]
        if not real or not self.active:
            return
        message = _message(what, why)
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(
                    target=self._run, name="klaw-memory-git", daemon=True
                )
                self._worker.start()
                if not self._atexit:
                    self._atexit = True
                    atexit.register(self.flush, 10.0)
            self._queue.put(_Job(real, message))

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every commit queued so far is done; False on timeout."""
        done = threading.Event()
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                return True
            self._markers.append(done)
            self._queue.put(None)  # the marker: set once everything before it is done
        return done.wait(timeout)

    def _rel(self, path: Path | str) -> str | None:
        p = Path(path)
        if not p.is_absolute():
            p = self.workspace / p
        try:
            rel = p.relative_to(self.workspace)
        except ValueError:
            log.warning("not versioned: %s is outside the workspace", p)
            return None
        if not rel.parts or rel.parts[0] == ".git":
            return None
        return rel.as_posix()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                with self._lock:
                    marker = self._markers.pop(0)
                marker.set()
                continue
            try:
                self.commit_now(job.changes, job.message)
            except (GitError, OSError) as exc:
                log.warning("memory commit failed (%s): %s", job.message.splitlines()[0], exc)

    # ------------------------------------------------------------------- git

    def _env(self, index: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            GIT_AUTHOR_NAME=AUTHOR_NAME,
            GIT_AUTHOR_EMAIL=AUTHOR_EMAIL,
            GIT_COMMITTER_NAME=AUTHOR_NAME,
            GIT_COMMITTER_EMAIL=AUTHOR_EMAIL,
            GIT_TERMINAL_PROMPT="0",
            LC_ALL="C",
        )
        if index is not None:
            env["GIT_INDEX_FILE"] = str(index)
        return env

    def git(
        self,
        *args: str,
        input: bytes | None = None,
        index: Path | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run git in the workspace; hooks and fsmonitor off (no program of the
        repository's runs), no pager."""
        if self._git is None:
            raise GitError("git is not installed")
        cmd = [
            self._git,
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.quotePath=false",
            "--no-pager",
            "-C",
            str(self.workspace),
            *args,
        ]
        try:
            done = subprocess.run(
                cmd, input=input, capture_output=True, env=self._env(index), timeout=_TIMEOUT
            )
        except subprocess.TimeoutExpired as exc:
            raise GitError(f"git {args[0]} took over {_TIMEOUT:.0f} s") from exc
        if check and done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
            raise GitError(f"git {args[0]}: {said}")
        return done

    def _no_filters(self) -> list[str]:
        """`-c` options emptying every filter driver git's config names: writing the
        owner's index re-reads racily clean files through their clean filter, a program
        named in the repository's config. Reading the config runs nothing."""
        done = self.git("config", "-z", "--get-regexp", r"^filter\.", check=False)
        names = set()
        for rec in done.stdout.decode("utf-8", "surrogateescape").split("\0"):
            key = rec.partition("\n")[0]
            if key.startswith("filter.") and key.count(".") >= 2:
                names.add(key[len("filter.") :].rsplit(".", 1)[0])
        out: list[str] = []
        for name in sorted(names):
            for key, value in (("clean", ""), ("smudge", ""), ("process", ""), ("required", "0")):
                out += ["-c", f"filter.{name}.{key}={value}"]
        return out

    def _out(self, *args: str, input: bytes | None = None, index: Path | None = None) -> str:
        return self.git(*args, input=input, index=index).stdout.decode("utf-8", "replace").strip()

    def head(self) -> str | None:
        done = self.git("rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
        return done.stdout.decode().strip() or None if done.returncode == 0 else None

    def blob_at(self, commit: str | None, path: str) -> bytes | None:
        """The bytes of `path` in `commit`; None when absent."""
        if commit is None:
            return None
        done = self.git("cat-file", "blob", f"{commit}:{path}", check=False)
        return done.stdout if done.returncode == 0 else None

    def head_ids(self, folder: str) -> dict[str, str]:
        """path -> blob id of the files under `folder` in HEAD (none without a HEAD)."""
        head = self.head()
        if head is None:
            return {}
        out: dict[str, str] = {}
        for rec in self._lines("ls-tree", "-r", "-z", head, "--", folder):
            meta, _, path = rec.partition("\t")
            parts = meta.split()
            if len(parts) == 3 and parts[1] == "blob":
                out[path] = parts[2]
        return out

    def init(self) -> None:
        """`git init`, a `.gitignore` (an existing one is left as it is) and a baseline
        commit of the memory files as they are."""
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q")
        ignore = self.workspace / ".gitignore"
        wrote_ignore = False
        if not ignore.exists():
            ignore.write_text(GITIGNORE, encoding="utf-8")
            wrote_ignore = True
        paths = [p for p in MEMORY_PATHS if (self.workspace / p).exists()]
        if wrote_ignore:
            paths.append(".gitignore")
        if paths:
            self.git(*self._no_filters(), "add", "--", *paths)
        self.git(
            *self._no_filters(),
            "commit",
            "-q",
            "--allow-empty",
            "--no-verify",
            "--no-gpg-sign",
            "-m",
            _message(
                "start versioning workspace memory",
                "memory.git is true: Klaw commits each change it makes to MEMORY.md, "
                "USER.md, memory/ and bank/ from now on.",
            ),
        )
        log.info("memory versioning: initialised a git repository in %s", self.workspace)

    def commit_now(self, changes: Sequence[Change], message: str) -> str | None:
        """One commit of `changes` on HEAD, synchronously (the worker's step; tests and
        `undo` call it directly). Returns the commit, or None when nothing was left."""
        for _attempt in range(3):
            head = self.head()
            entries: list[tuple[str, bytes | None]] = []
            bases: dict[str, bytes | None] = {}
            for c in changes:
                base = bases[c.path] = self.blob_at(head, c.path)
                merged = _apply(base, c)
                if merged is _CONFLICT:
                    log.warning(
                        "memory commit: %s left out of history: Klaw's change overlaps an "
                        "uncommitted edit of the owner's (%s)",
                        c.path,
                        message.splitlines()[0],
                    )
                    continue
                assert not isinstance(merged, _Conflict)
                if merged != base:
                    entries.append((c.path, merged))
            if not entries:
                return None
            new, ids = self._commit_tree(head, entries, message)
            done = self.git("update-ref", "HEAD", new, head or ZERO, check=False)
            if done.returncode == 0:
                self._sync_index(bases, ids)
                return new
            # HEAD moved meanwhile (the owner committed): start again from the new one.
        raise GitError("HEAD kept moving during a memory commit")

    def _commit_tree(
        self, head: str | None, entries: list[tuple[str, bytes | None]], msg: str
    ) -> tuple[str, dict[str, str | None]]:
        """(a commit of HEAD with `entries` written, path -> its new blob or None)."""
        lines = []
        ids: dict[str, str | None] = {}
        for path, data in entries:
            if data is None:
                ids[path] = None
                lines.append(f"0 {ZERO}\t{path}\0")
            else:
                blob = ids[path] = self._out("hash-object", "-w", "--stdin", input=data)
                lines.append(f"100644 {blob}\t{path}\0")
        try:
            if head is None:
                self.git("read-tree", "--empty", index=self._index)
            else:
                self.git("read-tree", head, index=self._index)
            info = "".join(lines).encode("utf-8", "surrogateescape")
            self.git("update-index", "-z", "--index-info", input=info, index=self._index)
            tree = self._out("write-tree", index=self._index)
        finally:
            self._index.unlink(missing_ok=True)
        parents = ["-p", head] if head else []
        # --no-gpg-sign: commit.gpgSign in the owner's config would run gpg (and prompt)
        commit = self._out(
            "commit-tree", "--no-gpg-sign", tree, *parents, input=msg.encode("utf-8")
        )
        return commit, ids

    def _sync_index(self, bases: dict[str, bytes | None], ids: dict[str, str | None]) -> None:
        """The owner's index follows the commit for the paths whose entry was HEAD's
        (`bases`: the old HEAD's bytes; else `git status` would show Klaw's change
        reverted as staged); a path the owner has staged something else for is left as
        they staged it."""
        paths = list(ids)
        staged = self._entries("ls-files", "-s", "-z", "--", *paths)
        width = next((len(i) for i in ids.values() if i), 40)  # sha1 or sha256 ids
        lines = []
        for p in paths:
            base = bases.get(p)
            if staged.get(p) != (blob_id(base, width) if base is not None else None):
                continue
            new = ids[p]
            lines.append(f"100644 {new}\t{p}\0" if new else f"0 {ZERO}\t{p}\0")
        if lines:
            info = "".join(lines).encode("utf-8", "surrogateescape")
            quiet = self._no_filters()
            done = self.git(*quiet, "update-index", "-z", "--index-info", input=info, check=False)
            if done.returncode != 0:
                log.warning(
                    "memory commit: the index was busy; `git status` may show %s as staged",
                    ", ".join(paths),
                )

    def _entries(self, *args: str) -> dict[str, str]:
        """path -> blob id from `ls-files -s -z` output."""
        out: dict[str, str] = {}
        for line in self._lines(*args):
            meta, _, path = line.partition("\t")
            parts = meta.split()
            if len(parts) >= 3:
                out[path] = parts[1]
        return out

    # ------------------------------------------------------------ log and undo

    def log_entries(self, n: int = 20) -> list[LogEntry]:
        """Klaw's commits, newest first."""
        if not self.is_repo or self.head() is None:
            return []
        sep, end = "\x1f", "\x1e"
        # raw: str.strip() would take the separators, which Python counts as whitespace
        out = self.git(
            "log",
            f"-n{n}",
            f"--author=<{AUTHOR_EMAIL}>",
            f"--format={end}%H{sep}%P{sep}%aI{sep}%s{sep}%b",
        ).stdout.decode("utf-8", "replace")
        entries = []
        for rec in out.split(end):
            if not rec.strip():
                continue
            commit, parents, date, subject, body = rec.split(sep)
            parent = parents.split()[0] if parents.split() else None
            paths = tuple(self._changed(parent, commit))
            entries.append(LogEntry(commit, date, subject, body.strip(), paths))
        return entries

    def _changed(self, parent: str | None, commit: str) -> list[str]:
        """The paths `commit` changed (against `parent`; all of them for a root)."""
        span = [parent, commit] if parent else ["--root", commit]
        return self._lines("diff-tree", "--no-commit-id", "--name-only", "-r", "-z", *span)

    def _lines(self, *args: str) -> list[str]:
        """The NUL-separated records of a `-z` command's output."""
        out = self.git(*args).stdout.decode("utf-8", "surrogateescape")
        return [rec for rec in out.split("\0") if rec]

    def undo(self, commit: str | None = None) -> tuple[str, list[str]]:
        """Revert one of Klaw's commits (default: the newest) in HEAD and in the files,
        keeping every later change and the owner's uncommitted edits. Returns (the new
        commit, the paths changed). Raises GitError naming the file when the revert
        overlaps a later edit; nothing is changed then."""
        if not self.is_repo:
            raise GitError(f"{self.workspace} is not a git repository (memory.git)")
        target = commit or next((e.commit for e in self.log_entries(1)), None)
        if target is None:
            raise GitError("no change of Klaw's to undo")
        full = self._out("rev-parse", "--verify", f"{target}^{{commit}}")
        author = self._out("log", "-1", "--format=%ae", full)
        if author != AUTHOR_EMAIL:
            raise GitError(f"{full[:12]} is not a change of Klaw's (its author is {author})")
        parents = self._out("log", "-1", "--format=%P", full).split()
        parent = parents[0] if parents else None
        subject = self._out("log", "-1", "--format=%s", full)
        names = self._changed(parent, full)
        head = self.head()
        plan: list[tuple[str, bytes | None, bytes | None]] = []  # path, new HEAD, new file
        bases: dict[str, bytes | None] = {}
        for path in names:
            was, now = self.blob_at(parent, path), self.blob_at(full, path)
            revert = Change(path, now, was)
            at_head = _apply(bases.setdefault(path, self.blob_at(head, path)), revert)
            in_file = _apply(_read(self.workspace / path), revert)
            if isinstance(at_head, _Conflict) or isinstance(in_file, _Conflict):
                raise GitError(
                    f"cannot undo {full[:12]}: {path} was changed again since; edit it by hand"
                )
            plan.append((path, at_head, in_file))
        for path, _, data in plan:
            _write(self.workspace / path, data)
        message = _message(f"undo {subject}", f"Reverts {full}, on the owner's request.")
        entries = [(p, h) for p, h, _ in plan]
        new, ids = self._commit_tree(head, entries, message)
        self.git("update-ref", "HEAD", new, head or ZERO)
        self._sync_index(bases, ids)
        return new, [p for p, _, _ in plan]


def blob_id(data: bytes, width: int = 40) -> str:
    """git's id of a blob holding `data` (sha1, or sha256 in a repository made so)."""
    import hashlib

    algo = hashlib.sha256 if width == 64 else hashlib.sha1
    return algo(b"blob %d\0" % len(data) + data).hexdigest()


class _Conflict:
    pass


_CONFLICT: Final = _Conflict()


def _apply(base: bytes | None, change: Change) -> bytes | _Conflict | None:
    """`base` with `change` applied: its `after` when `base` is what Klaw found; the
    appended bytes added when Klaw appended; else a three-way merge."""
    before, after = change.before, change.after
    if base == before:
        return after
    if after is None:
        return _CONFLICT  # Klaw removed a file that has uncommitted edits
    if before is not None and after.startswith(before):
        added = after[len(before) :]
        head = base or b""
        if head and not head.endswith(b"\n") and not added.startswith(b"\n"):
            added = b"\n" + added
        return head + added
    return _merge(base or b"", before or b"", after)


def _merge(ours: bytes, base: bytes, theirs: bytes) -> bytes | _Conflict:
    """A line-based three-way merge: both sides' changes to `base` applied, a conflict
    only where they touch the same base lines (or insert at the same place). Unlike
    diff3, changes side by side merge: Klaw's appends next to each other are the
    common case (undoing one of them)."""
    lines = base.splitlines(keepends=True)
    hunks: list[tuple[int, int, list[bytes]]] = []
    for side in (ours, theirs):
        other = side.splitlines(keepends=True)
        matcher = difflib.SequenceMatcher(None, lines, other, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag != "equal":
                hunks.append((i1, i2, other[j1:j2]))
    hunks.sort(key=lambda h: (h[0], h[1]))
    kept: list[tuple[int, int, list[bytes]]] = []
    for h in hunks:
        if kept and kept[-1] == h:
            continue  # the same change on both sides
        if kept and _overlap(kept[-1], h):
            return _CONFLICT
        kept.append(h)
    out: list[bytes] = []
    pos = 0
    for i1, i2, new in kept:
        out.extend(lines[pos:i1])
        out.extend(new)
        pos = i2
    out.extend(lines[pos:])
    return b"".join(out)


def _overlap(a: tuple[int, int, list[bytes]], b: tuple[int, int, list[bytes]]) -> bool:
    """Whether two hunks (sorted: a first) touch the same base lines or insertion point."""
    if a[0] == a[1] and b[0] == b[1]:
        return a[0] == b[0]
    if a[0] == a[1]:
        return False  # an insertion before b's range
    if b[0] == b[1]:
        return a[0] < b[0] < a[1]
    return b[0] < a[1]


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _write(path: Path, data: bytes | None) -> None:
    from klaw.fsutil import atomic_write

    if data is None:
        path.unlink(missing_ok=True)
        return
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o644
    atomic_write(path, data, mode=mode, mkdir=True)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _message(what: str, why: str) -> str:
    """`memory: what`, a blank line and `why`; control characters dropped (a message
    can carry text from a model or a chat, and `log_entries` splits on two of them)."""
    what, why = _CONTROL.sub(" ", what), _CONTROL.sub(" ", why)
    subject = " ".join(what.split()) or "change"
    if not subject.startswith("memory:"):
        subject = f"memory: {subject}"
    body = why.strip()
    return f"{subject}\n\n{body}\n" if body else f"{subject}\n"


def is_memory_path(rel: str) -> bool:
    """Whether a workspace-relative path is a memory file Klaw versions."""
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    if len(parts) == 1:
        return parts[0] in ("MEMORY.md", "USER.md")
    return len(parts) > 1 and parts[0] in ("memory", "bank") and parts[-1].endswith(".md")


_SHARED: dict[Path, MemoryGit] = {}
_SHARED_LOCK = threading.Lock()


def versioner(workspace: Path, config: EngineConfig | None = None) -> MemoryGit:
    """The one `MemoryGit` of `workspace` in this process (its commits run in order),
    with `memory.git` from `config`."""
    key = workspace.resolve()
    setting = config.memory.git if config is not None else None
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is None:
            found = _SHARED[key] = MemoryGit(workspace, enabled=setting)
        elif config is not None:
            found.setting = setting
        return found
