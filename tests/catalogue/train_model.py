"""The catalogue of train_model: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_train_model.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative
from tests.catalogue.snippets import CSA_FORWARD_HEAD, CSA_INIT, _train


MISTAKES = [
    Mistake("learning rate ignored", "lr",
            fails=("uses_the_learning_rate",),
            code=_train().replace("lr=lr)", "lr=1e-2)")),
    Mistake("losses kept as tensors", "tensor_losses",
            fails=("returns_one_loss_per_step",),
            code=_train(record="loss.detach()")),
    Mistake("optimizer.step() forgotten", "unmoved",
            fails=("learns_the_pattern", "learns_with_one_head", "loss_decreases", "uses_the_learning_rate"),
            code=_train(update=("optimizer.zero_grad()", "loss.backward()"))),
    Mistake("targets flattened in the wrong order", "crossed",
            fails=("learns_the_pattern", "learns_with_one_head", "loss_decreases"),
            code=_train(targets="targets.T.reshape(-1)")),
    Mistake("backward before zero_grad", "unmoved",
            fails=("learns_the_pattern", "learns_with_one_head", "loss_decreases", "uses_the_learning_rate"),
            code=_train(update=("loss.backward()", "optimizer.zero_grad()", "optimizer.step()"))),
]


ALTERNATIVES = [
    Alternative("CrossEntropyLoss on [B, vocab, T], set_to_none", '''def train_model(model, inputs, targets, steps=150, lr=1e-2):
    model.train()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history = []
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        logits, _ = model(inputs)
        loss = criterion(logits.transpose(1, 2), targets)
        loss.backward()
        optimizer.step()
        history.append(float(loss))
        if step % 50 == 0:
            print(f"step {step}: loss {loss.item():.3f}")
    return history
'''),
]

# A slip of CausalSelfAttention, an exercise of its own, is charged there alone: a right loop keeps its points
# where the PatternModel it trains holds the student's own wrong CausalSelfAttention (test_train_model.BUILT_ON:
# the trained parameters are judged in the model they were trained in).
ALTERNATIVES += [
    Alternative(f"a right loop on a CausalSelfAttention {slip} (that exercise's own slip)",
                CSA_INIT + CSA_FORWARD_HEAD + forward + "\n\n" + _train())
    for slip, forward in (
        ("without its causal mask", '''        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.d_k), dim=-1)
        out = (self.dropout(weights) @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''),
        ("whose mask hides the diagonal", '''        hidden = ~self.causal[:T, :T].tril(-1)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).masked_fill(hidden, float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
        out = (self.dropout(weights) @ v).transpose(1, 2).reshape(B, T, D)
        return self.W_o(out), weights
'''))
]


DEGENERATES = [
    Degenerate("made-up decreasing losses, no training", '''def train_model(model, inputs, targets, steps=150, lr=1e-2):
    return [3.0 * 0.97 ** step for step in range(steps)]
'''),
    Degenerate("zeros", '''def train_model(model, inputs, targets, steps=150, lr=1e-2):
    return [0.0] * steps
'''),
]
