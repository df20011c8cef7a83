"""The loss registry's metadata: a loss registered by a user works wherever a built-in one does
(informative queries, the boosting objectives, a training config, the command line)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from smoothrank import boosting, losses
from smoothrank.cli import main
from smoothrank.errors import ConfigError

NAME = "test_squared_pair_hinge"
CALLS = {"loss": 0, "diagonal": 0}


def _pair_terms(scores, labels, mask, margin):
    from smoothrank.losses import _common as C

    scores, labels, mask = C.check_inputs(scores, labels, mask)
    pairs = (labels.unsqueeze(-1) > labels.unsqueeze(-2)) & mask.unsqueeze(-1) & mask.unsqueeze(-2)
    n_pairs = pairs.sum((-1, -2)).to(scores.dtype)
    valid = (n_pairs > 0) & C.has_relevant(labels, mask)
    slack = torch.relu(margin - (scores.unsqueeze(-1) - scores.unsqueeze(-2)))
    return scores, pairs, n_pairs.clamp_min(1.0), valid, slack


def squared_pair_hinge(scores, labels, *, mask=None, reduction="mean", margin=1.0):
    """Mean over pairs y_i > y_j of relu(margin - (s_i - s_j))^2."""
    CALLS["loss"] += 1
    from smoothrank.losses import _common as C

    _, pairs, n_pairs, valid, slack = _pair_terms(scores, labels, mask, margin)
    per_query = torch.where(pairs, slack**2, 0.0).sum((-1, -2)) / n_pairs
    return C.reduce(per_query, valid, reduction)


def squared_pair_hinge_hessian_diagonal(scores, labels, *, mask=None, reduction="mean", margin=1.0):
    """Its Hessian diagonal in closed form: 2 [slack > 0] summed over the item's pairs / n_pairs."""
    CALLS["diagonal"] += 1
    from smoothrank.losses import _common as C

    scores, pairs, n_pairs, valid, slack = _pair_terms(scores.detach(), labels, mask, margin)
    active = (pairs & (slack > 0)).to(scores.dtype)
    per_item = 2.0 * (active.sum(-1) + active.sum(-2)) / n_pairs.unsqueeze(-1)
    return C.reduce_rows(per_item, valid, reduction)


@pytest.fixture
def registered():
    losses.register(NAME, squared_pair_hinge, family="pairwise", distinct_labels=True,
                    constant_on_equal_labels=True, hessian_diagonal=squared_pair_hinge_hessian_diagonal,
                    twice_differentiable=True)
    CALLS.update(loss=0, diagonal=0)
    yield NAME
    losses.unregister(NAME)


def test_the_registry_describes_it_and_refuses_conflicts(registered):
    described = losses.info(registered)
    assert described.fn is squared_pair_hinge and described.family == "pairwise"
    assert losses.info(squared_pair_hinge) == described == losses.info(losses.get(registered, margin=2.0))
    assert losses.options(registered) == {"margin": 1.0}
    with pytest.raises(ConfigError, match="already registered"):
        losses.register(registered, squared_pair_hinge)  # the same function, another description
    with pytest.raises(ConfigError, match="relevance"):
        losses.register("test_other", squared_pair_hinge, relevance="positive")
    with pytest.raises(ConfigError, match="keyword-only 'mask'"):
        losses.register("test_other", lambda s, y, mask=None, *, reduction="mean": s.sum())
    assert losses.find(lambda s, y: s) is None
    assert "test_other" not in losses.available()


def test_informative_queries_reads_its_description(registered):
    labels = torch.tensor([[2.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    mask = torch.tensor([[True] * 3, [True] * 3, [True] * 3, [True, False, True]])
    counted = losses.informative_queries(registered, labels, mask=mask)
    # a pair and a relevant document; one label only; nothing relevant; the relevant one is padding
    assert counted.tolist() == [True, False, False, False]
    scores = torch.randn(4, 3, dtype=torch.float64)
    fn = losses.get(registered, margin=0.5)
    total, mean = fn(scores, labels, mask=mask, reduction="sum"), fn(scores, labels, mask=mask)
    torch.testing.assert_close(mean, total / counted.sum())
    # Described with relevance="gain" and no pair needed, the same function counts the queries of
    # positive ideal DCG (gain "exp2", discount "log2": it has no such options).
    losses.unregister(registered)
    losses.register(registered, squared_pair_hinge, relevance="gain")
    assert losses.informative_queries(registered, labels, mask=mask).tolist() == [True, True, False, False]


def test_lightgbm_objective_uses_its_closed_form_hessian(registered):
    lightgbm = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(0)
    sizes = np.array([6, 4, 5, 5])
    x = rng.normal(size=(int(sizes.sum()), 3))
    y = rng.integers(0, 3, size=int(sizes.sum())).astype(float)
    y[6:10] = 1.0  # a query of equal labels: no gradient, no Hessian
    data = lightgbm.Dataset(x, y, group=sizes, params={"verbosity": -1, "min_data_in_leaf": 1}).construct()
    objective = boosting.lightgbm_objective(registered, hessian="diagonal", margin=0.5)
    grad, hess = objective(np.zeros(len(y)), data)
    assert CALLS["diagonal"] > 0
    assert np.all(grad[6:10] == 0) and np.all(hess[6:10] == 0)
    # The closed form is autograd's diagonal (the generic path, the registry's entry masked).
    described = losses.info(registered)
    losses.unregister(registered)
    losses.register(registered, described.fn, family=described.family, distinct_labels=True,
                    constant_on_equal_labels=True, twice_differentiable=True)
    generic = boosting.boosting_gradients(registered, np.zeros(len(y)), y, sizes, hessian="diagonal",
                                          margin=0.5)
    np.testing.assert_allclose(grad, generic[0], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(hess, generic[1], rtol=1e-12, atol=1e-15)
    booster = lightgbm.train({"objective": objective, "verbosity": -1, "min_data_in_leaf": 1,
                              "num_leaves": 4}, data, num_boost_round=3)
    assert np.isfinite(booster.predict(x)).all()


def _write_letor(path, rng, n_queries):
    lines = []
    for qid in range(1, n_queries + 1):
        for _ in range(6):
            features = rng.normal(size=4)
            label = int(features[0] > 0) + int(features[1] > 0.5)
            lines.append(f"{label} qid:{qid} " + " ".join(f"{i + 1}:{v:.4f}" for i, v in enumerate(features)))
    path.write_text("\n".join(lines) + "\n")


def test_a_training_config_names_it(registered, tmp_path):
    from smoothrank.training import load_config, train

    rng = np.random.default_rng(1)
    _write_letor(tmp_path / "train.txt", rng, 12)
    _write_letor(tmp_path / "valid.txt", rng, 4)
    config_text = f"""
seed: 0
data: {{train: {tmp_path / 'train.txt'}, valid: {tmp_path / 'valid.txt'}}}
model: {{kind: linear}}
loss: {{name: {registered}, options: {{margin: 0.5}}}}
optimizer: {{lr: 0.05}}
training: {{epochs: 2, batch_size: 4, list_size: 6, num_threads: 1}}
evaluation: {{metrics: ["ndcg@5"], select_by: "ndcg@5"}}
output: {{run_dir: {tmp_path / 'run'}}}
"""
    (tmp_path / "c.yaml").write_text(config_text)
    config = load_config(tmp_path / "c.yaml")
    calls_before = CALLS["loss"]
    result = train(config, quiet=True)
    assert CALLS["loss"] > calls_before  # the registered function is what trained
    assert len(result.history) == 2 and all(np.isfinite(row["loss"]) for row in result.history)
    (tmp_path / "bad.yaml").write_text(config_text.replace("margin: 0.5", "margn: 0.5"))
    with pytest.raises(ConfigError, match="margn"):
        load_config(tmp_path / "bad.yaml")


def test_the_command_line_lists_it(registered, capsys):
    assert main(["losses"]) == 0
    listing = capsys.readouterr().out
    line = next(row for row in listing.splitlines() if row.startswith(f"{registered}:"))
    assert "margin=1.0" in line and "pairwise" in line and "closed-form Hessian diagonal" in line
