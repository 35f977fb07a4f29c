"""The catalogue of fix_causal_attention: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_fix_causal_attention.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative
from tests.catalogue.snippets import CAUSAL_ATTENTION_BUFFER, CAUSAL_ATTENTION_INIT


MISTAKES = [
    Mistake("mask == 0 keeps only the future", "only_future_nan",
            fails=("is_causal", "matches_causal_attention"),
            code=CAUSAL_ATTENTION_INIT + '''        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, t, _ = x.shape
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        scores = scores.masked_fill(self.mask[:t, :t] == 0, float("-inf"))
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return self.dropout(weights) @ values
'''),
    Mistake("tril boolean mask (blocks the past)", "only_future",
            fails=("is_causal", "matches_causal_attention"),
            code=CAUSAL_ATTENTION_INIT + '''        self.register_buffer("mask", torch.tril(torch.ones(context_length, context_length)).bool())

    def forward(self, x):
        b, t, _ = x.shape
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        scores = scores.masked_fill(self.mask[:t, :t], float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1))
        return self.dropout(weights) @ values
'''),
    Mistake("mask not sliced to the length", "buffer",
            fails=("runs_and_returns_the_right_shape", "sequences_shorter_than_the_context"),
            code=CAUSAL_ATTENTION_INIT + '''        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        scores = scores.masked_fill(self.mask, float("-inf"))
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return self.dropout(weights) @ values
'''),
    Mistake("mask removed to stop the crash", "no_mask",
            fails=("is_causal", "matches_causal_attention"),
            code=CAUSAL_ATTENTION_INIT + '''
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return self.dropout(weights) @ values
'''),
    Mistake("functional dropout stays on in eval", "dropout",
            fails=("eval_mode_is_deterministic",),
            code='''class CausalAttention(nn.Module):
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
    Mistake("scaled by the input width", "scale_d_in",
            fails=("matches_causal_attention",),
            code=CAUSAL_ATTENTION_INIT + '''        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x):
        t = x.shape[1]
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        scores = scores.masked_fill(self.mask[:t, :t], float("-inf"))
        weights = torch.softmax(scores / x.shape[-1] ** 0.5, dim=-1)
        return self.dropout(weights) @ values
'''),
]


ALTERNATIVES = [
    Alternative("additive -1e9 mask on a float buffer", CAUSAL_ATTENTION_INIT + '''        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        t = x.shape[1]
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2) + self.mask[:t, :t] * -1e9
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return self.dropout(weights) @ values
'''),
    Alternative("bool conversion at use", CAUSAL_ATTENTION_INIT + '''        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(1, 2)
        scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return self.dropout(weights) @ values
'''),
]


DEGENERATES = [
    Degenerate("uniform weights (scores multiplied by 0)", CAUSAL_ATTENTION_INIT + CAUSAL_ATTENTION_BUFFER + '''        scores = (q @ k.transpose(1, 2) * 0).masked_fill(self.mask[:T, :T], float("-inf"))
        return self.dropout(torch.softmax(scores, dim=-1)) @ v
'''),
    Degenerate("the value projection", CAUSAL_ATTENTION_INIT + CAUSAL_ATTENTION_BUFFER + '''        return v
'''),
    Degenerate("zeros", CAUSAL_ATTENTION_INIT + CAUSAL_ATTENTION_BUFFER + '''        return torch.zeros_like(v)
'''),
    Degenerate("NaN", CAUSAL_ATTENTION_INIT + CAUSAL_ATTENTION_BUFFER + '''        return torch.full_like(v, float("nan"))
'''),
]
