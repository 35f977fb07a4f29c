"""Code shared by the catalogue's answers: the parts of the reference solutions that an answer keeps
while it changes one thing."""


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
        self.reset_cache()

    def reset_cache(self):
        self.cached_k = self.cached_v = None
'''

GQA_CACHE = '''        if use_cache:
            past = 0 if self.cached_k is None else self.cached_k.shape[2]
            if past:
                k = torch.cat([self.cached_k, k], dim=2)
                v = torch.cat([self.cached_v, v], dim=2)
            self.cached_k, self.cached_v = k, v
            mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(diagonal=past)
'''


def _gqa_forward(expand, cache_after_the_repeat=False):
    """The reference's class with `expand` (the repeat of the key/value heads for their groups) in place;
    cache_after_the_repeat: the classic mistake of caching the repeated heads."""
    steps = expand + GQA_CACHE if cache_after_the_repeat else GQA_CACHE + expand
    return GQA_INIT + '''
    def forward(self, x, mask=None, use_cache=False):
        group = self.num_heads // self.num_kv_heads
        q = split_heads(self.W_q(x), self.num_heads)
        k = split_heads(self.W_k(x), self.num_kv_heads)
        v = split_heads(self.W_v(x), self.num_kv_heads)
''' + steps + '''        context, weights = attend(q, k, v, mask)
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
