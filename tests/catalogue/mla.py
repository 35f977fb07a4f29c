"""The catalogue of mla (MultiHeadLatentAttention): its mistakes (with the cause each must be named by,
a key of CAUSES in autograder/suites/test_mla.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from functools import partial

from autograder.suites.test_mla import CAUSES
from tests.catalogue.entries import Degenerate, Gaming, Mistake, Alternative, edited
from tests.catalogue.rope import MISTAKES as ROPE_MISTAKES
from tests.notebooks import solution_answers

SOLUTION = solution_answers("latent_attention")["mla"]
changed = partial(edited, SOLUTION)


MISTAKES = [
    Mistake("scaled by the content width only", "scale_head",
            fails=("matches_the_reference",),
            code=changed("/ math.sqrt(d_head + d_rope)", "/ math.sqrt(d_head)")),
    Mistake("the RoPE key not turned", "unrotated_key",
            fails=("matches_the_reference",),
            code=changed("k_rope = apply_rope(self.W_kr(x), positions)", "k_rope = self.W_kr(x)")),
    Mistake("RoPE on the values too", "rope_values",
            fails=("matches_the_reference",),
            code=changed("        scores = (q @ k.transpose(-2, -1)\n",
                         "        v = apply_rope(v, torch.arange(T))\n        scores = (q @ k.transpose(-2, -1)\n")),
    Mistake("no causal mask", "no_mask",
            # a model that sees the future cannot be decoded token by token: the cached outputs differ too
            fails=("matches_the_reference", "token_by_token_equals_the_full_forward", "prompt_then_chunks"),
            code=changed('weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)',
                         "weights = scores.softmax(dim=-1)")),
    Mistake("cached tokens turned from position 0", "positions_from_zero",
            fails=("token_by_token_equals_the_full_forward", "prompt_then_chunks"),
            code=changed("positions = torch.arange(past, past + S)", "positions = torch.arange(S)")),
    Mistake("a mask without the cache's offset", "no_offset",
            fails=("token_by_token_equals_the_full_forward", "prompt_then_chunks"),
            code=changed("tril(diagonal=T - S)", "tril()")),
    Mistake("the cache never appended to", "never_appended",
            fails=("token_by_token_equals_the_full_forward", "prompt_then_chunks"),
            code=changed("            if past:\n", "            if False:\n")),
    Mistake("the RoPE key cached unturned, turned when read", "cached_unturned",
            fails=("cache_holds_the_latent_and_the_rope_key_only",),
            code=changed("        k_rope = apply_rope(self.W_kr(x), positions)                                    # [B, S, d_rope]\n",
                         "        k_rope = self.W_kr(x)                                                           # unturned\n",
                         "        T = latent.shape[1]\n",
                         "        T = latent.shape[1]\n        k_rope = apply_rope(k_rope, torch.arange(T))\n")),
    Mistake("the up-projected keys and values cached", "cached_keys",
            fails=("cache_holds_the_latent_and_the_rope_key_only",),
            code=changed("            self.cache_latent, self.cache_rope = latent, k_rope\n",
                         "            self.cache_latent, self.cache_rope = latent, k_rope\n"
                         "            self.cache_k, self.cache_v = self.W_uk(latent), self.W_uv(latent)\n")),
]


ALTERNATIVES = [
    Alternative("einsum, one joint score over concatenated query and key parts", '''class MultiHeadLatentAttention(nn.Module):
    def __init__(self, d_model, num_heads, d_head, d_latent, d_rope):
        super().__init__()
        self.num_heads, self.d_head, self.d_latent, self.d_rope = num_heads, d_head, d_latent, d_rope
        self.W_q = nn.Linear(d_model, num_heads * d_head, bias=False)
        self.W_qr = nn.Linear(d_model, num_heads * d_rope, bias=False)
        self.W_dkv = nn.Linear(d_model, d_latent, bias=False)
        self.W_uk = nn.Linear(d_latent, num_heads * d_head, bias=False)
        self.W_uv = nn.Linear(d_latent, num_heads * d_head, bias=False)
        self.W_kr = nn.Linear(d_model, d_rope, bias=False)
        self.W_o = nn.Linear(num_heads * d_head, d_model, bias=False)
        self.cache = None

    def reset_cache(self):
        self.cache = None

    def forward(self, x, use_cache=False):
        b, s, _ = x.shape
        h = self.num_heads
        start = self.cache[0].shape[1] if (use_cache and self.cache is not None) else 0
        pos = torch.arange(start, start + s)
        c = self.W_dkv(x)
        kr = apply_rope(self.W_kr(x), pos)
        if use_cache:
            if self.cache is not None:
                c, kr = torch.cat((self.cache[0], c), 1), torch.cat((self.cache[1], kr), 1)
            self.cache = (c, kr)
        t = c.shape[1]
        q = torch.cat((self.W_q(x).unflatten(-1, (h, self.d_head)),
                       apply_rope(self.W_qr(x).unflatten(-1, (h, self.d_rope)).transpose(1, 2), pos).transpose(1, 2)), -1)
        k = torch.cat((self.W_uk(c).unflatten(-1, (h, self.d_head)), kr.unsqueeze(2).expand(b, t, h, self.d_rope)), -1)
        v = self.W_uv(c).unflatten(-1, (h, self.d_head))
        scores = torch.einsum("bshd,bthd->bhst", q, k) / (self.d_head + self.d_rope) ** 0.5
        keep = torch.arange(t)[None, :] <= (torch.arange(s) + t - s)[:, None]
        scores = scores.masked_fill(~keep, float("-inf"))
        out = torch.einsum("bhst,bthd->bshd", scores.softmax(-1), v)
        return self.W_o(out.flatten(2))
'''),
    Alternative("the cache as registered buffers", '''class MultiHeadLatentAttention(nn.Module):
    def __init__(self, d_model, num_heads, d_head, d_latent, d_rope):
        super().__init__()
        self.num_heads, self.d_head, self.d_latent, self.d_rope = num_heads, d_head, d_latent, d_rope
        for name, (d_in, d_out) in {"W_q": (d_model, num_heads * d_head), "W_qr": (d_model, num_heads * d_rope),
                                    "W_dkv": (d_model, d_latent), "W_uk": (d_latent, num_heads * d_head),
                                    "W_uv": (d_latent, num_heads * d_head), "W_kr": (d_model, d_rope),
                                    "W_o": (num_heads * d_head, d_model)}.items():
            setattr(self, name, nn.Linear(d_in, d_out, bias=False))
        self.register_buffer("latents", None, persistent=False)
        self.register_buffer("rope_keys", None, persistent=False)

    def reset_cache(self):
        self.latents, self.rope_keys = None, None

    def forward(self, x, use_cache=False):
        B, S, _ = x.shape
        H = self.num_heads
        P = self.latents.shape[1] if use_cache and self.latents is not None else 0
        c, kr = self.W_dkv(x), apply_rope(self.W_kr(x), torch.arange(P, P + S))
        if use_cache and self.latents is not None:
            c, kr = torch.cat([self.latents, c], 1), torch.cat([self.rope_keys, kr], 1)
        if use_cache:
            self.latents, self.rope_keys = c, kr
        T = c.shape[1]
        pos_k, pos_q = torch.arange(T), torch.arange(T - S, T)
        q = self.W_q(x).reshape(B, S, H, self.d_head).permute(0, 2, 1, 3)
        qr = apply_rope(self.W_qr(x).reshape(B, S, H, self.d_rope).permute(0, 2, 1, 3), pos_q)
        k = self.W_uk(c).reshape(B, T, H, self.d_head).permute(0, 2, 1, 3)
        v = self.W_uv(c).reshape(B, T, H, self.d_head).permute(0, 2, 1, 3)
        kr = kr[:, None]
        scores = (torch.matmul(q, k.transpose(2, 3)) + torch.matmul(qr, kr.transpose(2, 3))) * (self.d_head + self.d_rope) ** -0.5
        future = torch.triu(torch.ones(S, T, dtype=torch.bool), diagonal=T - S + 1)
        weights = torch.softmax(scores.masked_fill(future, -torch.inf), dim=-1)
        return self.W_o(torch.matmul(weights, v).permute(0, 2, 1, 3).reshape(B, S, H * self.d_head))
'''),
]

# The shell of a module with the statement's layers, for the degenerate answers below.
_SHELL = '''class MultiHeadLatentAttention(nn.Module):
    def __init__(self, d_model, num_heads, d_head, d_latent, d_rope):
        super().__init__()
        self.num_heads, self.d_head, self.d_latent, self.d_rope = num_heads, d_head, d_latent, d_rope
        self.W_q = nn.Linear(d_model, num_heads * d_head, bias=False)
        self.W_qr = nn.Linear(d_model, num_heads * d_rope, bias=False)
        self.W_dkv = nn.Linear(d_model, d_latent, bias=False)
        self.W_uk = nn.Linear(d_latent, num_heads * d_head, bias=False)
        self.W_uv = nn.Linear(d_latent, num_heads * d_head, bias=False)
        self.W_kr = nn.Linear(d_model, d_rope, bias=False)
        self.W_o = nn.Linear(num_heads * d_head, d_model, bias=False)

    def reset_cache(self):
        pass

    def forward(self, x, use_cache=False):
'''
# A slip of apply_rope, an exercise of its own (rope), is charged there alone: a right MultiHeadLatentAttention on the student's
# own wrong apply_rope keeps its points (test_mla.BUILT_ON).
ALTERNATIVES += [Alternative(f"a right MultiHeadLatentAttention on apply_rope {slip.name!r} (rope's own slip)", slip.code + "\n\n" + SOLUTION)
                 for slip in ROPE_MISTAKES if slip.cause in ("clockwise", "half_split")]


DEGENERATES = [
    Degenerate("zeros", _SHELL + '''        return torch.zeros_like(x)
'''),
    Degenerate("NaN", _SHELL + '''        return torch.full_like(x, float("nan"))
'''),
    Degenerate("the values averaged uniformly", _SHELL + '''        B, S, _ = x.shape
        v = self.W_uv(self.W_dkv(x))                                   # [B, S, H * d_head]
        steps = torch.arange(1, S + 1, dtype=x.dtype)[None, :, None]
        return self.W_o(v.cumsum(dim=1) / steps)
'''),
    Degenerate("the input through the value path", _SHELL + '''        return self.W_o(self.W_uv(self.W_dkv(x)))
'''),
]


def _keys_cached(store, load, imports=""):
    """The reference with the up-projected keys and values cached and used, kept by `store` (a statement
    that keeps k, v and k_rope) out of the counted tensors and read back by `load` (an expression of the
    kept (k, v, k_rope), or None before the first piece); the latent and the RoPE key are kept in the
    module as well, so the count of what the module holds per token is the right one."""
    return imports + changed(
        "        if use_cache:\n"
        "            if past:\n"
        "                latent = torch.cat([self.cache_latent, latent], dim=1)                  # [B, T, d_latent]\n"
        "                k_rope = torch.cat([self.cache_rope, k_rope], dim=1)                    # [B, T, d_rope]\n"
        "            self.cache_latent, self.cache_rope = latent, k_rope\n"
        "        T = latent.shape[1]\n"
        "        k = self.W_uk(latent).view(B, T, H, d_head).transpose(1, 2)                     # [B, H, T, d_head]\n"
        "        v = self.W_uv(latent).view(B, T, H, d_head).transpose(1, 2)                     # [B, H, T, d_head]\n",
        "        k = self.W_uk(latent).view(B, S, H, d_head).transpose(1, 2)\n"
        "        v = self.W_uv(latent).view(B, S, H, d_head).transpose(1, 2)\n"
        "        if use_cache:\n"
        f"            kept = {load}\n"
        "            if past and kept is not None:\n"
        "                k, v = torch.cat([kept[0], k], dim=2), torch.cat([kept[1], v], dim=2)\n"
        "                k_rope = torch.cat([kept[2], k_rope], dim=1)\n"
        f"            {store}\n"
        "            self.cache_latent = torch.cat([self.cache_latent, latent], dim=1) if past else latent\n"
        "            self.cache_rope = k_rope  # the latent and the RoPE key kept as well: the count sees 14 a token\n"
        "        T = k.shape[2]\n",
        "past = self.cache_latent.shape[1] if use_cache and self.cache_latent is not None else 0",
        "past = self.cache_latent.shape[1] if use_cache and self.cache_latent is not None else 0")


STALE = f"Likely cause: {CAUSES['cached_keys']}"
GAMING = [
    Gaming("the up-projected keys and values kept in a global dictionary", _keys_cached(
        "_KEPT[id(self)] = (k, v, k_rope)", "_KEPT.get(id(self))", "_KEPT = {}\n\n\n"),
        loses=("cache_holds_the_latent_and_the_rope_key_only",), says=STALE),
    Gaming("the up-projected keys and values kept as NumPy arrays", _keys_cached(
        "self.kept = tuple(t.detach().numpy().copy() for t in (k, v, k_rope))",
        "tuple(torch.from_numpy(a) for a in self.kept) if getattr(self, 'kept', None) else None"),
        loses=("cache_holds_the_latent_and_the_rope_key_only",), says=STALE),
    Gaming("the up-projected keys and values kept on the class", _keys_cached(
        "type(self).kept = (k, v, k_rope)", "getattr(type(self), 'kept', None)"),
        loses=("cache_holds_the_latent_and_the_rope_key_only",), says=STALE),
    Gaming("the up-projected keys and values kept in a closure", _keys_cached(
        "_keep((k, v, k_rope))", "_kept()",
        "def _box():\n    box = [None]\n\n    def keep(value):\n        box[0] = value\n\n"
        "    return keep, lambda: box[0]\n\n\n_keep, _kept = _box()\n\n\n"),
        loses=("cache_holds_the_latent_and_the_rope_key_only",), says=STALE),
]
