"""CPU float32 Linear layers through oneDNN with their weights packed once, and the rows a decode step needs.

:func:`prepack_linears` swaps every float32 CPU ``nn.Linear`` of a model to oneDNN's matmul with a weight reordered
once (``torch.ops.mkldnn._reorder_linear_weight``; the dense ``weight`` stays). :func:`min_rows` *measures*, for the
model's own weight shapes at the current thread count, the smallest row count from which every row of a product has
the bits it has in any larger product; decode steps with fewer rows are padded to it. :func:`pack_matrix` and
:func:`packed_product` do the same for any fixed matrix (a shared prompt's keys and values). Why and how:
docs/internals.md#packed-weights; speed: benchmarks/prepacked_linear.md.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

#: the Linear kernels a model can decode with (recorded in each store's ``linear_kernel`` attribute)
ONEDNN = "onednn_prepacked"
ATEN = "aten"

#: products up to this many rows are checked against a larger one by :func:`min_rows`
PROBE_ROWS = 64

_MIN_ROWS: dict[tuple, int] = {}  # (module class, weight shape, bias, dtype, threads) -> rows, once per process


def available() -> bool:
    """Whether this torch build has oneDNN's prepacked linear (CPU builds with mkldnn)."""
    ops = torch.ops.mkldnn
    return bool(torch.backends.mkldnn.is_available()) and all(
        hasattr(ops, op) for op in ("_reorder_linear_weight", "_linear_pointwise")
    )


def pack_matrix(matrix: torch.Tensor) -> torch.Tensor:
    """``matrix`` [out, in] (float32, CPU) reordered once for oneDNN (an opaque tensor of the same size), for
    :func:`packed_product`."""
    with torch.no_grad():
        return torch.ops.mkldnn._reorder_linear_weight(matrix.detach().contiguous(), None)


def packed_nbytes(out_features: int, in_features: int, element_size: int) -> int:
    """Bytes :func:`pack_matrix` holds for an [out, in] matrix, at most: oneDNN pads the output side to a multiple of
    64 (an [80, n] matrix takes [128, n]'s memory; [n, 80] its own)."""
    return -(-out_features // 64) * 64 * in_features * element_size


def packed_pair_nbytes(rows: int, cols: int, element_size: int) -> int:
    """Bytes :func:`pack_matrix` holds, at most, for an [rows, cols] matrix and an [cols, rows] one: a KV head's
    packed prompt keys [n, head_dim] and values transposed [head_dim, n] (kvdiv.kernel.shared_prompt.PackedPrompt)."""
    return packed_nbytes(rows, cols, element_size) + packed_nbytes(cols, rows, element_size)


def packed_product(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """``x`` [rows, in] times the transpose of the matrix :func:`pack_matrix` packed: [rows, out]. A dense [out, in]
    matrix works too (oneDNN reorders it on the fly; the transpose of a contiguous [in, out] one is read as it is)."""
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, None, "none", [], "")


class _PackedWeight:
    """A Linear's oneDNN-packed weight, (re)packed on use whenever the dense weight is another tensor or was changed in
    place since (its ``_version``); copies and pickles start empty (an opaque oneDNN tensor has no storage to copy)."""

    def __init__(self) -> None:
        self.tensor: torch.Tensor | None = None
        self.source: tuple[int, int] | None = None

    def get(self, weight: torch.Tensor) -> torch.Tensor:
        source = (weight.data_ptr(), weight._version)
        if self.tensor is None or self.source != source:
            with torch.no_grad():
                self.tensor = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)
            self.source = source
        return self.tensor

    def __deepcopy__(self, memo: dict) -> "_PackedWeight":
        return _PackedWeight()

    def __reduce__(self):
        return (_PackedWeight, ())


class PackedLinear(torch.nn.Linear):
    """An ``nn.Linear`` whose forward multiplies by its oneDNN-packed weight (:func:`prepack_linears` turns plain
    ``nn.Linear`` modules into it in place; ``weight`` and ``bias`` stay the module's parameters)."""

    _kvdiv_packed: _PackedWeight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(
            x.contiguous(), self._kvdiv_packed.get(self.weight), self.bias, "none", [], ""
        )


def prepack_linears(model: torch.nn.Module) -> int:
    """Route every float32 CPU ``nn.Linear`` of ``model`` through a oneDNN weight packed now; returns how many.

    Idempotent; a no-op (0) without oneDNN. A weight changed in place or replaced later is packed again on the next
    call; a deep copy of the model repacks its own weights on first use. :func:`unpack_linears` restores the default.
    """
    if not available():
        return 0
    count = 0
    with torch.no_grad():
        for module in model.modules():
            if type(module) is not torch.nn.Linear:  # subclasses (and PackedLinear itself) keep their own forward
                continue
            weight = module.weight
            if weight.device.type != "cpu" or weight.dtype != torch.float32 or weight.dim() != 2:
                continue
            module._kvdiv_packed = _PackedWeight()
            module._kvdiv_packed.get(weight)
            module.__class__ = PackedLinear
            count += 1
    if count or packed_linears(model):
        model._kvdiv_prepacked = True
    return count


def unpack_linears(model: torch.nn.Module) -> None:
    """Undo :func:`prepack_linears` (the modules use ``F.linear`` again)."""
    for module in model.modules():
        if type(module) is PackedLinear:
            module.__class__ = torch.nn.Linear
            del module._kvdiv_packed
    model.__dict__.pop("_kvdiv_prepacked", None)


@contextlib.contextmanager
def unpacked(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Run ``model`` with torch's default Linear kernels inside the block (packed again afterwards if it was)."""
    was = is_prepacked(model)
    unpack_linears(model)
    try:
        yield model
    finally:
        if was:
            prepack_linears(model)


def packed_linears(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """The Linear modules of ``model`` that run through a packed weight."""
    return [m for m in model.modules() if type(m) is PackedLinear]


def is_prepacked(model: torch.nn.Module) -> bool:
    """Whether :func:`prepack_linears` packed some of ``model``'s Linear layers."""
    return model.__dict__.get("_kvdiv_prepacked", False)


def linear_kernel(model: torch.nn.Module) -> str:
    """:data:`ONEDNN` if ``model``'s Linear layers are packed, else :data:`ATEN`."""
    return ONEDNN if is_prepacked(model) else ATEN


def min_rows(model: torch.nn.Module) -> int:
    """Fewest rows a CPU decode forward of ``model`` needs so that each row's bits do not depend on the others.

    Measured for the kernels its Linear layers run now (packed or torch's default, any dtype), per distinct weight
    shape, at the current thread count (cached for the process): products of 1 … PROBE_ROWS−1 rows taken at shifting
    offsets of a seeded input are compared with the same rows of a larger product; the answer is one more than the
    largest row count that differs (1 if none). Raises if even PROBE_ROWS−1 rows differ (nothing to pad to).
    """
    key = (torch.get_num_threads(), linear_kernel(model))
    cache = model.__dict__.setdefault("_kvdiv_min_rows", {})
    if key not in cache:
        need = 1
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.weight.device.type == "cpu":
                probe = (type(module), tuple(module.weight.shape), module.bias is not None, module.weight.dtype, key[0])
                if probe not in _MIN_ROWS:
                    _MIN_ROWS[probe] = _probe(module)
                need = max(need, _MIN_ROWS[probe])
        cache[key] = need
    return cache[key]


@torch.no_grad()
def _probe(module: torch.nn.Linear) -> int:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(PROBE_ROWS + 8, module.in_features, generator=gen).to(module.weight.dtype)
    ref = module(x)
    worst = 0
    for rows in range(1, PROBE_ROWS):
        offset = rows % 9
        if not torch.equal(module(x[offset : offset + rows]), ref[offset : offset + rows]):
            worst = rows
    if worst == PROBE_ROWS - 1:
        kernel = "packed " if type(module) is PackedLinear else ""
        raise RuntimeError(
            f"the {kernel}CPU Linear {tuple(module.weight.shape)} ({module.weight.dtype}) gives a row different bits "
            f"at {worst} rows than in a larger product at {torch.get_num_threads()} threads, so documents batched in "
            "one forward would change each other's values; set the model's "
            f"`prepack: {str(type(module) is not PackedLinear).lower()}` "
            f"or run one document per job (`documents_per_job: 1`)"
        )
    return worst + 1


__all__ = [
    "ATEN",
    "ONEDNN",
    "PackedLinear",
    "available",
    "is_prepacked",
    "linear_kernel",
    "min_rows",
    "pack_matrix",
    "packed_linears",
    "packed_nbytes",
    "packed_pair_nbytes",
    "packed_product",
    "prepack_linears",
    "unpack_linears",
    "unpacked",
]
