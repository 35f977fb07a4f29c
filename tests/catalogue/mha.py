"""The catalogue of mha: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_mha.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative
from tests.catalogue.heads import MISTAKES as HEADS_MISTAKES
from tests.catalogue.snippets import MHA_FORWARD, MHA_INIT, MHA_UNIFORM_FORWARD, UNIFORM, _mha_returns


MISTAKES = [
    Mistake("one projection shared by q, k, v", "shared_projection",
            fails=("gradients_reach_inputs_and_parameters", "matches_reference_without_bias",
                   "matches_torch_cross_attention", "matches_torch_multihead_attention",
                   "matches_torch_with_causal_mask"),
            code=MHA_INIT + '''
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_q(key), self.num_heads)
        v = split_heads(self.W_q(value), self.num_heads)
        context, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        return self.W_o(merge_heads(context)), weights
'''),
    Mistake("output projection missing", "no_output_projection",
            fails=("gradients_reach_inputs_and_parameters", "matches_reference_without_bias",
                   "matches_torch_cross_attention", "matches_torch_multihead_attention",
                   "matches_torch_with_causal_mask"),
            code=MHA_INIT + '''
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        context, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        return merge_heads(context), weights
'''),
    Mistake("scaled by sqrt(d_model)", "scale_d_model",
            fails=("matches_reference_without_bias", "matches_torch_cross_attention",
                   "matches_torch_multihead_attention", "matches_torch_with_causal_mask"),
            code=MHA_INIT + '''
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads) * math.sqrt(self.d_k) / math.sqrt(self.d_model)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        context, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        return self.W_o(merge_heads(context)), weights
'''),
    # as a public multi-head attention of an NLP library has it: nn.Softmax(dim=2) kept from [B, Sq, Sk] scores
    Mistake("softmax over dim=2 of the per-head scores", "softmax_over_queries",
            fails=("matches_reference_without_bias", "matches_torch_cross_attention",
                   "matches_torch_multihead_attention", "matches_torch_with_causal_mask", "weights_rows_sum_to_one"),
            code=MHA_INIT + '''
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=2)
        return self.W_o(merge_heads(weights @ v)), weights
'''),
    Mistake("bias flag ignored", "bias",
            fails=("bias_flag", "matches_reference_without_bias"),
            code=MHA_INIT.replace("bias=bias", "bias=True") + MHA_FORWARD),
    Mistake("assumes keys as long as queries", "cross_attention",
            fails=("cross_attention_shapes", "gradients_reach_inputs_and_parameters",
                   "matches_reference_without_bias", "matches_torch_cross_attention"),
            code=MHA_INIT + '''
    def forward(self, query, key, value, mask=None):
        B, S, D = query.shape
        q = self.W_q(query).view(B, S, self.num_heads, self.d_k).transpose(1, 2)
        k = self.W_k(key).view(B, S, self.num_heads, self.d_k).transpose(1, 2)
        v = self.W_v(value).view(B, S, self.num_heads, self.d_k).transpose(1, 2)
        context, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        return self.W_o(merge_heads(context)), weights
'''),
    Mistake("no check of divisibility", "divisible",
            fails=("rejects_indivisible_d_model",),
            code=MHA_INIT.replace(
        '''        if d_model % num_heads != 0:
            raise ValueError("d_model must be divisible by num_heads")
''', "") + MHA_FORWARD),
    Mistake("heads merged without a transpose", "merge_without_transpose",
            fails=("matches_reference_without_bias", "matches_torch_cross_attention",
                   "matches_torch_multihead_attention", "matches_torch_with_causal_mask"),
            code=MHA_INIT + '''
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        context, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        B, H, S, d_k = context.shape
        return self.W_o(context.reshape(B, S, H * d_k)), weights
'''),
]


ALTERNATIVES = [
    Alternative("loop over heads", MHA_INIT + '''
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
]
# A slip of split_heads or merge_heads, an exercise of their own (heads), is charged there alone: a right
# MultiHeadAttention on the student's own wrong split_heads or merge_heads keeps its points (test_mha.BUILT_ON).
ALTERNATIVES += [
    Alternative(f"a right MultiHeadAttention on {slip.name!r} (the heads exercise's own slip)", slip.code + "\n\n" + MHA_INIT
                + MHA_FORWARD) for slip in HEADS_MISTAKES
]


DEGENERATES = [
    Degenerate("uniform weights (scores multiplied by 0)", UNIFORM + MHA_INIT + MHA_UNIFORM_FORWARD),
    Degenerate("zeros", _mha_returns("torch.zeros_like(query)", "torch.zeros(B, self.num_heads, Sq, Sk, dtype=query.dtype)")),
    Degenerate("the values", _mha_returns("value[:, :Sq] + 0 * self.W_o(query)",
                                                  "torch.ones(B, self.num_heads, Sq, Sk, dtype=query.dtype) / Sk")),
    Degenerate("NaN", _mha_returns("torch.full_like(query, float('nan'))",
                                           "torch.full((B, self.num_heads, Sq, Sk), float('nan'), dtype=query.dtype)")),
]
