"""The catalogue of causal_self_attention: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_causal_self_attention.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative
from tests.catalogue.snippets import CSA_FORWARD_HEAD, CSA_INIT, _csa_returns


MISTAKES = [
    Mistake("mask buffer not sliced", "not_sliced",
            fails=("dropout_acts_on_the_attention_weights", "dropout_in_training_mode",
                   "eval_mode_is_deterministic", "gradients_reach_input_and_parameters", "is_causal",
                   "matches_torch_causal_attention", "other_context_lengths", "shapes"),
            code=CSA_INIT + CSA_FORWARD_HEAD + '''        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).masked_fill(~self.causal, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (self.dropout(weights) @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''),
    Mistake("fixed-size buffer, no length check", "fixed_buffer",
            fails=("mask_is_a_buffer", "other_context_lengths", "rejects_sequences_longer_than_the_context"),
            code='''class CausalSelfAttention(nn.Module):
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
    Mistake("functional dropout in eval", "dropout_module",
            fails=("eval_mode_is_deterministic",),
            code=CSA_INIT + CSA_FORWARD_HEAD + '''        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).masked_fill(~self.causal[:T, :T], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (F.dropout(weights, self.dropout.p) @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''),
    Mistake("mask stored as a parameter", "mask_parameter",
            fails=("mask_is_a_buffer",),
            code=CSA_INIT.replace(
        'self.register_buffer("causal", torch.ones(context_length, context_length, dtype=torch.bool).tril())',
        'self.causal = nn.Parameter(torch.ones(context_length, context_length).tril())') + CSA_FORWARD_HEAD + '''        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).masked_fill(self.causal[:T, :T] == 0, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (self.dropout(weights) @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''),
    Mistake("returns the weights after dropout", "weights_before_dropout",
            fails=("dropout_in_training_mode",),
            code=CSA_INIT + CSA_FORWARD_HEAD + '''        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).masked_fill(~self.causal[:T, :T], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))
        out = (weights @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''),
    Mistake("scaled by sqrt(d_model)", "scale_d_model",
            fails=("matches_torch_causal_attention",),
            code=CSA_INIT + CSA_FORWARD_HEAD + '''        scores = (q @ k.transpose(-2, -1) / math.sqrt(D)).masked_fill(~self.causal[:T, :T], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (self.dropout(weights) @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''),
    Mistake("dropout on the output", "dropout_on_output",
            fails=("dropout_acts_on_the_attention_weights",),
            code=CSA_INIT + CSA_FORWARD_HEAD + '''        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).masked_fill(~self.causal[:T, :T], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(B, T, D)
        return self.dropout(self.W_o(out)), weights
'''),
]


ALTERNATIVES = [
    Alternative("float buffer, torch.where, -1e9", '''class CausalSelfAttention(nn.Module):
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
]


DEGENERATES = [
    Degenerate("uniform weights (scores multiplied by 0)", CSA_INIT + CSA_FORWARD_HEAD + '''        scores = (q @ k.transpose(-2, -1) * 0).masked_fill(~self.causal[:T, :T], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (self.dropout(weights) @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''),
    Degenerate("the input", _csa_returns("x + 0 * self.dropout(v).sum()",
                                                                  "self.causal[:T, :T] / self.causal[:T, :T].sum(-1, keepdim=True)")),
    Degenerate("zeros", _csa_returns("torch.zeros_like(x)", "torch.zeros(B, self.num_heads, T, T, dtype=x.dtype)")),
    Degenerate("NaN", _csa_returns("torch.full_like(x, float('nan'))",
                                                            "torch.full((B, self.num_heads, T, T), float('nan'), dtype=x.dtype)")),
]
