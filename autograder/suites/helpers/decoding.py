"""Cached decoding (the kv_cache, gqa and mla suites): a sequence fed as a prompt, then in chunks."""

import torch

from autograder.harness import checks


def piece_bounds(length, first, chunk):
    """(start, end) of the pieces: the first `first` tokens, then `chunk` at a time."""
    return [(0, first)] + [(start, min(start + chunk, length)) for start in range(first, length, chunk)]


def cache_calls(x, first=1, chunk=1):
    """Calls ((method, args, kwargs)) that reset a module's cache, then feed x [B, T, D] in pieces."""
    return [("reset_cache", (), {})] + [("forward", (x[:, start:end],), {"use_cache": True})
                                         for start, end in piece_bounds(x.shape[1], first, chunk)]


def joined_new_outputs(outputs, d_model, width="D"):
    """The tensors among a cached run's outputs (one per piece), each [B, T_new, d_model] (`width`
    names that size in the hint), concatenated over the tokens."""
    outputs = [output for output in outputs if isinstance(output, torch.Tensor)]
    checks.require(outputs, "forward(x_new, use_cache=True) returned no tensor.")
    for output in outputs:
        checks.require(output.dim() == 3 and output.shape[-1] == d_model and output.shape[0] == outputs[0].shape[0],
                       f"forward(x_new, use_cache=True) returned shape {list(output.shape)}.",
                       f"Return the output for the new tokens only: [B, T_new, {width}].")
    return torch.cat(outputs, dim=1)
