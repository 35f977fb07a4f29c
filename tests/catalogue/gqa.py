"""The catalogue of gqa: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_gqa.py, and the tests it may fail), correct alternatives,
degenerate answers and an answer that games the count of what its cache keeps."""

from tests.catalogue.entries import Degenerate, Gaming, Mistake, Alternative, edited
from tests.catalogue.snippets import GQA_EXPAND, UNIFORM, _gqa_forward


MISTAKES = [
    Mistake("repeat instead of repeat_interleave", "repeat",
            fails=("matches_torch_grouped_query_attention", "with_causal_mask"),
            code=_gqa_forward('''        k = k.repeat(1, group, 1, 1)
        v = v.repeat(1, group, 1, 1)
''')),
    Mistake("no check of the head counts", "head_counts",
            fails=("rejects_bad_head_counts",),
            code=edited(_gqa_forward(GQA_EXPAND), '''        if d_model % num_heads or num_heads % num_kv_heads:
            raise ValueError("bad head counts")
''', "")),
    Mistake("full-width key/value projections", "kv_width",
            fails=("cache_holds_the_unrepeated_heads", "gradients_reach_input_and_parameters",
                   "matches_torch_grouped_query_attention", "one_key_value_head", "projection_shapes",
                   "weights_rows_sum_to_one", "with_causal_mask"),
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
    Mistake("the cache holding the repeated heads (cached after repeat_interleave)", "cached_repeated",
            fails=("cache_holds_the_unrepeated_heads",),
            code=_gqa_forward(GQA_EXPAND, cache_after_the_repeat=True)),
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


GAMING = [
    # The repeated heads cached where the count of the module's own tensors does not look: a global dict.
    Gaming("the repeated heads cached outside the module, in a global",
           "_CACHES = {}\n\n" + edited(_gqa_forward(GQA_EXPAND, cache_after_the_repeat=True),
                                       "        self.cached_k = self.cached_v = None\n",
                                       "        _CACHES[id(self)] = (None, None)\n",
                                       "        if use_cache:\n",
                                       "        if use_cache:\n            self.cached_k, self.cached_v = _CACHES[id(self)]\n",
                                       "            self.cached_k, self.cached_v = k, v\n",
                                       "            _CACHES[id(self)] = (k, v)\n            self.cached_k = self.cached_v = None\n"),
           loses=("cache_holds_the_unrepeated_heads",), says="fewer than the keys and values"),
]
