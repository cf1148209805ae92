"""Log-probs and entropies through the LM head with a hand-written chunked backward: one weight-gradient buffer.

`logprobs.chunked_token_scores` runs each chunk under activation checkpointing; autograd then gives every
chunk's backward a `[V, H]` weight gradient of its own, added to the running sum (113 MB a chunk at SmolLM2's
49,152 × 576, on top of the sum itself). `HeadScores` recomputes each chunk's logits in its backward and adds the
chunk's gradient into one float32 buffer in place (`addmm_`), as Liger-Kernel's fused linear cross-entropy does
(Hsu et al. 2024; Wijmans et al. 2024), in pure torch. For z = (x·Wᵀ + b)/τ, p = softmax(z), lse = logsumexp(z):

    log p(y) = z_y − lse                 ∂/∂z = onehot(y) − p
    H = lse − Σ p·z                      ∂H/∂z_k = −p_k·(z_k − lse + H)

Under autocast the head's weight is cast once per call (not once per chunk) and the backward's three products
run in the forward's dtype, as autograd's own backward of an autocast matmul would (a custom Function's backward
runs outside the autocast context: in float32 they took ~0.2 s of one SmolLM2 update at 2 threads, in bf16 under
0.1 s, torch.profiler); the weight gradient is still summed in float32. Without autocast nothing changes, bit for bit.

Used only for the plain tempered distribution (no top-k/top-p), when the vocabulary is large enough that a
chunk holds fewer positions than asked (`logprobs.chunk_rows`): the small-vocabulary recipes keep the
checkpointed path, bit for bit.
"""

from __future__ import annotations

import torch


_VOCAB_BLOCK = 8192


def _autocast_dtype(x: torch.Tensor) -> torch.dtype | None:
    dev = x.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else None


def _chunk(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float,
           dt: torch.dtype | None = None):
    z = x @ weight.t() if dt is None else x.to(dt) @ weight.t()
    if bias is not None:
        z = z + bias
    z = z.float() if z.dtype != torch.float64 else z
    return z.div_(temperature) if temperature != 1.0 else z  # z is this call's own tensor: divided in place


class HeadScores(torch.autograd.Function):
    """(logp_N, entropy_N) of `targets_N` (< 0: logp 0) under softmax((x·Wᵀ + b)/τ), `rows` positions at a time."""

    @staticmethod
    def forward(ctx, x, weight, bias, targets, temperature: float, rows: int):
        logp, ent = [], []
        dt = _autocast_dtype(x)
        w = weight if dt is None else weight.to(dt)  # cast once, not once per chunk
        with torch.no_grad():
            for s in range(0, x.shape[0], rows):
                z = _chunk(x[s:s + rows], w, bias, temperature, dt)
                lse = torch.logsumexp(z, dim=-1)
                t = targets[s:s + rows]
                lp = z.gather(-1, t.clamp_min(0)[:, None])[:, 0] - lse
                logp.append(torch.where(t >= 0, lp, torch.zeros_like(lp)))
                ent.append(lse - torch.softmax(z, dim=-1).mul_(z).sum(dim=-1))
        ctx.temperature, ctx.rows, ctx.dt = temperature, rows, dt
        logp = torch.cat(logp) if logp else x.new_zeros(0, dtype=torch.float32)
        ent = torch.cat(ent) if ent else x.new_zeros(0, dtype=torch.float32)
        ctx.save_for_backward(x, weight, bias, targets, ent)
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, g_ent):
        x, weight, bias, targets, ent = ctx.saved_tensors
        rows, tau = ctx.rows, ctx.temperature
        want_x, want_w, want_b = ctx.needs_input_grad[:3]
        acc = torch.float64 if weight.dtype == torch.float64 else torch.float32
        dt = ctx.dt  # the forward's autocast dtype: the backward's products run in it, as autograd's would
        w = weight if dt is None else weight.to(dt)
        gx = torch.zeros_like(x) if want_x else None
        # the weight gradient's first chunk is written, not added to zeros (the same sums: 0 + x is x): one pass
        # over the [V, H] buffer fewer (113 MB at SmolLM2's vocabulary); under autocast it is summed block by block
        gw = torch.zeros(weight.shape, dtype=acc, device=weight.device) if want_w and dt is not None else None
        gb = torch.zeros(weight.shape[0], dtype=acc, device=weight.device) if want_b else None
        for s in range(0, x.shape[0], rows):
            xc, t = x[s:s + rows], targets[s:s + rows]
            with torch.no_grad():
                z = _chunk(xc, w, bias, tau, dt)
                lse = torch.logsumexp(z, dim=-1, keepdim=True)
                p = torch.sub(z, lse).exp_()
                ge = g_ent[s:s + rows].to(z.dtype)[:, None] if g_ent is not None else None
                gl = g_logp[s:s + rows].to(z.dtype) * (t >= 0) if g_logp is not None else None
                # ∂/∂z = gl·(onehot − p) − ge·p·(z − lse + H), built in place on z
                if ge is not None:
                    dz = z.sub_(lse).add_(ent[s:s + rows].to(z.dtype)[:, None]).mul_(p).mul_(-ge)
                else:
                    dz = torch.zeros_like(z)
                if gl is not None:
                    dz.sub_(p.mul_(gl[:, None]))
                    dz.scatter_add_(-1, t.clamp_min(0)[:, None], gl[:, None])
                if tau != 1.0:
                    dz.div_(tau)
                if want_x:
                    gx[s:s + rows] = (dz.to(w.dtype) @ w).to(x.dtype)
                if want_w and dt is None:
                    gw = torch.mm(dz.t().to(acc), xc.to(acc)) if gw is None else gw.addmm_(dz.t().to(acc), xc.to(acc))
                elif want_w:  # the chunk's product in dt, summed in float32, a block of the vocabulary at a time
                    dzt, xd = dz.t().to(dt), xc.to(dt)  # (a whole [V, H] product in dt would be one more head's bytes)
                    for v in range(0, dzt.shape[0], _VOCAB_BLOCK):
                        gw[v:v + _VOCAB_BLOCK].add_(dzt[v:v + _VOCAB_BLOCK] @ xd)
                if want_b:
                    gb.add_(dz.sum(0).to(acc))
        if want_w and gw is None:  # no positions
            gw = torch.zeros(weight.shape, dtype=acc, device=weight.device)
        return (gx, gw.to(weight.dtype) if want_w else None, gb.to(bias.dtype) if want_b else None, None, None, None)
