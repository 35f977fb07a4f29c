'''The mistake catalogue and the correct variants: answers as students write them.

Every Mistake must lose points on its own exercise, only in the tests named in `fails` (the
properties the mistake breaks), with feedback that contains `hint` (its cause, in the words the
student sees) and no other mistake's hint.  Every Variant is correct, written differently from
the reference solution, and must get full marks.  tests/test_catalogue.py grades them all.
'''

from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    exercise: str   # exercise id (the answer cell's grade_id)
    name: str
    hint: str       # must appear in the feedback of that exercise (case-insensitive)
    code: str

    @property
    def fails(self):
        """The tests this mistake is allowed to fail (see FAILS at the end of this file)."""
        return FAILS[self.exercise, self.name]


@dataclass(frozen=True)
class Variant:
    exercise: str
    name: str
    code: str


@dataclass(frozen=True)
class Degenerate:
    """An answer that keeps the shapes and the structure but computes nothing the exercise is
    about; it must earn at most DEGENERATE_SHARE of its exercise."""
    exercise: str
    name: str
    code: str


DEGENERATE_SHARE = 0.2


def _sdpa(body):
    return "def scaled_dot_product_attention(q, k, v, mask=None):\n" + body


def _softmax(body):
    return "def softmax(x, axis=-1):\n" + body


SDPA_TAIL = '''    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return weights @ v, weights
'''

MHA_INIT = '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError("d_model must be divisible by num_heads")
        self.d_model, self.num_heads, self.d_k = d_model, num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
'''

MHA_FORWARD = '''
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        context, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        return self.W_o(merge_heads(context)), weights
'''

CSA_INIT = '''class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads, context_length, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError("d_model must be divisible by num_heads")
        self.num_heads, self.d_k, self.context_length = num_heads, d_model // num_heads, context_length
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("causal", torch.ones(context_length, context_length, dtype=torch.bool).tril())
'''

CSA_FORWARD_HEAD = '''
    def forward(self, x):
        B, T, D = x.shape
        if T > self.context_length:
            raise ValueError(f"sequence of {T} tokens exceeds context_length {self.context_length}")
        q, k, v = (W(x).view(B, T, self.num_heads, self.d_k).transpose(1, 2) for W in (self.W_q, self.W_k, self.W_v))
'''

CAUSAL_ATTENTION_INIT = '''class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout=0.0, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
'''

CACHED_INIT = '''class CachedSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.reset_cache()

    def reset_cache(self):
        self.cached_k = self.cached_v = None
'''


def _cached_forward(cache_and_mask):
    return CACHED_INIT + '''
    def forward(self, x, use_cache=False):
        q = split_heads(self.W_q(x), self.num_heads)
        k = split_heads(self.W_k(x), self.num_heads)
        v = split_heads(self.W_v(x), self.num_heads)
''' + cache_and_mask + '''        context, _ = attend(q, k, v, mask)
        return self.W_o(merge_heads(context))
'''


# The correct cache and mask (the degenerate answers keep them; one mistake changes their axis).
CACHE = '''        past = 0
        if use_cache:
            if self.cached_k is not None:
                past = self.cached_k.shape[2]
                k = torch.cat([self.cached_k, k], dim=2)
                v = torch.cat([self.cached_v, v], dim=2)
            self.cached_k, self.cached_v = k, v
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(diagonal=past)
'''

GQA_INIT = '''class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads, bias=False):
        super().__init__()
        if d_model % num_heads or num_heads % num_kv_heads:
            raise ValueError("bad head counts")
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        d_k = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, num_kv_heads * d_k, bias=bias)
        self.W_v = nn.Linear(d_model, num_kv_heads * d_k, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
'''


def _gqa_forward(expand):
    return GQA_INIT + '''
    def forward(self, x, mask=None):
        group = self.num_heads // self.num_kv_heads
        q = split_heads(self.W_q(x), self.num_heads)
        k = split_heads(self.W_k(x), self.num_kv_heads)
        v = split_heads(self.W_v(x), self.num_kv_heads)
''' + expand + '''        context, weights = attend(q, k, v, mask)
        return self.W_o(merge_heads(context)), weights
'''


def _train(targets="targets.reshape(-1)", update=("optimizer.zero_grad()", "loss.backward()", "optimizer.step()"),
           record="loss.item()"):
    """A train_model whose loop is the reference's but for the part given."""
    steps = "".join(f"        {line}\n" for line in update)
    return f'''def train_model(model, inputs, targets, steps=150, lr=1e-2):
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        logits, _ = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), {targets})
{steps}        losses.append({record})
    return losses
'''


MISTAKES = [
    # -- softmax (NumPy) ---------------------------------------------------------------------
    Mistake("softmax", "no max subtraction", "subtract the maximum", _softmax(
        "    e = np.exp(x)\n    return e / e.sum(axis=axis, keepdims=True)\n")),
    Mistake("softmax", "global max instead of per-row", "maximum of the whole array", _softmax(
        "    e = np.exp(x - np.max(x))\n    return e / e.sum(axis=axis, keepdims=True)\n")),
    Mistake("softmax", "max without keepdims", "keepdims=True", _softmax(
        "    e = np.exp(x - np.max(x, axis=axis))\n    return e / np.sum(e, axis=axis)\n")),
    Mistake("softmax", "axis argument ignored", "whatever `axis` says", _softmax(
        "    e = np.exp(x - x.max(axis=-1, keepdims=True))\n    return e / e.sum(axis=-1, keepdims=True)\n")),
    Mistake("softmax", "normalised by the whole array's sum", "sum of the whole array", _softmax(
        "    e = np.exp(x - x.max(axis=axis, keepdims=True))\n    return e / e.sum()\n")),
    Mistake("softmax", "modifies its input in place", "in-place", _softmax(
        "    x -= x.max(axis=axis, keepdims=True)\n    np.exp(x, out=x)\n"
        "    x /= x.sum(axis=axis, keepdims=True)\n    return x\n")),
    Mistake("softmax", "casts to float64", "float64", _softmax(
        "    x = np.asarray(x, dtype=np.float64)\n    e = np.exp(x - x.max(axis=axis, keepdims=True))\n"
        "    return e / e.sum(axis=axis, keepdims=True)\n")),
    # -- attention (NumPy) -------------------------------------------------------------------
    Mistake("numpy_attention", "K.T on batched inputs", "np.swapaxes", '''def attention(Q, K, V):
    weights = softmax(Q @ K.T / np.sqrt(Q.shape[-1]))
    return weights @ V, weights
'''),
    Mistake("numpy_attention", "no scaling", "without the 1/sqrt(d_k) scaling", '''def attention(Q, K, V):
    weights = softmax(Q @ np.swapaxes(K, -1, -2))
    return weights @ V, weights
'''),
    Mistake("numpy_attention", "softmax over the queries", "over the queries", '''def attention(Q, K, V):
    weights = softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]), axis=0)
    return weights @ V, weights
'''),
    Mistake("numpy_attention", "scaled by the value width", "value width d_v", '''def attention(Q, K, V):
    weights = softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(V.shape[-1]))
    return weights @ V, weights
'''),
    Mistake("numpy_attention", "naive softmax inline", "stable softmax", '''def attention(Q, K, V):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    weights = np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)
    return weights @ V, weights
'''),
    # -- scaled_dot_product_attention -------------------------------------------------------
    Mistake("sdpa", "no scaling", "without the 1/sqrt(d_k) scaling", _sdpa('''    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("sdpa", "divides by d_k", "by d_k instead of sqrt(d_k)", _sdpa('''    scores = q @ k.transpose(-2, -1) / q.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("sdpa", "scales by d_v", "value width d_v", _sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("sdpa", "softmax over dim -2", "over the queries", _sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-2), nan=0.0)
    return weights @ v, weights
''')),
    Mistake("sdpa", "transpose(1, 2) only works for 3-D", "last two dimensions", _sdpa('''    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("sdpa", "mask applied after the softmax", "masking after the softmax", _sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights
''')),
    Mistake("sdpa", "inverted mask convention", "inverted mask", _sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("sdpa", "masked_fill result not assigned", "masked_fill assigned", _sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("sdpa", "boolean mask added as a float", "before the softmax", _sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + mask.to(scores.dtype)
''' + SDPA_TAIL)),
    Mistake("sdpa", "detached scores", "path to the output is cut", _sdpa('''    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).detach()
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("sdpa", "NumPy round trip", "path to the output is cut", "import numpy as np\n\n\n" + _sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.tensor(np.nan_to_num(weights.detach().numpy()), dtype=q.dtype)
    return weights @ v, weights
''')),
    Mistake("sdpa", "downcast to float32", "precision of float32", _sdpa('''    q, k, v = q.float(), k.float(), v.float()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("sdpa", "NaN for fully masked rows", "gives NaN", _sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
''')),
    Mistake("sdpa", "unstable hand-written softmax", "subtract each row's maximum", _sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    exps = torch.exp(scores)
    weights = exps / exps.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    return weights @ v, weights
''')),
    Mistake("sdpa", "assumes Sq == Sk", "same length", _sdpa('''    n = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)).reshape(*q.shape[:-2], n, n) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("sdpa", "in-place masked_fill_ on the softmax output", "in-place", _sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights.masked_fill_(~mask, 0.0)
        weights /= weights.sum(-1, keepdim=True).clamp_min(1e-30)
    return weights @ v, weights
''')),
    Mistake("sdpa", "computes in float32, casts back", "precision of float32", _sdpa('''    scores = q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return (weights @ v.float()).to(q.dtype), weights.to(q.dtype)
''')),
    # -- causal_mask ---------------------------------------------------------------------------
    Mistake("causal_mask", "upper triangle", "upper triangle", '''def causal_mask(seq_len, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu()
'''),
    Mistake("causal_mask", "diagonal excluded", "excludes the diagonal", '''def causal_mask(seq_len, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril(diagonal=-1)
'''),
    Mistake("causal_mask", "float mask", "bool", '''def causal_mask(seq_len, device=None):
    return torch.tril(torch.ones(seq_len, seq_len, device=device))
'''),
    Mistake("causal_mask", "blocked-positions convention", "True = blocked", '''def causal_mask(seq_len, device=None):
    return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device), diagonal=1)
'''),
    # -- padding_mask ----------------------------------------------------------------------------
    Mistake("causal_mask", "cut from a fixed 16 x 16 buffer", "has shape [16, 16]", '''CAUSAL = torch.ones(16, 16, dtype=torch.bool).tril()


def causal_mask(seq_len, device=None):
    return CAUSAL[:seq_len, :seq_len].to(device)
'''),
    Mistake("padding_mask", "<= instead of <", "j <= length", '''def padding_mask(lengths, max_len):
    return (torch.arange(max_len)[None, :] <= lengths[:, None])[:, None, None, :]
'''),
    Mistake("padding_mask", "True marks padding", "True = padding", '''def padding_mask(lengths, max_len):
    return (torch.arange(max_len)[None, :] >= lengths[:, None])[:, None, None, :]
'''),
    Mistake("padding_mask", "returns [B, S]", "[B, 1, 1, S]", '''def padding_mask(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths[:, None]
'''),
    Mistake("padding_mask", "blocks queries instead of keys", "block queries", '''def padding_mask(lengths, max_len):
    return (torch.arange(max_len)[None, :] < lengths[:, None])[:, None, :, None]
'''),
    Mistake("padding_mask", "uses lengths.max() instead of max_len", "max_len argument", '''def padding_mask(lengths, max_len):
    width = int(lengths.max())
    return (torch.arange(width)[None, :] < lengths[:, None])[:, None, None, :]
'''),
    # -- fix the broken CausalAttention -----------------------------------------------------
    Mistake("fix_causal_attention", "mask == 0 keeps only the future", "keeps only the future", CAUSAL_ATTENTION_INIT + '''        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, t, _ = x.shape
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        scores = scores.masked_fill(self.mask[:t, :t] == 0, float("-inf"))
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return self.dropout(weights) @ values
'''),
    Mistake("fix_causal_attention", "tril boolean mask (blocks the past)", "keeps only the future", CAUSAL_ATTENTION_INIT + '''        self.register_buffer("mask", torch.tril(torch.ones(context_length, context_length)).bool())

    def forward(self, x):
        b, t, _ = x.shape
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        scores = scores.masked_fill(self.mask[:t, :t], float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1))
        return self.dropout(weights) @ values
'''),
    Mistake("fix_causal_attention", "mask not sliced to the length", "mask[:T, :T]", CAUSAL_ATTENTION_INIT + '''        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        scores = scores.masked_fill(self.mask, float("-inf"))
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return self.dropout(weights) @ values
'''),
    Mistake("fix_causal_attention", "mask removed to stop the crash", "no mask at all", CAUSAL_ATTENTION_INIT + '''
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return self.dropout(weights) @ values
'''),
    Mistake("fix_causal_attention", "functional dropout stays on in eval", "nn.Dropout", '''class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout=0.0, qkv_bias=False):
        super().__init__()
        self.p = dropout
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x):
        t = x.shape[1]
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        scores = scores.masked_fill(self.mask[:t, :t], float("-inf"))
        weights = F.dropout(torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1), self.p)
        return weights @ values
'''),
    Mistake("fix_causal_attention", "scaled by the input width", "sqrt(d_in)", CAUSAL_ATTENTION_INIT + '''        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x):
        t = x.shape[1]
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        scores = scores.masked_fill(self.mask[:t, :t], float("-inf"))
        weights = torch.softmax(scores / x.shape[-1] ** 0.5, dim=-1)
        return self.dropout(weights) @ values
'''),
    # -- qkv_parameter_counts ---------------------------------------------------------------
    Mistake("param_counts", "bias ignored", "bias=True must add", '''def qkv_parameter_counts(d_model, num_heads, bias=False):
    if d_model % num_heads:
        raise ValueError("indivisible")
    d_k = d_model // num_heads
    return {"full_heads": 3 * num_heads * d_model * d_model, "split_heads": 3 * num_heads * d_model * d_k,
            "fused": 3 * d_model * d_model}
'''),
    Mistake("param_counts", "true division gives floats", "integer arithmetic", '''def qkv_parameter_counts(d_model, num_heads, bias=False):
    if d_model % num_heads:
        raise ValueError("indivisible")
    d_k = d_model / num_heads
    extra = 1 if bias else 0
    return {"full_heads": 3 * num_heads * (d_model + extra) * d_model,
            "split_heads": 3 * num_heads * (d_model + extra) * d_k, "fused": 3 * (d_model + extra) * d_model}
'''),
    Mistake("param_counts", "split heads counted once", "each of the h heads", '''def qkv_parameter_counts(d_model, num_heads, bias=False):
    if d_model % num_heads:
        raise ValueError("indivisible")
    d_k = d_model // num_heads
    b = 1 if bias else 0
    return {"full_heads": 3 * num_heads * (d_model + b) * d_model, "split_heads": 3 * (d_model + b) * d_k,
            "fused": 3 * (d_model + b) * d_model}
'''),
    Mistake("param_counts", "no check of divisibility", "ValueError", '''def qkv_parameter_counts(d_model, num_heads, bias=False):
    d_k = d_model // num_heads
    b = 1 if bias else 0
    return {"full_heads": 3 * num_heads * (d_model + b) * d_model,
            "split_heads": 3 * num_heads * (d_model + b) * d_k, "fused": 3 * (d_model + b) * d_model}
'''),
    # -- split_heads / merge_heads ----------------------------------------------------------
    Mistake("heads", "view without transpose", "without the transpose", '''def split_heads(x, num_heads):
    B, S, D = x.shape
    return x.view(B, num_heads, S, D // num_heads)


def merge_heads(x):
    B, H, S, d_k = x.shape
    return x.transpose(1, 2).reshape(B, S, H * d_k)
'''),
    Mistake("heads", "features split as [d_k, H]", "[d_k, H]", '''def split_heads(x, num_heads):
    B, S, D = x.shape
    return x.view(B, S, D // num_heads, num_heads).permute(0, 3, 1, 2)


def merge_heads(x):
    B, H, S, d_k = x.shape
    return x.transpose(1, 2).reshape(B, S, H * d_k)
'''),
    Mistake("heads", "merge without moving the head axis", "without moving the head axis", '''def split_heads(x, num_heads):
    B, S, D = x.shape
    return x.view(B, S, num_heads, D // num_heads).transpose(1, 2)


def merge_heads(x):
    B, H, S, d_k = x.shape
    return x.reshape(B, S, H * d_k)
'''),
    # -- MultiHeadAttention -----------------------------------------------------------------
    Mistake("mha", "one projection shared by q, k, v", "W_k and W_v are never used", MHA_INIT + '''
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_q(key), self.num_heads)
        v = split_heads(self.W_q(value), self.num_heads)
        context, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        return self.W_o(merge_heads(context)), weights
'''),
    Mistake("mha", "output projection missing", "W_o", MHA_INIT + '''
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        context, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        return merge_heads(context), weights
'''),
    Mistake("mha", "scaled by sqrt(d_model)", "sqrt(d_model) instead of sqrt(d_k)", MHA_INIT + '''
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads) * math.sqrt(self.d_k) / math.sqrt(self.d_model)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        context, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        return self.W_o(merge_heads(context)), weights
'''),
    Mistake("mha", "bias flag ignored", "bias=bias", MHA_INIT.replace("bias=bias", "bias=True") + MHA_FORWARD),
    Mistake("mha", "assumes keys as long as queries", "own length", MHA_INIT + '''
    def forward(self, query, key, value, mask=None):
        B, S, D = query.shape
        q = self.W_q(query).view(B, S, self.num_heads, self.d_k).transpose(1, 2)
        k = self.W_k(key).view(B, S, self.num_heads, self.d_k).transpose(1, 2)
        v = self.W_v(value).view(B, S, self.num_heads, self.d_k).transpose(1, 2)
        context, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        return self.W_o(merge_heads(context)), weights
'''),
    Mistake("mha", "no check of divisibility", "ValueError", MHA_INIT.replace(
        '''        if d_model % num_heads != 0:
            raise ValueError("d_model must be divisible by num_heads")
''', "") + MHA_FORWARD),
    Mistake("mha", "heads merged without a transpose", "without moving the head axis back", MHA_INIT + '''
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        context, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        B, H, S, d_k = context.shape
        return self.W_o(context.reshape(B, S, H * d_k)), weights
'''),
    # -- to_torch_mha --------------------------------------------------------------------------
    Mistake("to_torch_mha", "batch_first left False", "batch_first=True", '''def to_torch_mha(module):
    m = nn.MultiheadAttention(module.d_model, module.num_heads, bias=module.W_q.bias is not None,
                              dtype=module.W_q.weight.dtype)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([module.W_q.weight, module.W_k.weight, module.W_v.weight]))
        m.out_proj.weight.copy_(module.W_o.weight)
        if module.W_q.bias is not None:
            m.in_proj_bias.copy_(torch.cat([module.W_q.bias, module.W_k.bias, module.W_v.bias]))
            m.out_proj.bias.copy_(module.W_o.bias)
    return m
'''),
    Mistake("to_torch_mha", "keys stacked first", "keys before queries", '''def to_torch_mha(module):
    m = nn.MultiheadAttention(module.d_model, module.num_heads, bias=module.W_q.bias is not None, batch_first=True,
                              dtype=module.W_q.weight.dtype)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([module.W_k.weight, module.W_q.weight, module.W_v.weight]))
        m.out_proj.weight.copy_(module.W_o.weight)
        if module.W_q.bias is not None:
            m.in_proj_bias.copy_(torch.cat([module.W_k.bias, module.W_q.bias, module.W_v.bias]))
            m.out_proj.bias.copy_(module.W_o.bias)
    return m
'''),
    Mistake("to_torch_mha", "biases always on, never copied", "bias=False", '''def to_torch_mha(module):
    m = nn.MultiheadAttention(module.d_model, module.num_heads, batch_first=True, dtype=module.W_q.weight.dtype)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([module.W_q.weight, module.W_k.weight, module.W_v.weight]))
        m.out_proj.weight.copy_(module.W_o.weight)
    return m
'''),
    # -- CausalSelfAttention ------------------------------------------------------------------
    Mistake("causal_self_attention", "mask buffer not sliced", "not sliced to [:T, :T]", CSA_INIT + CSA_FORWARD_HEAD + '''        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).masked_fill(~self.causal, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (self.dropout(weights) @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''),
    Mistake("causal_self_attention", "fixed-size buffer, no length check", "size it by context_length", '''class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads, context_length, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError("d_model must be divisible by num_heads")
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("causal", torch.ones(16, 16, dtype=torch.bool).tril())

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = (W(x).view(B, T, self.num_heads, self.d_k).transpose(1, 2) for W in (self.W_q, self.W_k, self.W_v))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).masked_fill(~self.causal[:T, :T], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (self.dropout(weights) @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''),
    Mistake("causal_self_attention", "functional dropout in eval", "nn.Dropout", CSA_INIT + CSA_FORWARD_HEAD + '''        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).masked_fill(~self.causal[:T, :T], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (F.dropout(weights, self.dropout.p) @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''),
    Mistake("causal_self_attention", "mask stored as a parameter", "register_buffer", CSA_INIT.replace(
        'self.register_buffer("causal", torch.ones(context_length, context_length, dtype=torch.bool).tril())',
        'self.causal = nn.Parameter(torch.ones(context_length, context_length).tril())') + CSA_FORWARD_HEAD + '''        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).masked_fill(self.causal[:T, :T] == 0, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (self.dropout(weights) @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''),
    Mistake("causal_self_attention", "returns the weights after dropout", "before dropout", CSA_INIT + CSA_FORWARD_HEAD + '''        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).masked_fill(~self.causal[:T, :T], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))
        out = (weights @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''),
    Mistake("causal_self_attention", "scaled by sqrt(d_model)", "sqrt(d_k)", CSA_INIT + CSA_FORWARD_HEAD + '''        scores = (q @ k.transpose(-2, -1) / math.sqrt(D)).masked_fill(~self.causal[:T, :T], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (self.dropout(weights) @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''),
    Mistake("causal_self_attention", "dropout on the output", "dropout on the attention weights", CSA_INIT + CSA_FORWARD_HEAD + '''        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).masked_fill(~self.causal[:T, :T], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(B, T, D)
        return self.dropout(self.W_o(out)), weights
'''),
    # -- train_model ---------------------------------------------------------------------------
    Mistake("train_model", "learning rate ignored", "lr=lr", _train().replace("lr=lr)", "lr=1e-2)")),
    Mistake("train_model", "losses kept as tensors", "loss.item()", _train(record="loss.detach()")),
    Mistake("train_model", "optimizer.step() forgotten", "did not move",
            _train(update=("optimizer.zero_grad()", "loss.backward()"))),
    Mistake("train_model", "targets flattened in the wrong order", "flattened in different orders",
            _train(targets="targets.T.reshape(-1)")),
    Mistake("train_model", "backward before zero_grad", "did not move",
            _train(update=("loss.backward()", "optimizer.zero_grad()", "optimizer.step()"))),
    # -- head_similarity ------------------------------------------------------------------------
    Mistake("head_similarity", "dot products without norms", "without dividing by the norms", '''def head_similarity(weights):
    flat = weights.reshape(weights.shape[0], -1)
    return flat @ flat.T
'''),
    Mistake("head_similarity", "1 - cosine", "a distance", '''def head_similarity(weights):
    flat = F.normalize(weights.reshape(weights.shape[0], -1), dim=-1)
    return 1 - flat @ flat.T
'''),
    Mistake("head_similarity", "normalised per query row", "each query row", '''def head_similarity(weights):
    rows = weights / weights.norm(dim=-1, keepdim=True)
    return torch.einsum("itk,jtk->ij", rows, rows) / weights.shape[1]
'''),
    Mistake("head_similarity", "pairs head i with head i only", "one row and column per head", '''def head_similarity(weights):
    flat = weights.reshape(weights.shape[0], -1)
    return F.cosine_similarity(flat, flat, dim=-1)
'''),
    # -- CachedSelfAttention ------------------------------------------------------------------
    Mistake("kv_cache", "cache never appended", "never appended", _cached_forward('''        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
''')),
    Mistake("kv_cache", "chunk mask without the offset", "tril(diagonal=p)", _cached_forward('''        if use_cache:
            if self.cached_k is not None:
                k = torch.cat([self.cached_k, k], dim=2)
                v = torch.cat([self.cached_v, v], dim=2)
            self.cached_k, self.cached_v = k, v
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
''')),
    Mistake("kv_cache", "no mask when using the cache", "no causal mask among the new tokens", _cached_forward('''        mask = None
        if use_cache:
            if self.cached_k is not None:
                k = torch.cat([self.cached_k, k], dim=2)
                v = torch.cat([self.cached_v, v], dim=2)
            self.cached_k, self.cached_v = k, v
        else:
            mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
''')),
    Mistake("kv_cache", "cache concatenated along the head axis", "dim=2",
            _cached_forward(CACHE.replace("], dim=2)", "], dim=1)"))),
    Mistake("kv_cache", "reset forgets the position counter", "must forget everything", CACHED_INIT.replace(
        "        self.cached_k = self.cached_v = None\n", "        self.cached_k = self.cached_v = None\n        self.position = getattr(self, 'position', 0)\n") + '''
    def forward(self, x, use_cache=False):
        q = split_heads(self.W_q(x), self.num_heads)
        k = split_heads(self.W_k(x), self.num_heads)
        v = split_heads(self.W_v(x), self.num_heads)
        past = 0
        if use_cache:
            past = self.position
            if self.cached_k is not None:
                k = torch.cat([self.cached_k, k], dim=2)
                v = torch.cat([self.cached_v, v], dim=2)
            self.cached_k, self.cached_v = k, v
            self.position += q.shape[2]
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(diagonal=past)
        context, _ = attend(q, k, v, mask)
        return self.W_o(merge_heads(context))
'''),
    Mistake("kv_cache", "reset_cache does nothing", "must forget everything", CACHED_INIT.replace(
        "    def reset_cache(self):\n        self.cached_k = self.cached_v = None\n",
        "    def reset_cache(self):\n        if not hasattr(self, 'cached_k'):\n            self.cached_k = self.cached_v = None\n")
            + _cached_forward(CACHE)[len(CACHED_INIT):]),
    # -- GroupedQueryAttention ------------------------------------------------------------------
    Mistake("gqa", "repeat instead of repeat_interleave", "repeat_interleave", _gqa_forward('''        k = k.repeat(1, group, 1, 1)
        v = v.repeat(1, group, 1, 1)
''')),
    Mistake("gqa", "no check of the head counts", "ValueError", GQA_INIT.replace(
        '''        if d_model % num_heads or num_heads % num_kv_heads:
            raise ValueError("bad head counts")
''', "") + '''
    def forward(self, x, mask=None):
        group = self.num_heads // self.num_kv_heads
        q = split_heads(self.W_q(x), self.num_heads)
        k = split_heads(self.W_k(x), self.num_kv_heads).repeat_interleave(group, dim=1)
        v = split_heads(self.W_v(x), self.num_kv_heads).repeat_interleave(group, dim=1)
        context, weights = attend(q, k, v, mask)
        return self.W_o(merge_heads(context)), weights
'''),
    Mistake("gqa", "full-width key/value projections", "num_kv_heads * d_k", '''class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads, bias=False):
        super().__init__()
        if d_model % num_heads or num_heads % num_kv_heads:
            raise ValueError("bad head counts")
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None):
        q, k, v = (split_heads(W(x), self.num_heads) for W in (self.W_q, self.W_k, self.W_v))
        context, weights = attend(q, k, v, mask)
        return self.W_o(merge_heads(context)), weights
'''),
]


VARIANTS = [
    Variant("softmax", "logsumexp form", '''def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    log_norm = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))
    return np.exp(x - log_norm)
'''),
    Variant("softmax", "moveaxis and expand_dims, printing", '''def softmax(x, axis=-1):
    print("softmax called with shape", x.shape)
    moved = np.moveaxis(x, axis, -1)
    shifted = moved - np.expand_dims(moved.max(axis=-1), -1)
    e = np.exp(shifted)
    return np.moveaxis(e / np.expand_dims(e.sum(axis=-1), -1), -1, axis)
'''),
    Variant("numpy_attention", "einsum", '''def attention(Q, K, V):
    scores = np.einsum("...qd,...kd->...qk", Q, K) / np.sqrt(Q.shape[-1])
    weights = softmax(scores, axis=-1)
    return np.einsum("...qk,...kd->...qd", weights, V), weights
'''),
    Variant("sdpa", "einsum and torch.where", '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights
'''),
    Variant("sdpa", "pre-scaled queries and matmul", '''def scaled_dot_product_attention(q, k, v, mask=None):
    q = q * q.size(-1) ** -0.5
    scores = torch.matmul(q, k.transpose(-1, -2))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), -math.inf)
    weights = F.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.matmul(weights, v), weights
'''),
    Variant("sdpa", "-1e9 with empty rows zeroed", '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask.any(dim=-1, keepdim=True)
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights
'''),
    Variant("sdpa", "manual stable softmax: exp, mask, renormalise", '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores - scores.amax(dim=-1, keepdim=True).detach()
    exps = torch.exp(scores)
    if mask is not None:
        exps = exps * mask
    total = exps.sum(dim=-1, keepdim=True)
    weights = exps / torch.where(total == 0, torch.ones_like(total), total)
    return weights @ v, weights
'''),
    Variant("sdpa", "prints and warns", '''import sys
import warnings


def scaled_dot_product_attention(q, k, v, mask=None):
    print("q", tuple(q.shape), "k", tuple(k.shape))
    print("debugging to stderr", file=sys.stderr)
    warnings.warn("this is a student warning")
    scores = q @ k.mT / math.sqrt(k.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights
'''),
    Variant("causal_mask", "arange comparison", '''def causal_mask(seq_len, device=None):
    positions = torch.arange(seq_len, device=device)
    return positions[:, None] >= positions[None, :]
'''),
    Variant("causal_mask", "negated upper triangle", '''def causal_mask(seq_len, device=None):
    return ~torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device), diagonal=1)
'''),
    Variant("padding_mask", "loop over the batch", '''def padding_mask(lengths, max_len):
    mask = torch.zeros(len(lengths), 1, 1, max_len, dtype=torch.bool)
    for b, length in enumerate(lengths.tolist()):
        mask[b, 0, 0, :length] = True
    return mask
'''),
    Variant("fix_causal_attention", "additive -1e9 mask on a float buffer", CAUSAL_ATTENTION_INIT + '''        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        t = x.shape[1]
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2) + self.mask[:t, :t] * -1e9
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return self.dropout(weights) @ values
'''),
    Variant("fix_causal_attention", "bool conversion at use", CAUSAL_ATTENTION_INIT + '''        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return self.dropout(weights) @ values
'''),
    Variant("param_counts", "counted from real nn.Linear layers", '''def qkv_parameter_counts(d_model, num_heads, bias=False):
    if d_model % num_heads:
        raise ValueError(f"{d_model} is not divisible by {num_heads}")
    def size(d_out):
        return sum(p.numel() for p in nn.Linear(d_model, d_out, bias=bias).parameters())
    return {"full_heads": 3 * num_heads * size(d_model), "split_heads": 3 * num_heads * size(d_model // num_heads),
            "fused": 3 * size(d_model)}
'''),
    Variant("heads", "unflatten and permute", '''def split_heads(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3)


def merge_heads(x):
    return x.permute(0, 2, 1, 3).flatten(-2)
'''),
    Variant("mha", "loop over heads", MHA_INIT + '''
    def forward(self, query, key, value, mask=None):
        Q, K, V = self.W_q(query), self.W_k(key), self.W_v(value)
        outputs, maps = [], []
        for h in range(self.num_heads):
            part = slice(h * self.d_k, (h + 1) * self.d_k)
            head_mask = None
            if mask is not None:
                head_mask = mask if mask.dim() < 4 else mask[:, min(h, mask.shape[1] - 1)]
            out, w = scaled_dot_product_attention(Q[..., part], K[..., part], V[..., part], mask=head_mask)
            outputs.append(out)
            maps.append(w)
        return self.W_o(torch.cat(outputs, dim=-1)), torch.stack(maps, dim=1)
'''),
    Variant("to_torch_mha", "load_state_dict", '''def to_torch_mha(module):
    has_bias = module.W_q.bias is not None
    m = nn.MultiheadAttention(module.W_q.in_features, module.num_heads, bias=has_bias, batch_first=True,
                              dtype=module.W_q.weight.dtype)
    state = {"in_proj_weight": torch.cat([module.W_q.weight, module.W_k.weight, module.W_v.weight]),
             "out_proj.weight": module.W_o.weight}
    if has_bias:
        state["in_proj_bias"] = torch.cat([module.W_q.bias, module.W_k.bias, module.W_v.bias])
        state["out_proj.bias"] = module.W_o.bias
    m.load_state_dict({name: value.detach().clone() for name, value in state.items()})
    return m
'''),
    Variant("causal_self_attention", "float buffer, torch.where, -1e9", '''class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads, context_length, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError("num_heads must divide d_model")
        self.h, self.context_length = num_heads, context_length
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.register_buffer("bias_mask", torch.tril(torch.ones(context_length, context_length)).view(1, 1, context_length, context_length))

    def forward(self, x):
        B, T, C = x.size()
        if T > self.context_length:
            raise ValueError(f"got {T} tokens but context_length is {self.context_length}")
        q = self.W_q(x).reshape(B, T, self.h, C // self.h).permute(0, 2, 1, 3)
        k = self.W_k(x).reshape(B, T, self.h, C // self.h).permute(0, 2, 1, 3)
        v = self.W_v(x).reshape(B, T, self.h, C // self.h).permute(0, 2, 1, 3)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = torch.where(self.bias_mask[:, :, :T, :T] == 0, torch.full_like(att, -1e9), att)
        att = F.softmax(att, dim=-1)
        y = self.attn_dropout(att) @ v
        y = y.permute(0, 2, 1, 3).reshape(B, T, C)
        return self.W_o(y), att
'''),
    Variant("train_model", "CrossEntropyLoss on [B, vocab, T], set_to_none", '''def train_model(model, inputs, targets, steps=150, lr=1e-2):
    model.train()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history = []
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        logits, _ = model(inputs)
        loss = criterion(logits.transpose(1, 2), targets)
        loss.backward()
        optimizer.step()
        history.append(float(loss))
        if step % 50 == 0:
            print(f"step {step}: loss {loss.item():.3f}")
    return history
'''),
    Variant("head_similarity", "F.normalize and broadcasting cosine", '''def head_similarity(weights):
    flat = F.normalize(weights.flatten(1), dim=1)
    return F.cosine_similarity(flat.unsqueeze(1), flat.unsqueeze(0), dim=-1)
'''),
    Variant("kv_cache", "lists of chunks, mask from positions", CACHED_INIT.replace(
        "        self.cached_k = self.cached_v = None\n", "        self.keys, self.values = [], []\n") + '''
    def forward(self, x, use_cache=False):
        q = split_heads(self.W_q(x), self.num_heads)
        k = split_heads(self.W_k(x), self.num_heads)
        v = split_heads(self.W_v(x), self.num_heads)
        if use_cache:
            self.keys.append(k)
            self.values.append(v)
            k, v = torch.cat(self.keys, dim=-2), torch.cat(self.values, dim=-2)
        start = k.shape[-2] - q.shape[-2]
        query_positions = torch.arange(start, k.shape[-2])[:, None]
        key_positions = torch.arange(k.shape[-2])[None, :]
        context, _ = attend(q, k, v, key_positions <= query_positions)
        return self.W_o(merge_heads(context))
'''),
    Variant("gqa", "expand and reshape", _gqa_forward('''        B, H_kv, T, d_k = k.shape
        k = k[:, :, None].expand(B, H_kv, group, T, d_k).reshape(B, H_kv * group, T, d_k)
        v = v[:, :, None].expand(B, H_kv, group, T, d_k).reshape(B, H_kv * group, T, d_k)
''')),
]


UNIFORM = '''def uniform_attention(q, k, v, mask=None):
    scores = (q @ k.transpose(-2, -1)) * 0
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return weights @ v, weights


'''

GQA_EXPAND = '''        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
'''

CAUSAL_ATTENTION_BUFFER = '''        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x):
        b, T, _ = x.shape
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
'''

MHA_UNIFORM_FORWARD = '''
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        context, weights = uniform_attention(q, k, v, mask)
        return self.W_o(merge_heads(context)), weights
'''


def _mha_returns(output, weights):
    return MHA_INIT + f'''
    def forward(self, query, key, value, mask=None):
        B, Sq, D = query.shape
        Sk = key.shape[1]
        return {output}, {weights}
'''


def _csa_returns(output, weights):
    return CSA_INIT + CSA_FORWARD_HEAD + f'''        return {output}, {weights}
'''


DEGENERATES = [
    # -- softmax (NumPy)
    Degenerate("softmax", "ones / n (ignores its input)", _softmax("    return np.ones_like(x) / x.shape[axis]\n")),
    Degenerate("softmax", "zeros", _softmax("    return np.zeros_like(x)\n")),
    Degenerate("softmax", "NaN", _softmax("    return np.full_like(x, np.nan)\n")),
    Degenerate("softmax", "returns its input", _softmax("    return x.copy()\n")),
    # -- attention (NumPy)
    Degenerate("numpy_attention", "uniform weights", '''def attention(Q, K, V):
    weights = np.ones(Q.shape[:-1] + (K.shape[-2],)) / K.shape[-2]
    return weights @ V, weights
'''),
    Degenerate("numpy_attention", "zeros", '''def attention(Q, K, V):
    return np.zeros(Q.shape[:-1] + (V.shape[-1],)), np.zeros(Q.shape[:-1] + (K.shape[-2],))
'''),
    Degenerate("numpy_attention", "NaN", '''def attention(Q, K, V):
    return np.full(Q.shape[:-1] + (V.shape[-1],), np.nan), np.full(Q.shape[:-1] + (K.shape[-2],), np.nan)
'''),
    Degenerate("numpy_attention", "scores that ignore the queries", '''def attention(Q, K, V):
    weights = softmax(np.ones_like(Q) @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]))
    return weights @ V, weights
'''),
    Degenerate("numpy_attention", "returns the values", '''def attention(Q, K, V):
    return V, softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]))
'''),
    # -- scaled_dot_product_attention
    Degenerate("sdpa", "uniform weights (scores multiplied by 0)", _sdpa('''    scores = q @ k.transpose(-2, -1) * 0
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Degenerate("sdpa", "zeros", _sdpa('''    weights = torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype)
    return torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype), weights
''')),
    Degenerate("sdpa", "NaN", _sdpa('''    weights = torch.full((*q.shape[:-1], k.shape[-2]), float("nan"), dtype=q.dtype)
    return weights @ v, weights
''')),
    Degenerate("sdpa", "infinity", _sdpa('''    weights = torch.full((*q.shape[:-1], k.shape[-2]), float("inf"), dtype=q.dtype)
    return weights @ v, weights
''')),
    Degenerate("sdpa", "scores that ignore the queries", _sdpa('''    scores = torch.ones_like(q) @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Degenerate("sdpa", "scores that ignore the keys", _sdpa('''    scores = (q.sum(-1, keepdim=True) * torch.ones_like(k[..., 0]).unsqueeze(-2)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Degenerate("sdpa", "the values with the right weights", _sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return v[..., :q.shape[-2], :] + 0 * weights.sum(), weights
''')),
    # -- causal_mask
    Degenerate("causal_mask", "allows everything", '''def causal_mask(seq_len, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device)
'''),
    Degenerate("causal_mask", "allows nothing", '''def causal_mask(seq_len, device=None):
    return torch.zeros(seq_len, seq_len, dtype=torch.bool, device=device)
'''),
    Degenerate("causal_mask", "only the diagonal", '''def causal_mask(seq_len, device=None):
    return torch.eye(seq_len, dtype=torch.bool, device=device)
'''),
    # -- padding_mask
    Degenerate("padding_mask", "allows everything", '''def padding_mask(lengths, max_len):
    return torch.ones(len(lengths), 1, 1, max_len, dtype=torch.bool)
'''),
    Degenerate("padding_mask", "allows nothing", '''def padding_mask(lengths, max_len):
    return torch.zeros(len(lengths), 1, 1, max_len, dtype=torch.bool)
'''),
    # -- fix CausalAttention
    Degenerate("fix_causal_attention", "uniform weights (scores multiplied by 0)", CAUSAL_ATTENTION_INIT + CAUSAL_ATTENTION_BUFFER + '''        scores = (q @ k.transpose(1, 2) * 0).masked_fill(self.mask[:T, :T], float("-inf"))
        return self.dropout(torch.softmax(scores, dim=-1)) @ v
'''),
    Degenerate("fix_causal_attention", "the value projection", CAUSAL_ATTENTION_INIT + CAUSAL_ATTENTION_BUFFER + '''        return v
'''),
    Degenerate("fix_causal_attention", "zeros", CAUSAL_ATTENTION_INIT + CAUSAL_ATTENTION_BUFFER + '''        return torch.zeros_like(v)
'''),
    Degenerate("fix_causal_attention", "NaN", CAUSAL_ATTENTION_INIT + CAUSAL_ATTENTION_BUFFER + '''        return torch.full_like(v, float("nan"))
'''),
    # -- qkv_parameter_counts
    Degenerate("param_counts", "zeros, with the ValueError", '''def qkv_parameter_counts(d_model, num_heads, bias=False):
    if d_model % num_heads:
        raise ValueError("d_model must be divisible by num_heads")
    return {"full_heads": 0, "split_heads": 0, "fused": 0}
'''),
    Degenerate("param_counts", "one number for every count", '''def qkv_parameter_counts(d_model, num_heads, bias=False):
    if d_model % num_heads:
        raise ValueError("d_model must be divisible by num_heads")
    return dict.fromkeys(["full_heads", "split_heads", "fused"], d_model * d_model)
'''),
    # -- split_heads / merge_heads
    Degenerate("heads", "zeros of the right shapes", '''def split_heads(x, num_heads):
    B, S, D = x.shape
    return torch.zeros(B, num_heads, S, D // num_heads, dtype=x.dtype)


def merge_heads(x):
    B, H, S, d_k = x.shape
    return torch.zeros(B, S, H * d_k, dtype=x.dtype)
'''),
    Degenerate("heads", "return their input", '''def split_heads(x, num_heads):
    return x


def merge_heads(x):
    return x
'''),
    # -- MultiHeadAttention
    Degenerate("mha", "uniform weights (scores multiplied by 0)", UNIFORM + MHA_INIT + MHA_UNIFORM_FORWARD),
    Degenerate("mha", "zeros", _mha_returns("torch.zeros_like(query)", "torch.zeros(B, self.num_heads, Sq, Sk, dtype=query.dtype)")),
    Degenerate("mha", "the values", _mha_returns("value[:, :Sq] + 0 * self.W_o(query)",
                                                  "torch.ones(B, self.num_heads, Sq, Sk, dtype=query.dtype) / Sk")),
    Degenerate("mha", "NaN", _mha_returns("torch.full_like(query, float('nan'))",
                                           "torch.full((B, self.num_heads, Sq, Sk), float('nan'), dtype=query.dtype)")),
    # -- to_torch_mha
    Degenerate("to_torch_mha", "a new module, nothing copied", '''def to_torch_mha(module):
    return nn.MultiheadAttention(module.d_model, module.num_heads, batch_first=True,
                                 bias=module.W_q.bias is not None, dtype=module.W_q.weight.dtype)
'''),
    # -- CausalSelfAttention
    Degenerate("causal_self_attention", "uniform weights (scores multiplied by 0)", CSA_INIT + CSA_FORWARD_HEAD + '''        scores = (q @ k.transpose(-2, -1) * 0).masked_fill(~self.causal[:T, :T], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (self.dropout(weights) @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''),
    Degenerate("causal_self_attention", "the input", _csa_returns("x + 0 * self.dropout(v).sum()",
                                                                  "self.causal[:T, :T] / self.causal[:T, :T].sum(-1, keepdim=True)")),
    Degenerate("causal_self_attention", "zeros", _csa_returns("torch.zeros_like(x)", "torch.zeros(B, self.num_heads, T, T, dtype=x.dtype)")),
    Degenerate("causal_self_attention", "NaN", _csa_returns("torch.full_like(x, float('nan'))",
                                                            "torch.full((B, self.num_heads, T, T), float('nan'), dtype=x.dtype)")),
    # -- train_model
    Degenerate("train_model", "made-up decreasing losses, no training", '''def train_model(model, inputs, targets, steps=150, lr=1e-2):
    return [3.0 * 0.97 ** step for step in range(steps)]
'''),
    Degenerate("train_model", "zeros", '''def train_model(model, inputs, targets, steps=150, lr=1e-2):
    return [0.0] * steps
'''),
    # -- head_similarity
    Degenerate("head_similarity", "the identity", '''def head_similarity(weights):
    return torch.eye(weights.shape[0], dtype=weights.dtype)
'''),
    Degenerate("head_similarity", "ones", '''def head_similarity(weights):
    return torch.ones(weights.shape[0], weights.shape[0], dtype=weights.dtype)
'''),
    Degenerate("head_similarity", "zeros", '''def head_similarity(weights):
    return torch.zeros(weights.shape[0], weights.shape[0], dtype=weights.dtype)
'''),
    # -- CachedSelfAttention
    Degenerate("kv_cache", "uniform weights (scores multiplied by 0)",
               UNIFORM + _cached_forward(CACHE).replace("attend(q, k, v, mask)", "uniform_attention(q, k, v, mask)")),
    Degenerate("kv_cache", "the input", _cached_forward(CACHE).replace("context, _ = attend(q, k, v, mask)\n        return self.W_o(merge_heads(context))", "return x.clone()")),
    Degenerate("kv_cache", "zeros", _cached_forward(CACHE).replace("context, _ = attend(q, k, v, mask)\n        return self.W_o(merge_heads(context))", "return torch.zeros_like(x)")),
    # -- GroupedQueryAttention
    Degenerate("gqa", "uniform weights (scores multiplied by 0)",
               UNIFORM + _gqa_forward(GQA_EXPAND).replace("attend(q, k, v, mask)", "uniform_attention(q, k, v, mask)")),
    Degenerate("gqa", "the input", _gqa_forward(GQA_EXPAND).replace("return self.W_o(merge_heads(context)), weights",
                                                                   "return x.clone(), weights")),
    Degenerate("gqa", "zeros", _gqa_forward(GQA_EXPAND).replace("return self.W_o(merge_heads(context)), weights",
                                                               "return torch.zeros_like(x), torch.zeros_like(weights)")),
]


def mistake(exercise, name):
    """The code of a catalogued mistake, for reuse (the sample class uses some)."""
    return next(m.code for m in MISTAKES if m.exercise == exercise and m.name == name)

# The tests each mistake is allowed to fail: the properties it breaks (test names without `test_`).
# A mistake that makes the function crash on ordinary inputs breaks every property that needs it.
FAILS = {
    # -- softmax
    ('softmax', 'no max subtraction'):
        ('rows_on_different_scales', 'survives_large_inputs'),
    ('softmax', 'global max instead of per-row'):
        ('rows_on_different_scales',),
    ('softmax', 'max without keepdims'):
        ('keeps_float32', 'leaves_input_unchanged', 'matches_softmax', 'respects_axis', 'returns_an_array_of_the_same_shape', 'rows_on_different_scales', 'slices_sum_to_one', 'survives_large_inputs'),
    ('softmax', 'axis argument ignored'):
        ('respects_axis',),
    ('softmax', "normalised by the whole array's sum"):
        ('matches_softmax', 'respects_axis', 'slices_sum_to_one'),
    ('softmax', 'modifies its input in place'):
        ('leaves_input_unchanged',),
    ('softmax', 'casts to float64'):
        ('keeps_float32',),
    # -- numpy_attention
    ('numpy_attention', 'K.T on batched inputs'):
        ('matches_torch_with_batch_dimensions', 'shapes_with_batch_dimensions'),
    ('numpy_attention', 'no scaling'):
        ('matches_torch_attention', 'matches_torch_with_batch_dimensions'),
    ('numpy_attention', 'softmax over the queries'):
        ('matches_torch_attention', 'matches_torch_with_batch_dimensions', 'weights_rows_sum_to_one'),
    ('numpy_attention', 'scaled by the value width'):
        ('matches_torch_attention', 'matches_torch_with_batch_dimensions'),
    ('numpy_attention', 'naive softmax inline'):
        ('survives_large_scores',),
    # -- sdpa
    ('sdpa', 'no scaling'):
        ('matches_reference_solution', 'matches_torch_attention', 'matches_torch_attention_with_mask'),
    ('sdpa', 'divides by d_k'):
        ('matches_reference_solution', 'matches_torch_attention', 'matches_torch_attention_with_mask'),
    ('sdpa', 'scales by d_v'):
        ('matches_reference_solution', 'matches_torch_attention', 'matches_torch_attention_with_mask'),
    ('sdpa', 'softmax over dim -2'):
        ('matches_reference_solution', 'matches_torch_attention', 'matches_torch_attention_with_mask', 'weights_rows_sum_to_one'),
    ('sdpa', 'transpose(1, 2) only works for 3-D'):
        ('batching_equals_looping', 'fully_masked_row_gives_zeros', 'gradients_reach_q_k_v', 'keeps_float32_and_float64', 'large_scores_stay_finite', 'mask_broadcasts_over_batch_and_heads', 'masked_weights_are_exactly_zero', 'masking_equals_dropping_the_keys', 'matches_torch_attention', 'matches_torch_attention_with_mask', 'shapes_with_any_leading_dims', 'weights_rows_sum_to_one'),
    ('sdpa', 'mask applied after the softmax'):
        ('masking_equals_dropping_the_keys', 'matches_reference_solution', 'matches_torch_attention_with_mask'),
    ('sdpa', 'inverted mask convention'):
        ('fully_masked_row_gives_zeros', 'masked_weights_are_exactly_zero', 'masking_equals_dropping_the_keys', 'matches_reference_solution', 'matches_torch_attention_with_mask'),
    ('sdpa', 'masked_fill result not assigned'):
        ('fully_masked_row_gives_zeros', 'masked_weights_are_exactly_zero', 'masking_equals_dropping_the_keys', 'matches_reference_solution', 'matches_torch_attention_with_mask'),
    ('sdpa', 'boolean mask added as a float'):
        ('fully_masked_row_gives_zeros', 'masked_weights_are_exactly_zero', 'masking_equals_dropping_the_keys', 'matches_reference_solution', 'matches_torch_attention_with_mask'),
    ('sdpa', 'detached scores'):
        ('gradients_reach_q_k_v',),
    ('sdpa', 'NumPy round trip'):
        ('gradients_reach_q_k_v',),
    ('sdpa', 'downcast to float32'):
        ('keeps_float32_and_float64', 'matches_torch_attention', 'matches_torch_attention_with_mask'),
    ('sdpa', 'NaN for fully masked rows'):
        ('fully_masked_row_gives_zeros',),
    ('sdpa', 'unstable hand-written softmax'):
        ('large_scores_stay_finite',),
    ('sdpa', 'assumes Sq == Sk'):
        ('batching_equals_looping', 'fully_masked_row_gives_zeros', 'gradients_reach_q_k_v', 'keeps_float32_and_float64', 'large_scores_stay_finite', 'mask_broadcasts_over_batch_and_heads', 'masked_weights_are_exactly_zero', 'masking_equals_dropping_the_keys', 'matches_reference_solution', 'matches_torch_attention', 'matches_torch_attention_with_mask', 'shapes_with_any_leading_dims', 'weights_rows_sum_to_one'),
    ('sdpa', 'in-place masked_fill_ on the softmax output'):
        ('gradients_reach_q_k_v',),
    ('sdpa', 'computes in float32, casts back'):
        ('matches_torch_attention', 'matches_torch_attention_with_mask'),
    # -- causal_mask
    ('causal_mask', 'upper triangle'):
        ('allows_keys_up_to_the_query', 'makes_attention_causal'),
    ('causal_mask', 'diagonal excluded'):
        ('allows_keys_up_to_the_query', 'diagonal_is_allowed'),
    ('causal_mask', 'float mask'):
        ('is_boolean_and_square',),
    ('causal_mask', 'cut from a fixed 16 x 16 buffer'):
        ('allows_keys_up_to_the_query',),
    ('causal_mask', 'blocked-positions convention'):
        ('allows_keys_up_to_the_query', 'diagonal_is_allowed', 'makes_attention_causal'),
    # -- padding_mask
    ('padding_mask', '<= instead of <'):
        ('allows_real_keys_only', 'padded_keys_do_not_change_outputs'),
    ('padding_mask', 'True marks padding'):
        ('allows_real_keys_only', 'full_length_allows_every_key', 'padded_keys_do_not_change_outputs'),
    ('padding_mask', 'returns [B, S]'):
        ('allows_real_keys_only', 'blocks_keys_not_queries', 'full_length_allows_every_key', 'is_boolean_with_broadcast_shape', 'padded_keys_do_not_change_outputs'),
    ('padding_mask', 'blocks queries instead of keys'):
        ('allows_real_keys_only', 'blocks_keys_not_queries', 'full_length_allows_every_key', 'is_boolean_with_broadcast_shape', 'padded_keys_do_not_change_outputs'),
    ('padding_mask', 'uses lengths.max() instead of max_len'):
        ('blocks_keys_not_queries',),
    # -- fix_causal_attention
    ('fix_causal_attention', 'mask == 0 keeps only the future'):
        ('is_causal', 'matches_causal_attention'),
    ('fix_causal_attention', 'tril boolean mask (blocks the past)'):
        ('is_causal', 'matches_causal_attention'),
    ('fix_causal_attention', 'mask not sliced to the length'):
        ('runs_and_returns_the_right_shape', 'sequences_shorter_than_the_context'),
    ('fix_causal_attention', 'mask removed to stop the crash'):
        ('is_causal', 'matches_causal_attention'),
    ('fix_causal_attention', 'functional dropout stays on in eval'):
        ('eval_mode_is_deterministic',),
    ('fix_causal_attention', 'scaled by the input width'):
        ('matches_causal_attention',),
    # -- param_counts
    ('param_counts', 'bias ignored'):
        ('counts_biases',),
    ('param_counts', 'true division gives floats'):
        ('counts_biases', 'split_heads'),
    ('param_counts', 'split heads counted once'):
        ('counts_biases', 'split_heads'),
    ('param_counts', 'no check of divisibility'):
        ('rejects_indivisible_d_model',),
    # -- heads
    ('heads', 'view without transpose'):
        ('split_heads_layout',),
    ('heads', 'features split as [d_k, H]'):
        ('split_heads_layout',),
    ('heads', 'merge without moving the head axis'):
        ('merge_heads_inverts_split', 'merge_heads_layout'),
    # -- mha
    ('mha', 'one projection shared by q, k, v'):
        ('gradients_reach_inputs_and_parameters', 'matches_reference_without_bias', 'matches_torch_cross_attention', 'matches_torch_multihead_attention', 'matches_torch_with_causal_mask'),
    ('mha', 'output projection missing'):
        ('gradients_reach_inputs_and_parameters', 'matches_reference_without_bias', 'matches_torch_cross_attention', 'matches_torch_multihead_attention', 'matches_torch_with_causal_mask'),
    ('mha', 'scaled by sqrt(d_model)'):
        ('matches_reference_without_bias', 'matches_torch_cross_attention', 'matches_torch_multihead_attention', 'matches_torch_with_causal_mask'),
    ('mha', 'bias flag ignored'):
        ('bias_flag', 'matches_reference_without_bias'),
    ('mha', 'assumes keys as long as queries'):
        ('cross_attention_shapes', 'gradients_reach_inputs_and_parameters', 'matches_reference_without_bias', 'matches_torch_cross_attention'),
    ('mha', 'no check of divisibility'):
        ('rejects_indivisible_d_model',),
    ('mha', 'heads merged without a transpose'):
        ('matches_reference_without_bias', 'matches_torch_cross_attention', 'matches_torch_multihead_attention', 'matches_torch_with_causal_mask'),
    # -- to_torch_mha
    ('to_torch_mha', 'batch_first left False'):
        ('returns_batch_first_multihead_attention',),
    ('to_torch_mha', 'keys stacked first'):
        ('matches_module_outputs', 'stacks_input_projections'),
    ('to_torch_mha', 'biases always on, never copied'):
        ('copies_output_projection', 'matches_module_outputs', 'stacks_input_projections', 'without_bias'),
    # -- causal_self_attention
    ('causal_self_attention', 'mask buffer not sliced'):
        ('dropout_acts_on_the_attention_weights', 'dropout_in_training_mode', 'eval_mode_is_deterministic', 'gradients_reach_input_and_parameters', 'is_causal', 'matches_torch_causal_attention', 'other_context_lengths', 'shapes'),
    ('causal_self_attention', 'fixed-size buffer, no length check'):
        ('mask_is_a_buffer', 'other_context_lengths', 'rejects_sequences_longer_than_the_context'),
    ('causal_self_attention', 'functional dropout in eval'):
        ('eval_mode_is_deterministic',),
    ('causal_self_attention', 'mask stored as a parameter'):
        ('mask_is_a_buffer',),
    ('causal_self_attention', 'returns the weights after dropout'):
        ('dropout_in_training_mode',),
    ('causal_self_attention', 'scaled by sqrt(d_model)'):
        ('matches_torch_causal_attention',),
    ('causal_self_attention', 'dropout on the output'):
        ('dropout_acts_on_the_attention_weights',),
    # -- train_model
    ('train_model', 'learning rate ignored'):
        ('uses_the_learning_rate',),
    ('train_model', 'losses kept as tensors'):
        ('returns_one_loss_per_step',),
    ('train_model', 'optimizer.step() forgotten'):
        ('learns_the_pattern', 'learns_with_one_head', 'loss_decreases', 'uses_the_learning_rate'),
    ('train_model', 'targets flattened in the wrong order'):
        ('learns_the_pattern', 'learns_with_one_head', 'loss_decreases'),
    ('train_model', 'backward before zero_grad'):
        ('learns_the_pattern', 'learns_with_one_head', 'loss_decreases', 'uses_the_learning_rate'),
    # -- head_similarity
    ('head_similarity', 'dot products without norms'):
        ('identical_heads_give_one', 'ignores_the_scale_of_a_map', 'matches_cosine_similarity'),
    ('head_similarity', '1 - cosine'):
        ('disjoint_heads_give_zero', 'identical_heads_give_one', 'matches_cosine_similarity'),
    ('head_similarity', 'normalised per query row'):
        ('matches_cosine_similarity',),
    ('head_similarity', 'pairs head i with head i only'):
        ('disjoint_heads_give_zero', 'identical_heads_give_one', 'ignores_the_scale_of_a_map', 'matches_cosine_similarity', 'shape_and_dtype'),
    # -- kv_cache
    ('kv_cache', 'cache never appended'):
        ('chunks_of_several_tokens', 'prompt_then_tokens', 'token_by_token_matches_full_attention'),
    ('kv_cache', 'chunk mask without the offset'):
        ('chunks_of_several_tokens', 'prompt_then_tokens', 'token_by_token_matches_full_attention'),
    ('kv_cache', 'no mask when using the cache'):
        ('chunks_of_several_tokens', 'prompt_then_tokens'),
    ('kv_cache', 'cache concatenated along the head axis'):
        ('chunks_of_several_tokens', 'keeps_float32', 'prompt_then_tokens', 'reset_starts_a_new_sequence', 'token_by_token_matches_full_attention'),
    ('kv_cache', 'reset forgets the position counter'):
        ('reset_starts_a_new_sequence',),
    ('kv_cache', 'reset_cache does nothing'):
        ('reset_starts_a_new_sequence',),
    # -- gqa
    ('gqa', 'repeat instead of repeat_interleave'):
        ('matches_torch_grouped_query_attention', 'with_causal_mask'),
    ('gqa', 'no check of the head counts'):
        ('rejects_bad_head_counts',),
    ('gqa', 'full-width key/value projections'):
        ('gradients_reach_input_and_parameters', 'matches_torch_grouped_query_attention', 'one_key_value_head', 'projection_shapes', 'weights_rows_sum_to_one', 'with_causal_mask'),
}

# Known debt: tests a mistake still fails although the property they state holds (a value test in
# another regime repeats the comparison).  Tolerated, counted apart, to be untangled.
STILL_ALSO_FAILS = {
    ('softmax', "normalised by the whole array's sum"): ('rows_on_different_scales', 'survives_large_inputs'),
    ('numpy_attention', 'softmax over the queries'): ('survives_large_scores',),
    ('head_similarity', 'dot products without norms'): ('disjoint_heads_give_zero',),
    ('head_similarity', '1 - cosine'): ('ignores_the_scale_of_a_map',),
    ('head_similarity', 'normalised per query row'): ('ignores_the_scale_of_a_map',),
}
