"""The catalogue of gqa: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_gqa.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative
from tests.catalogue.snippets import GQA_EXPAND, GQA_INIT, UNIFORM, _gqa_forward


MISTAKES = [
    Mistake("repeat instead of repeat_interleave", "repeat",
            fails=("matches_torch_grouped_query_attention", "with_causal_mask"),
            code=_gqa_forward('''        k = k.repeat(1, group, 1, 1)
        v = v.repeat(1, group, 1, 1)
''')),
    Mistake("no check of the head counts", "head_counts",
            fails=("rejects_bad_head_counts",),
            code=GQA_INIT.replace(
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
    Mistake("full-width key/value projections", "kv_width",
            fails=("gradients_reach_input_and_parameters", "matches_torch_grouped_query_attention",
                   "one_key_value_head", "projection_shapes", "weights_rows_sum_to_one", "with_causal_mask"),
            code='''class GroupedQueryAttention(nn.Module):
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


ALTERNATIVES = [
    Alternative("expand and reshape", _gqa_forward('''        B, H_kv, T, d_k = k.shape
        k = k[:, :, None].expand(B, H_kv, group, T, d_k).reshape(B, H_kv * group, T, d_k)
        v = v[:, :, None].expand(B, H_kv, group, T, d_k).reshape(B, H_kv * group, T, d_k)
''')),
]


DEGENERATES = [
    Degenerate("uniform weights (scores multiplied by 0)", UNIFORM + _gqa_forward(GQA_EXPAND).replace("attend(q, k, v, mask)", "uniform_attention(q, k, v, mask)")),
    Degenerate("the input", _gqa_forward(GQA_EXPAND).replace("return self.W_o(merge_heads(context)), weights",
                                                                   "return x.clone(), weights")),
    Degenerate("zeros", _gqa_forward(GQA_EXPAND).replace("return self.W_o(merge_heads(context)), weights",
                                                               "return torch.zeros_like(x), torch.zeros_like(weights)")),
]
