"""The catalogue of param_counts: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_param_counts.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative


MISTAKES = [
    Mistake("bias ignored", "bias",
            fails=("counts_biases",),
            code='''def qkv_parameter_counts(d_model, num_heads, bias=False):
    if d_model % num_heads:
        raise ValueError("indivisible")
    d_k = d_model // num_heads
    return {"full_heads": 3 * num_heads * d_model * d_model, "split_heads": 3 * num_heads * d_model * d_k,
            "fused": 3 * d_model * d_model}
'''),
    Mistake("true division gives floats", "float_division",
            fails=("counts_biases", "split_heads"),
            code='''def qkv_parameter_counts(d_model, num_heads, bias=False):
    if d_model % num_heads:
        raise ValueError("indivisible")
    d_k = d_model / num_heads
    extra = 1 if bias else 0
    return {"full_heads": 3 * num_heads * (d_model + extra) * d_model,
            "split_heads": 3 * num_heads * (d_model + extra) * d_k, "fused": 3 * (d_model + extra) * d_model}
'''),
    Mistake("split heads counted once", "split_heads",
            fails=("counts_biases", "split_heads"),
            code='''def qkv_parameter_counts(d_model, num_heads, bias=False):
    if d_model % num_heads:
        raise ValueError("indivisible")
    d_k = d_model // num_heads
    b = 1 if bias else 0
    return {"full_heads": 3 * num_heads * (d_model + b) * d_model, "split_heads": 3 * (d_model + b) * d_k,
            "fused": 3 * (d_model + b) * d_model}
'''),
    Mistake("no check of divisibility", "divisible",
            fails=("rejects_indivisible_d_model",),
            code='''def qkv_parameter_counts(d_model, num_heads, bias=False):
    d_k = d_model // num_heads
    b = 1 if bias else 0
    return {"full_heads": 3 * num_heads * (d_model + b) * d_model,
            "split_heads": 3 * num_heads * (d_model + b) * d_k, "fused": 3 * (d_model + b) * d_model}
'''),
]


ALTERNATIVES = [
    Alternative("counted from real nn.Linear layers", '''def qkv_parameter_counts(d_model, num_heads, bias=False):
    if d_model % num_heads:
        raise ValueError(f"{d_model} is not divisible by {num_heads}")
    def size(d_out):
        return sum(p.numel() for p in nn.Linear(d_model, d_out, bias=bias).parameters())
    return {"full_heads": 3 * num_heads * size(d_model), "split_heads": 3 * num_heads * size(d_model // num_heads),
            "fused": 3 * size(d_model)}
'''),
]


DEGENERATES = [
    Degenerate("zeros, with the ValueError", '''def qkv_parameter_counts(d_model, num_heads, bias=False):
    if d_model % num_heads:
        raise ValueError("d_model must be divisible by num_heads")
    return {"full_heads": 0, "split_heads": 0, "fused": 0}
'''),
    Degenerate("one number for every count", '''def qkv_parameter_counts(d_model, num_heads, bias=False):
    if d_model % num_heads:
        raise ValueError("d_model must be divisible by num_heads")
    return dict.fromkeys(["full_heads", "split_heads", "fused"], d_model * d_model)
'''),
]
