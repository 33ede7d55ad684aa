"""What the model converters share: a small ONNX graph builder, a SentencePiece-Unigram
tokenizer.json, and writing both with the large tables as external data."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["DATA_FILE", "META", "Graph", "save", "unigram_tokenizer"]

META = "\u2581"  # SentencePiece's word-start marker
#: Large tables live beside model.onnx: ONNX Runtime maps external data instead of
#: copying it, so only rows of tokens actually seen become resident (e5's word table:
#: +41 MB at load instead of +92 MB, docs/decisions.md).
DATA_FILE = "model.onnx.data"


class Graph:
    """Nodes and initializers, each output named after its op and a counter."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def const(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def op(self, op: str, inputs: list[str], domain: str = "", **attrs: Any) -> str:
        self.n += 1
        out = f"{op.lower()}_{self.n}"
        self.nodes.append(
            helper.make_node(op, inputs, [out], name=f"n{self.n}", domain=domain, **attrs)
        )
        return out


def unigram_tokenizer(
    pieces: list[str],
    scores: list[float],
    *,
    unk: int,
    bos: int,
    eos: int,
    charsmap: bytes,
    split: bool,
    strip: bool = False,
) -> bytes:
    """tokenizer.json for a SentencePiece Unigram model: the precompiled charsmap,
    spaces collapsed (and stripped with `strip`, as SentencePiece's
    remove_extra_whitespaces does), an always-prepended ▁, then `<s> … </s>`."""
    b, e = pieces[bos], pieces[eos]
    norms: list[dict[str, Any]] = [
        {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
    ]
    if strip:
        norms.append({"type": "Strip", "strip_left": True, "strip_right": True})
    meta = {"type": "Metaspace", "replacement": META, "prepend_scheme": "always", "split": split}
    tok: dict[str, object] = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        # No added tokens: "<s>" in a text is matched as an ordinary piece, as the
        # reference engines do, when the specials are only in the vocab.
        "added_tokens": [],
        "normalizer": {"type": "Sequence", "normalizers": norms},
        "pre_tokenizer": meta,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": b, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": e, "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": b, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": e, "type_id": 0}},
                {"SpecialToken": {"id": e, "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 0}},
                {"SpecialToken": {"id": e, "type_id": 0}},
            ],
            "special_tokens": {
                b: {"id": b, "ids": [bos], "tokens": [b]},
                e: {"id": e, "ids": [eos], "tokens": [e]},
            },
        },
        "decoder": meta,
        "model": {
            "type": "Unigram",
            "unk_id": unk,
            # float32 scores written as their exact float64 value
            "vocab": [[p, float(s)] for p, s in zip(pieces, scores, strict=True)],
            "byte_fallback": False,
        },
    }
    return json.dumps(tok, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def save(model: onnx.ModelProto, tokenizer: bytes, out_dir: Path) -> None:
    """model.onnx (tables over 1 MB in DATA_FILE beside it) and tokenizer.json."""
    from onnx.external_data_helper import convert_model_to_external_data

    out_dir.mkdir(parents=True, exist_ok=True)
    convert_model_to_external_data(
        model, all_tensors_to_one_file=True, location=DATA_FILE, size_threshold=1 << 20
    )
    (out_dir / DATA_FILE).unlink(missing_ok=True)  # onnx appends to an existing file
    onnx.save_model(model, str(out_dir / "model.onnx"))
    tmp = out_dir / "tokenizer.json.tmp"
    tmp.write_bytes(tokenizer)
    tmp.replace(out_dir / "tokenizer.json")
