"""Hidden tests for head_similarity(weights [H, T, S]) -> [H, H] cosine similarities."""

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers.common import H, SK, SQ, named, randn


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "no_norms": "dot products without dividing by the norms",
    "distance": "1 - cosine similarity (a distance, not a similarity)",
    "per_row": "normalising each query row instead of each head's whole map",
    "recipe": "Flatten each head's map to one vector [H, T*S], divide each by its norm, then take all dot products.",
    "square": "One row and column per head.",
    "scale": "Cosine similarity divides by both norms, so scaling a map changes nothing.",
}


def named_mistakes(weights):
    """What each named mistake gives: cause text -> [H, H]."""
    flat = weights.reshape(weights.shape[0], -1)
    unit = flat / flat.norm(dim=-1, keepdim=True)
    rows = weights / weights.norm(dim=-1, keepdim=True)
    return named(CAUSES, no_norms=flat @ flat.T, distance=1 - unit @ unit.T,
                   per_row=torch.einsum("itk,jtk->ij", rows, rows) / weights.shape[1])


def maps(h=H + 1, t=SQ, s=SK, seed=400, dtype=torch.float64):
    return torch.softmax(randn(h, t, s, seed=seed, dtype=dtype) * 2, dim=-1)


def expected(weights):
    flat = weights.reshape(weights.shape[0], -1)
    return torch.nn.functional.cosine_similarity(flat[:, None], flat[None, :], dim=-1)


def similarity(student, weights):
    return checks.tensor(student.call("head_similarity", weights)["output"], "head_similarity(weights)")


def test_depends_on_the_maps(student):
    """The gate: different maps give different similarities, and not one value for every pair."""
    first, second = similarity(student, maps(seed=405)), similarity(student, maps(seed=406))
    checks.shape(first, (H + 1, H + 1), "head_similarity(weights)")
    off_diagonal = first[~torch.eye(H + 1, dtype=torch.bool)]
    checks.require(substance.differs(first, second) and substance.differs(off_diagonal, off_diagonal[:1].expand_as(off_diagonal)),
                   "head_similarity gives the same similarities whatever the maps, so it does not compare them yet.")


def test_shape_and_dtype(student):
    for dtype in (torch.float32, torch.float64):
        result = similarity(student, maps(dtype=dtype))
        checks.shape(result, (H + 1, H + 1), "head_similarity(weights)", CAUSES["square"])
        checks.dtype(result, dtype, "head_similarity(weights)", "Avoid hard-coded dtypes.")


def test_matches_cosine_similarity(student):
    weights = maps(seed=401)
    checks.close(similarity(student, weights), expected(weights), "The similarities", CAUSES["recipe"],
                 named_mistakes(weights))


def test_identical_heads_give_one(student):
    one = maps(h=1, seed=402)
    weights = torch.cat([one, one * 1.0, maps(h=1, seed=403)])
    result = similarity(student, weights)
    checks.shape(result, (3, 3), "head_similarity(weights)")
    checks.close(result.diagonal(), torch.ones(3, dtype=result.dtype), "The diagonal (each head with itself)",
                 CAUSES["recipe"], {name: value.diagonal() for name, value in named_mistakes(weights).items()})
    checks.close(result[0, 1], torch.ones((), dtype=result.dtype), "The similarity of two identical heads", CAUSES["recipe"])
    checks.close(result, result.T, "The similarity matrix compared with its transpose", "It should be symmetric.")


def test_disjoint_heads_give_zero(student):
    eye = torch.eye(SQ, dtype=torch.float64)
    weights = torch.stack([eye, eye.roll(1, dims=-1), eye.roll(2, dims=-1)])
    checks.close(similarity(student, weights), torch.eye(3, dtype=torch.float64),
                 "The similarity of heads that never attend to the same cell", CAUSES["recipe"],
                 named_mistakes(weights))


def test_ignores_the_scale_of_a_map(student):
    weights = maps(seed=404)
    scaled = weights * torch.tensor([1.0, 3.0, 0.5, 10.0], dtype=torch.float64)[:, None, None]
    checks.close(similarity(student, scaled), expected(weights), "The similarities after rescaling some maps",
                 CAUSES["scale"],
                 named_mistakes(scaled))
