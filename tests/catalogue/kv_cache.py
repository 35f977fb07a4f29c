"""The catalogue of kv_cache: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_kv_cache.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative
from tests.catalogue.snippets import CACHE, CACHED_INIT, UNIFORM, _cached_forward


MISTAKES = [
    Mistake("cache never appended", "never_appended",
            fails=("chunks_of_several_tokens", "prompt_then_tokens", "token_by_token_matches_full_attention"),
            code=_cached_forward('''        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
''')),
    Mistake("chunk mask without the offset", "no_offset",
            fails=("chunks_of_several_tokens", "prompt_then_tokens", "token_by_token_matches_full_attention"),
            code=_cached_forward('''        if use_cache:
            if self.cached_k is not None:
                k = torch.cat([self.cached_k, k], dim=2)
                v = torch.cat([self.cached_v, v], dim=2)
            self.cached_k, self.cached_v = k, v
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
''')),
    Mistake("no mask when using the cache", "no_mask",
            fails=("chunks_of_several_tokens", "prompt_then_tokens"),
            code=_cached_forward('''        mask = None
        if use_cache:
            if self.cached_k is not None:
                k = torch.cat([self.cached_k, k], dim=2)
                v = torch.cat([self.cached_v, v], dim=2)
            self.cached_k, self.cached_v = k, v
        else:
            mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
''')),
    Mistake("cache concatenated along the head axis", "layout",
            fails=("chunks_of_several_tokens", "keeps_float32", "prompt_then_tokens",
                   "reset_starts_a_new_sequence", "token_by_token_matches_full_attention"),
            code=_cached_forward(CACHE.replace("], dim=2)", "], dim=1)"))),
    Mistake("reset forgets the position counter", "reset",
            fails=("reset_starts_a_new_sequence",),
            code=CACHED_INIT.replace(
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
    Mistake("reset_cache does nothing", "reset",
            fails=("reset_starts_a_new_sequence",),
            code=CACHED_INIT.replace(
        "    def reset_cache(self):\n        self.cached_k = self.cached_v = None\n",
        "    def reset_cache(self):\n        if not hasattr(self, 'cached_k'):\n            self.cached_k = self.cached_v = None\n")
            + _cached_forward(CACHE)[len(CACHED_INIT):]),
]


ALTERNATIVES = [
    Alternative("lists of chunks, mask from positions", CACHED_INIT.replace(
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
]


DEGENERATES = [
    Degenerate("uniform weights (scores multiplied by 0)", UNIFORM + _cached_forward(CACHE).replace("attend(q, k, v, mask)", "uniform_attention(q, k, v, mask)")),
    Degenerate("the input", _cached_forward(CACHE).replace("context, _ = attend(q, k, v, mask)\n        return self.W_o(merge_heads(context))", "return x.clone()")),
    Degenerate("zeros", _cached_forward(CACHE).replace("context, _ = attend(q, k, v, mask)\n        return self.W_o(merge_heads(context))", "return torch.zeros_like(x)")),
]
