"""`klaw sandbox build`: the sandbox image, with or without a registry.

    build(cfg, paths)  # → Built(image=..., rootfs=..., how=...)

With a Docker engine: `docker build` of `image/Dockerfile` FROM debian:bookworm-slim
when the registry answers; otherwise (as on machines without registry access) the
same Debian from `debootstrap --variant=minbase --include=<packages.txt>` imported
as `klaw-sandbox-base`, with the Dockerfile on top built with `--network none`.
The debootstrapped tree is kept as bubblewrap's root (`$XDG_DATA_HOME/klaw/sandbox/
rootfs`), so both backends run the same files. Without Docker, only that rootfs is
made (debootstrap needs root).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from klaw.errors import SandboxError

if TYPE_CHECKING:
    from klaw.config import CodeExecutionConfig
    from klaw.paths import KlawPaths

__all__ = ["BASE_IMAGE", "Built", "build", "image_files", "packages", "recipe_digest"]

log = logging.getLogger("klaw.sandbox")

BASE_IMAGE = "klaw-sandbox-base"
REGISTRY_BASE = "debian:bookworm-slim"
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"


@dataclass(frozen=True, slots=True)
class Built:
    image: str | None
    rootfs: Path | None
    how: str


def image_files() -> dict[str, bytes]:
    """Dockerfile and packages.txt, as shipped in the package."""
    pkg = resources.files("klaw.sandbox") / "image"
    return {name: (pkg / name).read_bytes() for name in ("Dockerfile", "packages.txt")}


def packages() -> list[str]:
    text = image_files()["packages.txt"].decode()
    return [line.strip() for line in text.splitlines() if line.strip() and line[0] != "#"]


def recipe_digest() -> str:
    """Changes when the Dockerfile or the package list does: the label an image carries."""
    h = hashlib.sha256()
    for name, data in sorted(image_files().items()):
        h.update(name.encode() + b"\0" + data)
    return h.hexdigest()[:16]


def make_rootfs(dest: Path, *, say: Callable[[str], None], mirror: str | None = None) -> None:
    """debootstrap the sandbox's Debian into `dest` (replaced only once complete)."""
    if os.getuid() != 0:
        raise SandboxError("debootstrap needs root: run `sudo klaw sandbox build`")
    exe = shutil.which("debootstrap")
    if exe is None:
        raise SandboxError("debootstrap is not installed (apt install debootstrap)")
    mirror = mirror or os.environ.get("KLAW_DEBIAN_MIRROR") or DEFAULT_MIRROR
    tmp = dest.with_name(dest.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    say(f"debootstrap {SUITE} from {mirror} (a minute or two)...")
    argv = [exe, "--variant=minbase", f"--include={','.join(packages())}", SUITE, str(tmp)]
    done = subprocess.run([*argv, mirror], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise SandboxError(f"debootstrap failed (exit {done.returncode}):\n{tail}")
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (tmp / sub).glob("*.deb"):
            entry.unlink()
    (tmp / "etc" / "klaw-sandbox").mkdir(parents=True, exist_ok=True)
    (tmp / "etc" / "klaw-sandbox" / "recipe").write_text(recipe_digest() + "\n")
    for d in ("output", "code", "skills"):
        (tmp / d).mkdir(exist_ok=True)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def _rootfs_current(rootfs: Path) -> bool:
    try:
        return (rootfs / "etc" / "klaw-sandbox" / "recipe").read_text().strip() == recipe_digest()
    except OSError:
        return False


def build(
    cfg: CodeExecutionConfig,
    paths: KlawPaths,
    *,
    docker_url: str | None,
    say: Callable[[str], None] = print,
    force: bool = False,
) -> Built:
    """Builds what this machine can use: the image (with Docker) and bubblewrap's rootfs."""
    rootfs = paths.data_dir / "sandbox" / "rootfs"
    if docker_url is None:
        if force or not _rootfs_current(rootfs):
            make_rootfs(rootfs, say=say)
        return Built(None, rootfs, "debootstrap (no Docker engine: bubblewrap's root only)")
    import docker
    import docker.errors

    client = docker.DockerClient(base_url=docker_url, timeout=600)
    try:
        digest = recipe_digest()
        if not force:
            try:
                have = client.images.get(cfg.docker_image)
                if (have.labels or {}).get("klaw.recipe") == digest:
                    say(f"{cfg.docker_image} is up to date")
                    return Built(cfg.docker_image, rootfs if rootfs.exists() else None, "cached")
            except docker.errors.ImageNotFound:
                pass
        base, how = REGISTRY_BASE, "Dockerfile from the registry's Debian"
        try:
            say(f"pulling {REGISTRY_BASE}...")
            client.images.pull(REGISTRY_BASE)
        except docker.errors.APIError as exc:
            say(f"no registry ({exc.explanation or exc}); building the base from Debian packages")
            if force or not _rootfs_current(rootfs):
                make_rootfs(rootfs, say=say)
            _import(client, rootfs, f"{BASE_IMAGE}:{digest}")
            base, how = f"{BASE_IMAGE}:{digest}", "debootstrap + docker import, Dockerfile on top"
        _build(client, base, cfg.docker_image, digest, say)
        _prune(client, keep=base)
        return Built(cfg.docker_image, rootfs if rootfs.exists() else None, how)
    except docker.errors.DockerException as exc:
        raise SandboxError(f"the image build failed: {exc}") from exc
    finally:
        client.close()


def _import(client: object, rootfs: Path, tag: str) -> None:
    import docker

    assert isinstance(client, docker.DockerClient)
    with tempfile.TemporaryDirectory(dir=rootfs.parent) as tmp:
        archive = Path(tmp) / "rootfs.tar"
        done = subprocess.run(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(archive), "."],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SandboxError(f"tar of the rootfs failed: {done.stderr.strip()[-300:]}")
        repo, _, version = tag.partition(":")
        client.api.import_image_from_file(str(archive), repository=repo, tag=version)


def _prune(client: object, *, keep: str) -> None:
    """Drops earlier bases and the images the new build left untagged (hundreds of MB)."""
    import docker
    import docker.errors

    assert isinstance(client, docker.DockerClient)
    for image in client.images.list(name=BASE_IMAGE):
        if keep not in image.tags:
            try:
                client.images.remove(str(image.id), force=True)
            except docker.errors.APIError as exc:  # in use by a container: next time
                log.info("sandbox: old base image kept: %s", exc)
    client.images.prune(filters={"dangling": True})


def _build(client: object, base: str, tag: str, digest: str, say: Callable[[str], None]) -> None:
    import docker

    assert isinstance(client, docker.DockerClient)
    with tempfile.TemporaryDirectory() as ctx:
        for name, data in image_files().items():
            Path(ctx, name).write_bytes(data)
        say(f"docker build {tag} (FROM {base}, no network)...")
        client.images.build(
            path=ctx,
            tag=tag,
            buildargs={"BASE": base},
            labels={"klaw.recipe": digest},
            network_mode="none" if base.startswith(BASE_IMAGE) else None,
            rm=True,
            forcerm=True,
        )
