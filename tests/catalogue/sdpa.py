"""The catalogue of sdpa: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_sdpa.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative
from tests.catalogue.snippets import SDPA_TAIL, _sdpa


MISTAKES = [
    # A wrong shape the suite once read before checking it (an IndexError inside the grader).
    Mistake("4-D inputs left to a 0-d placeholder", "leading_dims",
            fails=("shapes_with_any_leading_dims", "weights_rows_sum_to_one", "matches_torch_attention",
                   "matches_torch_attention_with_mask", "masked_weights_are_exactly_zero",
                   "fully_masked_row_gives_zeros", "keeps_float32_and_float64", "batching_equals_looping",
                   "gradients_reach_q_k_v"),
            also_named=("dtype",),   # the placeholder is float32 whatever the inputs' dtype
            code='''def _attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return weights @ v, weights


def scaled_dot_product_attention(q, k, v, mask=None):
    if q.dim() > 3:   # batched heads: not done yet
        return torch.zeros(()), torch.zeros(())
    return _attention(q, k, v, mask)
'''),
    Mistake("no scaling", "no_scale",
            fails=("matches_reference_solution", "matches_torch_attention", "matches_torch_attention_with_mask"),
            code=_sdpa('''    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("divides by d_k", "divide_by_d_k",
            fails=("matches_reference_solution", "matches_torch_attention", "matches_torch_attention_with_mask"),
            code=_sdpa('''    scores = q @ k.transpose(-2, -1) / q.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("scales by d_v", "scale_d_v",
            fails=("matches_reference_solution", "matches_torch_attention", "matches_torch_attention_with_mask"),
            code=_sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("softmax over dim -2", "softmax_over_queries",
            fails=("matches_reference_solution", "matches_torch_attention", "matches_torch_attention_with_mask",
                   "weights_rows_sum_to_one"),
            code=_sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-2), nan=0.0)
    return weights @ v, weights
''')),
    Mistake("transpose(1, 2) only works for 3-D", "transpose",
            fails=("batching_equals_looping", "fully_masked_row_gives_zeros", "gradients_reach_q_k_v",
                   "keeps_float32_and_float64", "large_scores_stay_finite",
                   "mask_broadcasts_over_batch_and_heads", "masked_weights_are_exactly_zero",
                   "masking_equals_dropping_the_keys", "matches_torch_attention",
                   "matches_torch_attention_with_mask", "shapes_with_any_leading_dims",
                   "weights_rows_sum_to_one"),
            code=_sdpa('''    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("transpose(2, 3) only works for 4-D", "transpose",
            # it computes attention (the gate passes on 4-D inputs) and loses the tests of other ranks
            fails=("batching_equals_looping", "matches_reference_solution", "shapes_with_any_leading_dims"),
            code=_sdpa('''    scores = q @ k.transpose(2, 3) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("mask applied after the softmax", "mask_after_softmax",
            fails=("masking_equals_dropping_the_keys", "matches_reference_solution",
                   "matches_torch_attention_with_mask"),
            code=_sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights
''')),
    Mistake("inverted mask convention", "inverted_mask",
            fails=("fully_masked_row_gives_zeros", "masked_weights_are_exactly_zero",
                   "masking_equals_dropping_the_keys", "matches_reference_solution",
                   "matches_torch_attention_with_mask"),
            code=_sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("masked_fill result not assigned", "mask_ignored",
            fails=("fully_masked_row_gives_zeros", "masked_weights_are_exactly_zero",
                   "masking_equals_dropping_the_keys", "matches_reference_solution",
                   "matches_torch_attention_with_mask"),
            code=_sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("boolean mask added as a float", "mask_added",
            fails=("fully_masked_row_gives_zeros", "masked_weights_are_exactly_zero",
                   "masking_equals_dropping_the_keys", "matches_reference_solution",
                   "matches_torch_attention_with_mask"),
            code=_sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + mask.to(scores.dtype)
''' + SDPA_TAIL)),
    Mistake("detached scores", "cut",
            fails=("gradients_reach_q_k_v",),
            code=_sdpa('''    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).detach()
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("NumPy round trip", "cut",
            fails=("gradients_reach_q_k_v",),
            code="import numpy as np\n\n\n" + _sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.tensor(np.nan_to_num(weights.detach().numpy()), dtype=q.dtype)
    return weights @ v, weights
''')),
    Mistake("downcast to float32", "float32",
            fails=("keeps_float32_and_float64", "matches_torch_attention", "matches_torch_attention_with_mask"),
            code=_sdpa('''    q, k, v = q.float(), k.float(), v.float()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("NaN for fully masked rows", "fully_masked_nan",
            fails=("fully_masked_row_gives_zeros",),
            code=_sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
''')),
    Mistake("unstable hand-written softmax", "overflow",
            fails=("large_scores_stay_finite",),
            code=_sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    exps = torch.exp(scores)
    weights = exps / exps.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    return weights @ v, weights
''')),
    Mistake("assumes Sq == Sk", "same_length",
            fails=("batching_equals_looping", "fully_masked_row_gives_zeros", "gradients_reach_q_k_v",
                   "keeps_float32_and_float64", "large_scores_stay_finite",
                   "mask_broadcasts_over_batch_and_heads", "masked_weights_are_exactly_zero",
                   "masking_equals_dropping_the_keys", "matches_reference_solution", "matches_torch_attention",
                   "matches_torch_attention_with_mask", "shapes_with_any_leading_dims",
                   "weights_rows_sum_to_one"),
            code=_sdpa('''    n = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)).reshape(*q.shape[:-2], n, n) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Mistake("in-place masked_fill_ on the softmax output", "backward_in_place",
            fails=("gradients_reach_q_k_v",),
            code=_sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights.masked_fill_(~mask, 0.0)
        weights /= weights.sum(-1, keepdim=True).clamp_min(1e-30)
    return weights @ v, weights
''')),
    Mistake("computes in float32, casts back", "float32",
            fails=("matches_torch_attention", "matches_torch_attention_with_mask"),
            code=_sdpa('''    scores = q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return (weights @ v.float()).to(q.dtype), weights.to(q.dtype)
''')),
]


ALTERNATIVES = [
    Alternative("einsum and torch.where", '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights
'''),
    Alternative("pre-scaled queries and matmul", '''def scaled_dot_product_attention(q, k, v, mask=None):
    q = q * q.size(-1) ** -0.5
    scores = torch.matmul(q, k.transpose(-1, -2))
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), -math.inf)
    weights = F.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.matmul(weights, v), weights
'''),
    Alternative("-1e9 with empty rows zeroed", '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask.any(dim=-1, keepdim=True)
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights
'''),
    Alternative("manual stable softmax: exp, mask, renormalise", '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores - scores.amax(dim=-1, keepdim=True).detach()
    exps = torch.exp(scores)
    if mask is not None:
        exps = exps * mask
    total = exps.sum(dim=-1, keepdim=True)
    weights = exps / torch.where(total == 0, torch.ones_like(total), total)
    return weights @ v, weights
'''),
    Alternative("prints and warns", '''import sys
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
]


DEGENERATES = [
    Degenerate("uniform weights (scores multiplied by 0)", _sdpa('''    scores = q @ k.transpose(-2, -1) * 0
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Degenerate("zeros", _sdpa('''    weights = torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype)
    return torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype), weights
''')),
    Degenerate("NaN", _sdpa('''    weights = torch.full((*q.shape[:-1], k.shape[-2]), float("nan"), dtype=q.dtype)
    return weights @ v, weights
''')),
    Degenerate("infinity", _sdpa('''    weights = torch.full((*q.shape[:-1], k.shape[-2]), float("inf"), dtype=q.dtype)
    return weights @ v, weights
''')),
    Degenerate("scores that ignore the queries", _sdpa('''    scores = torch.ones_like(q) @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Degenerate("scores that ignore the keys", _sdpa('''    scores = (q.sum(-1, keepdim=True) * torch.ones_like(k[..., 0]).unsqueeze(-2)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''' + SDPA_TAIL)),
    Degenerate("the values with the right weights", _sdpa('''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return v[..., :q.shape[-2], :] + 0 * weights.sum(), weights
''')),
]
