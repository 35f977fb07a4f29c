"""The catalogue of train_model: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_train_model.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative
from tests.catalogue.snippets import _train


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


DEGENERATES = [
    Degenerate("made-up decreasing losses, no training", '''def train_model(model, inputs, targets, steps=150, lr=1e-2):
    return [3.0 * 0.97 ** step for step in range(steps)]
'''),
    Degenerate("zeros", '''def train_model(model, inputs, targets, steps=150, lr=1e-2):
    return [0.0] * steps
'''),
]
