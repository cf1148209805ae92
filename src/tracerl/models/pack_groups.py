"""Sibling linear layers that read the same input multiplied as one packed matrix (`engine.prepack`).

A Llama-architecture layer multiplies its normed hidden state by q_proj, k_proj and v_proj, and its MLP input by
gate_proj and up_proj: five products a layer where two would do. At decode's few rows each product pays its
kernel's fixed cost and reads its own pack; one product against the members' packs stacked along the output
dimension pays it once. Measured on SmolLM2-135M's 30 layers, oneDNN float32 packs, AVX-512 AMD EPYC host
(`benchmarks/decode_ceiling.py --prepack --unfused`): docs/performance_smollm2_avx512_amd.md.

A `PackGroup` holds the stacked pack; each member (a `PackedLinear`) keeps its own parameters and state-dict
name, and its product is its columns of the group's. The group remembers the last input it multiplied (the
tensor itself and its version counter; under `torch.inference_mode`, which keeps no version counters, the tensor
alone) and hands the same product to the members that follow with that input,
so a model that calls them in another order, or with different inputs, still gets each member's own product:
the cache decides nothing but whether the product is computed again. Each column of the stacked product is the
dot product of its row of the weight with the input, as in the member's own product; oneDNN's kernels sum along
the input dimension in the same blocks whatever the output width, so the columns came out bit for bit the
members' (tests/models/test_pack_groups.py checks it at 1 to 40 rows).
"""

from __future__ import annotations

import torch

# sibling names that a Llama-architecture block multiplies by the same input, in its forward's order
SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")  # whose blocks call them so (modeling_llama, _qwen2)


class PackGroup:
    """Members' weights stacked in one pack; `product(member, x)` is `member`'s columns of x times the stack."""

    def __init__(self, members, make_pack):
        self.members = list(members)
        self.make_pack = make_pack  # the first member's `_make_pack`: the kernel's layout for the stacked weight
        widths = [m.out_features for m in self.members]
        self.bounds = {id(m): (sum(widths[:i]), sum(widths[:i + 1])) for i, m in enumerate(self.members)}
        self.packed: torch.Tensor | None = None
        self.key: tuple | None = None
        self.bias: torch.Tensor | None = None
        self._staged: dict[int, torch.Tensor] = {}
        self._last: tuple | None = None  # (input, its version, product, members still to take their columns)

    def _biases(self):
        if self.members[0].bias is None:
            return None
        return torch.cat([m.bias.detach() for m in self.members])

    def _set(self, weight: torch.Tensor) -> torch.Tensor:
        self.packed = self._last = None  # the old pack goes before the new one is made
        self.packed = self.make_pack(weight)
        self.bias = self._biases()
        for m in self.members:
            m._packed = self.packed  # the members' `_released` and `drop_packs` read and clear it
        return self.packed

    def pack(self) -> torch.Tensor:
        """The stacked pack of the members' current weights, made again when one of them changed."""
        if any(m.weight.numel() == 0 for m in self.members):  # released: a sync packs it (`pack_from`)
            return self.packed
        ws = [m.weight.detach() for m in self.members]
        bs = [m.bias.detach() for m in self.members if m.bias is not None]
        key = tuple((t.data_ptr(), t._version) for t in ws + bs) + (ws[0].dtype,)
        if self.packed is None or self.key != key:
            self._set(torch.cat(ws))
            self.key = key
        return self.packed

    def pack_from(self, member, weight: torch.Tensor) -> None:
        """`member`'s incoming weight (a weight sync); the stack is packed once every member's has come."""
        ref = self.members[0].weight
        self._staged[id(member)] = weight.detach().to(device=ref.device, dtype=ref.dtype)
        if len(self._staged) == len(self.members):
            stacked = torch.cat([self._staged[id(m)] for m in self.members])
            self._staged.clear()
            self._set(stacked)
            self.key = None
            for m in self.members:
                if m.weight.numel():
                    m.weight.data = torch.empty(0, dtype=m.weight.dtype, device=m.weight.device)

    def drop(self) -> None:
        self.packed = self.key = self.bias = self._last = None
        for m in self.members:
            m._packed = None

    def product(self, member, x: torch.Tensor) -> torch.Tensor:
        """`member`'s product with `x`: its columns of the stacked product (computed once per input)."""
        last = self._last
        version = -1 if x.is_inference() else x._version  # an inference tensor keeps no version counter
        if last is not None and last[0] is x and last[1] == version and id(member) in last[3]:
            out, pending = last[2], last[3]
        else:
            packed = self.pack()  # released members: the pack a sync made
            dtype = self.members[0].weight.dtype
            flat = x.reshape(-1, x.shape[-1]).to(dtype)
            if not flat.is_contiguous():
                flat = flat.contiguous()
            out = torch.ops.mkldnn._linear_pointwise(flat, packed, self.bias, "none", [], "")
            pending = {id(m) for m in self.members}
        pending = pending - {id(member)}
        self._last = (x, version, out, pending) if pending else None  # the last member frees the product
        lo, hi = self.bounds[id(member)]
        return out[:, lo:hi].view(*x.shape[:-1], hi - lo).to(x.dtype)

