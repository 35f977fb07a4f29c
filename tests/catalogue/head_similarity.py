"""The catalogue of head_similarity: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_head_similarity.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative


MISTAKES = [
    Mistake("dot products without norms", "no_norms",
            fails=("identical_heads_give_one", "ignores_the_scale_of_a_map", "matches_cosine_similarity"),
            also_fails=("disjoint_heads_give_zero",),
            code='''def head_similarity(weights):
    flat = weights.reshape(weights.shape[0], -1)
    return flat @ flat.T
'''),
    Mistake("1 - cosine", "distance",
            fails=("disjoint_heads_give_zero", "identical_heads_give_one", "matches_cosine_similarity"),
            also_fails=("ignores_the_scale_of_a_map",),
            code='''def head_similarity(weights):
    flat = F.normalize(weights.reshape(weights.shape[0], -1), dim=-1)
    return 1 - flat @ flat.T
'''),
    Mistake("normalised per query row", "per_row",
            fails=("matches_cosine_similarity",),
            also_fails=("ignores_the_scale_of_a_map",),
            code='''def head_similarity(weights):
    rows = weights / weights.norm(dim=-1, keepdim=True)
    return torch.einsum("itk,jtk->ij", rows, rows) / weights.shape[1]
'''),
    Mistake("pairs head i with head i only", "square",
            fails=("disjoint_heads_give_zero", "identical_heads_give_one", "ignores_the_scale_of_a_map",
                   "matches_cosine_similarity", "shape_and_dtype"),
            code='''def head_similarity(weights):
    flat = weights.reshape(weights.shape[0], -1)
    return F.cosine_similarity(flat, flat, dim=-1)
'''),
]


ALTERNATIVES = [
    Alternative("F.normalize and broadcasting cosine", '''def head_similarity(weights):
    flat = F.normalize(weights.flatten(1), dim=1)
    return F.cosine_similarity(flat.unsqueeze(1), flat.unsqueeze(0), dim=-1)
'''),
]


DEGENERATES = [
    Degenerate("the identity", '''def head_similarity(weights):
    return torch.eye(weights.shape[0], dtype=weights.dtype)
'''),
    Degenerate("ones", '''def head_similarity(weights):
    return torch.ones(weights.shape[0], weights.shape[0], dtype=weights.dtype)
'''),
    Degenerate("zeros", '''def head_similarity(weights):
    return torch.zeros(weights.shape[0], weights.shape[0], dtype=weights.dtype)
'''),
]
