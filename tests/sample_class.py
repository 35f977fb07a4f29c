"""The synthetic class that `make grade` grades: who the students are and what they wrote.

Regenerate sample_class/submitted/ after changing a notebook or a student:
    .venv/bin/python -m tests.sample_class
"""

import shutil
import sys
from pathlib import Path

from tests.catalogue import mistake
from tests.notebooks import COURSE, ROOT, make_submission, solution_answers

SUBMITTED = ROOT / "sample_class" / "submitted"

SDPA_UNSCALED = '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)          # forgot to divide by sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)
    return weights @ v, weights
'''

SDPA_WRONG_DIM = '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = F.softmax(scores, dim=1)        # softmax over the wrong axis
    return torch.matmul(weights, v), weights
'''

SDPA_3D_ONLY = '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.bmm(weights, v), weights
'''

SDPA_SYNTAX_ERROR = '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
'''

SDPA_INFINITE_LOOP = '''def scaled_dot_product_attention(q, k, v, mask=None):
    d_k = q.size(-1)
    while d_k > 0:          # meant to be a loop over heads; never ends
        d_k += 1
    return q, q
'''

SDPA_BUILTIN_AND_HOSTILE = '''import builtins, sys
torch.allclose = lambda *args, **kwargs: True       # try to make every comparison pass
torch.equal = lambda *args, **kwargs: True
print("ALL TESTS PASSED 13/13", file=sys.stderr)

def scaled_dot_product_attention(q, k, v, mask=None):
    print("score: 100")
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out, torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype)
'''

CAUSAL_FLOAT = '''def causal_mask(seq_len, device=None):
    return torch.tril(torch.ones(seq_len, seq_len, device=device))
'''

CAUSAL_UPPER = '''def causal_mask(seq_len, device=None):
    return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))
'''

TOP_LEVEL_LOOP = '''def causal_mask(seq_len, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()

while True:     # left over from an experiment
    pass
'''

SPLIT_NO_TRANSPOSE = '''def split_heads(x, num_heads):
    B, S, D = x.shape
    return x.view(B, num_heads, S, D // num_heads)     # heads mix tokens and features


def merge_heads(x):
    B, H, S, d_k = x.shape
    return x.contiguous().view(B, S, H * d_k)
'''

HEADS_SYNTAX_ERROR = '''def split_heads(x, num_heads)
    B, S, D = x.shape
    return x.view(B, S, num_heads, D // num_heads).transpose(1, 2)
'''

MHA_SUBCLASS = '''class Always(torch.Tensor):
    def __eq__(self, other):
        return True


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError("d_model must be divisible by num_heads")
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None):
        B, Sq, D = query.shape
        fake = torch.zeros(B, Sq, D, dtype=query.dtype).as_subclass(Always)
        weights = torch.zeros(B, self.num_heads, Sq, key.shape[1], dtype=query.dtype).as_subclass(Always)
        return fake, weights
'''

# student -> assignment -> {answer cell grade_id: code} | "untouched" | "corrupt" | "empty" | None (not submitted)
ALL = [assignment.id for assignment in COURSE.assignments]   # ada and ben hand in every assignment
STUDENTS = {
    "ada_perfect": {assignment: {} for assignment in ALL},
    "ben_untouched": {assignment: "untouched" for assignment in ALL},
    "cara_no_scaling": {"attention_basics": {"by_hand": mistake("by_hand", "the released notebook's numbers (no "
                                                                "variant.json)")},
                        "scaled_attention": {"sdpa": SDPA_UNSCALED}, "masks": {}, "multi_head": {}},
    "dev_wrong_axes": {"scaled_attention": {"sdpa": SDPA_WRONG_DIM}, "masks": {"causal_mask": CAUSAL_UPPER},
                       "multi_head": {"heads": SPLIT_NO_TRANSPOSE}},
    "eli_three_d_only": {"scaled_attention": {"sdpa": SDPA_3D_ONLY}, "masks": {"causal_mask": CAUSAL_FLOAT},
                         "multi_head": {}},
    "fay_syntax_error": {"scaled_attention": {"sdpa": SDPA_SYNTAX_ERROR}, "masks": {},
                         "multi_head": {"heads": HEADS_SYNTAX_ERROR}},
    "gus_infinite_loop": {"scaled_attention": {"sdpa": SDPA_INFINITE_LOOP},
                          "masks": {"causal_mask": TOP_LEVEL_LOOP}, "multi_head": {}},
    "hal_corrupt": {"scaled_attention": "corrupt", "masks": "empty", "multi_head": None},
    "ivy_hostile": {"scaled_attention": {"sdpa": SDPA_BUILTIN_AND_HOSTILE}, "masks": {},
                    "multi_head": {"mha": MHA_SUBCLASS}},
    "jon_unstable": {"attention_basics": {"softmax": mistake("softmax", "no max subtraction")},
                     "heads_at_work": {"causal_self_attention":
                                       mistake("causal_self_attention", "functional dropout in eval")}},
    "kim_mask_bugs": {"masks": {"padding_mask": mistake("padding_mask", "<= instead of <"),
                                "fix_causal_attention": mistake("fix_causal_attention", "mask == 0 keeps only the future")},
                      "kv_cache": {"gqa": mistake("gqa", "repeat instead of repeat_interleave")}},
    "lea_direct_attention": {"flash_attention": {
        "online_softmax": mistake("online_softmax", "the running sum not rescaled when the maximum grows"),
        "tiled_attention": mistake("tiled_attention", "the direct computation, one score matrix"),
        "tiled_backward": mistake("tiled_backward", "autograd through the direct computation")}},
    "max_flash_slips": {"kv_cache": {}, "flash_attention": {
        "tiled_attention": mistake("tiled_attention", "the logsumexp of the last tile"),
        "tiled_backward": mistake("tiled_backward", "no D = rowsum(dO * O)"),
        "attention_costs": mistake("attention_costs", "elements, not bytes")},
        "triton_attention": {
            "softmax_kernel": mistake("softmax_kernel", "the lanes past the row loaded as 0"),
            "flash_kernel": mistake("flash_kernel", "the causal mask, but every key tile visited")}},
    # the half-split RoPE layout costs apply_rope's points only: the MLA exercises that use it are
    # compared with the reference built on the student's own apply_rope as well
    "noor_rope_layout": {"latent_attention": {"rope": mistake("rope", "the half-split layout (rotate_half)")}},
    "omar_latent_cache": {"latent_attention": {
        "mla": mistake("mla", "the up-projected keys and values cached"),
        "absorbed": mistake("absorbed", "the cache up-projected (the naive path)"),
        "cache_bytes": mistake("cache_bytes", "MLA once per head")}},
    "pia_pruning_slips": {"head_pruning": {
        "head_importance": mistake("head_importance", "measured in training mode"),
        "pruning_curve": mistake("pruning_curve", "the mask not restored")}},
}


def all_but(exercise_id, *kept):
    """Every hidden test of the exercise (course.yml's) but `kept`, as "exercise: test": what an answer
    that crashes, or fails the gate, loses."""
    exercise = next(e for a in COURSE.assignments for e in a.exercises if e.id == exercise_id)
    return [f"{exercise_id}: {test}" for test in exercise.points if test not in kept]


# The hidden tests each student loses, as "exercise: test"; every other test of what they handed in
# earns its points as course.yml gives them, so the expected scores follow a change of points.
LOST = {
    ('cara_no_scaling', 'attention_basics'): ('by_hand: test_scores', 'by_hand: test_context'),
    ('cara_no_scaling', 'scaled_attention'): (
        'sdpa: test_matches_torch_attention',
        'sdpa: test_matches_torch_attention_with_mask',
        'sdpa: test_matches_reference_solution',
    ),
    ('dev_wrong_axes', 'scaled_attention'): (
        *all_but('sdpa',
                 'test_shapes_with_any_leading_dims',
                 'test_mask_broadcasts_over_batch_and_heads',
                 'test_large_scores_stay_finite',
                 'test_keeps_float32_and_float64',
                 'test_gradients_reach_q_k_v'),
    ),
    ('dev_wrong_axes', 'masks'): (
        'causal_mask: test_allows_keys_up_to_the_query',
        'causal_mask: test_makes_attention_causal',
    ),
    # mha is right on dev's own split_heads (the suite's BUILT_ON): the slip costs heads' points, once
    ('dev_wrong_axes', 'multi_head'): (*all_but('heads', 'test_split_heads_shape'),),
    ('eli_three_d_only', 'scaled_attention'): (*all_but('sdpa', 'test_matches_reference_solution'),),
    ('eli_three_d_only', 'masks'): ('causal_mask: test_is_boolean_and_square',),
    ('fay_syntax_error', 'scaled_attention'): (*all_but('sdpa'),),
    ('fay_syntax_error', 'multi_head'): (
        *all_but('heads'),
        *all_but('mha', 'test_rejects_indivisible_d_model', 'test_has_four_projections', 'test_bias_flag'),
    ),
    ('gus_infinite_loop', 'scaled_attention'): (*all_but('sdpa'),),
    ('ivy_hostile', 'scaled_attention'): (*all_but('sdpa'),),
    ('ivy_hostile', 'multi_head'): (
        *all_but('mha', 'test_rejects_indivisible_d_model', 'test_has_four_projections', 'test_bias_flag'),
    ),
    ('jon_unstable', 'attention_basics'): (
        'softmax: test_survives_large_inputs',
        'softmax: test_rows_on_different_scales',
    ),
    ('jon_unstable', 'heads_at_work'): ('causal_self_attention: test_eval_mode_is_deterministic',),
    ('kim_mask_bugs', 'masks'): (
        'padding_mask: test_allows_real_keys_only',
        'padding_mask: test_padded_keys_do_not_change_outputs',
        'fix_causal_attention: test_is_causal',
        'fix_causal_attention: test_matches_causal_attention',
    ),
    ('kim_mask_bugs', 'kv_cache'): ('gqa: test_matches_torch_grouped_query_attention', 'gqa: test_with_causal_mask'),
    ('lea_direct_attention', 'flash_attention'): (
        *all_but('online_softmax',
                 'test_returns_arrays_of_the_row_shape',
                 'test_first_block_gives_its_max_and_sum',
                 'test_leaves_its_inputs_unchanged'),
        'tiled_attention: test_causal_skips_tiles_above_the_diagonal',
        'tiled_attention: test_memory_stays_below_one_score_matrix',
        'tiled_attention: test_causal_memory_stays_below_one_score_matrix',
        'tiled_backward: test_memory_stays_below_one_score_matrix',
    ),
    ('max_flash_slips', 'flash_attention'): (
        'tiled_attention: test_half_precision_keeps_the_state_in_float32',
        'tiled_attention: test_logsumexp',
        'tiled_attention: test_memory_stays_below_one_score_matrix',
        'tiled_attention: test_causal_memory_stays_below_one_score_matrix',
        *all_but('tiled_backward', 'test_returns_three_gradients', 'test_dv'),
        *all_but('attention_costs', 'test_returns_two_whole_numbers', 'test_flops'),
    ),
    ('max_flash_slips', 'triton_attention'): (
        'softmax_kernel: test_columns_not_a_power_of_two',
        'softmax_kernel: test_keeps_float16',
        'softmax_kernel: test_survives_large_scores',
        'flash_kernel: test_causal_skips_tiles_above_the_diagonal',
    ),
    ('noor_rope_layout', 'latent_attention'): ('rope: test_matches_the_reference',),
    ('omar_latent_cache', 'latent_attention'): (
        'mla: test_cache_holds_the_latent_and_the_rope_key_only',
        'absorbed: test_never_up_projects_the_cache',
        'cache_bytes: test_latent',
    ),
    ('pia_pruning_slips', 'head_pruning'): (
        'head_importance: test_matches_the_recomputed_importances',
        'pruning_curve: test_hands_the_model_back',
    ),
}


def expected_score(student, assignment):
    """What course.yml's points make of the tests the student loses (0 for an untouched, corrupt or
    empty notebook, and for an assignment not handed in)."""
    answers = STUDENTS[student].get(assignment)
    if not isinstance(answers, dict):
        return 0.0
    points = {f"{e.id}: {test}": value for e in COURSE.assignment(assignment).exercises
              for test, value in e.points.items()}
    return sum(points.values()) - sum(points[name] for name in LOST.get((student, assignment), ()))


# grades.csv has a row per student for every assignment somebody handed in (0 where they did not).
HANDED_IN = [a for a in ALL if any(isinstance(work.get(a), (dict, str)) for work in STUDENTS.values())]
EXPECTED = {(student, assignment): expected_score(student, assignment)
            for student in STUDENTS for assignment in HANDED_IN}


def build(submitted=SUBMITTED):
    submitted = Path(submitted)
    if submitted.exists():
        shutil.rmtree(submitted)
    for student, assignments in STUDENTS.items():
        for assignment, answers in assignments.items():
            if answers is None:
                continue
            folder = submitted / student / assignment
            if answers == "untouched":
                make_submission(assignment, {}, folder)
            elif answers in ("corrupt", "empty"):
                (path,) = make_submission(assignment, {}, folder)
                path.write_bytes(b'{"cells": [ {"cell_type": "code", "sour' if answers == "corrupt" else b"")
            else:
                make_submission(assignment, {**solution_answers(assignment), **answers}, folder)
    return submitted


if __name__ == "__main__":
    print(f"wrote {build(Path(sys.argv[1]) if len(sys.argv) > 1 else SUBMITTED)}")
