"""The catalogue of to_torch_mha: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_to_torch_mha.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.notebooks import solution_answers
from tests.catalogue.entries import Degenerate, Mistake, Alternative


MISTAKES = [
    Mistake("batch_first left False", "batch_first",
            fails=("returns_batch_first_multihead_attention",),
            code='''def to_torch_mha(module):
    m = nn.MultiheadAttention(module.d_model, module.num_heads, bias=module.W_q.bias is not None,
                              dtype=module.W_q.weight.dtype)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([module.W_q.weight, module.W_k.weight, module.W_v.weight]))
        m.out_proj.weight.copy_(module.W_o.weight)
        if module.W_q.bias is not None:
            m.in_proj_bias.copy_(torch.cat([module.W_q.bias, module.W_k.bias, module.W_v.bias]))
            m.out_proj.bias.copy_(module.W_o.bias)
    return m
'''),
    Mistake("keys stacked first", "keys_first",
            fails=("matches_module_outputs", "stacks_input_projections"),
            code='''def to_torch_mha(module):
    m = nn.MultiheadAttention(module.d_model, module.num_heads, bias=module.W_q.bias is not None, batch_first=True,
                              dtype=module.W_q.weight.dtype)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([module.W_k.weight, module.W_q.weight, module.W_v.weight]))
        m.out_proj.weight.copy_(module.W_o.weight)
        if module.W_q.bias is not None:
            m.in_proj_bias.copy_(torch.cat([module.W_k.bias, module.W_q.bias, module.W_v.bias]))
            m.out_proj.bias.copy_(module.W_o.bias)
    return m
'''),
    Mistake("biases always on, never copied", "bias_off",
            fails=("copies_output_projection", "matches_module_outputs", "stacks_input_projections",
                   "without_bias"),
            code='''def to_torch_mha(module):
    m = nn.MultiheadAttention(module.d_model, module.num_heads, batch_first=True, dtype=module.W_q.weight.dtype)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([module.W_q.weight, module.W_k.weight, module.W_v.weight]))
        m.out_proj.weight.copy_(module.W_o.weight)
    return m
'''),
]


ALTERNATIVES = [
    Alternative("load_state_dict", '''def to_torch_mha(module):
    has_bias = module.W_q.bias is not None
    m = nn.MultiheadAttention(module.W_q.in_features, module.num_heads, bias=has_bias, batch_first=True,
                              dtype=module.W_q.weight.dtype)
    state = {"in_proj_weight": torch.cat([module.W_q.weight, module.W_k.weight, module.W_v.weight]),
             "out_proj.weight": module.W_o.weight}
    if has_bias:
        state["in_proj_bias"] = torch.cat([module.W_q.bias, module.W_k.bias, module.W_v.bias])
        state["out_proj.bias"] = module.W_o.bias
    m.load_state_dict({name: value.detach().clone() for name, value in state.items()})
    return m
'''),
]

# to_torch_mha is handed the grader's stand-in, never the student's MultiHeadAttention (test_to_torch_mha.BUILT_ON):
# a slip of that class, an exercise of its own (mha), costs nothing here.
ALTERNATIVES += [Alternative("a right to_torch_mha beside a MultiHeadAttention still unwritten (mha's own loss)",
                             '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, bias=True):
        raise NotImplementedError


''' + solution_answers("multi_head")["to_torch_mha"])]


DEGENERATES = [
    Degenerate("a new module, nothing copied", '''def to_torch_mha(module):
    return nn.MultiheadAttention(module.d_model, module.num_heads, batch_first=True,
                                 bias=module.W_q.bias is not None, dtype=module.W_q.weight.dtype)
'''),
]
