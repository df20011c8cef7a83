"""The training and experiment layers' shared pieces: the loop state a checkpoint stores, the one
pydantic base and error formatter of configs and specs, and the per-query score maths."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from smoothrank._config import StrictModel, named_items, problems_error, validation_problems
from smoothrank.training.checkpoint import LoopState
from smoothrank.training.schedules import SoftRankProtocol

PACKAGE = Path(__file__).resolve().parents[1] / "smoothrank"


def _state(seed: int) -> LoopState:
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()  # optimiser moments to save
    schedule = SoftRankProtocol(0.1)
    schedule.step(0, 0.5)
    schedule.step(1, 0.4)  # no improvement: the rate and the patience counter move
    return LoopState(model=model, optimizer=optimizer, schedule=schedule,
                     best_state={k: v.clone() for k, v in model.state_dict().items()}, epoch=2,
                     best_value=0.5, best_epoch=1, stale=1, history=[{"epoch": 1}, {"epoch": 2}])


def test_loop_state_round_trips_through_its_dict():
    saved = _state(0).to_dict()
    fresh = _state(1)  # other weights, moments and schedule state, overwritten by the load
    loaded = LoopState.from_dict(saved, model=fresh.model, optimizer=fresh.optimizer, schedule=fresh.schedule)
    again = loaded.to_dict()
    assert set(again) == set(saved)
    for key in ("epoch", "best_value", "best_epoch", "stale", "stopped", "history", "schedule"):
        assert again[key] == saved[key], key
    assert all(torch.equal(again["model"][k], saved["model"][k]) for k in saved["model"])
    moments = again["optimizer"]["state"][0]["exp_avg"], saved["optimizer"]["state"][0]["exp_avg"]
    assert torch.equal(*moments)
    assert loaded.schedule.lr == pytest.approx(0.08)


def test_loop_state_dict_is_weights_only_loadable(tmp_path):
    torch.save(_state(0).to_dict(), tmp_path / "state.pt")
    assert torch.load(tmp_path / "state.pt", weights_only=True)["stale"] == 1


class _Section(StrictModel):
    name: str
    size: int = 1


class _Doc(StrictModel):
    items: list[_Section]


def test_strict_base_refuses_unknown_keys_and_is_frozen():
    with pytest.raises(ValidationError):
        _Section.model_validate({"name": "a", "sise": 2})
    with pytest.raises(ValidationError):
        _Section(name="a").size = 2  # type: ignore[misc]


def test_validation_problems_name_the_key_and_optionally_the_value():
    with pytest.raises(ValidationError) as info:
        _Doc.model_validate({"items": [{"name": "a", "size": "x"}, {"size": 2}], "extra": 1})
    plain = validation_problems(info.value)
    assert plain[0].startswith("items.0.size: ") and "(got" not in plain[0]
    assert "items.1.name: required key missing" in plain
    assert "extra: unknown key" in plain
    shown = validation_problems(info.value, show_input=True)
    assert shown[0].endswith("(got 'x')")
    assert "extra: unknown key" in shown  # no value shown for a key
    error = problems_error("doc.yaml", "document", plain)
    assert str(error).startswith("doc.yaml: 3 problem(s) in the document:\n  - items.0.size: ")


def test_validation_problems_leave_a_union_tag_out_of_the_key():
    from smoothrank.training.config import Config

    with pytest.raises(ValidationError) as info:
        Config.model_validate({"data": {"mq2008_fold": 1}, "model": {"kind": "mlp", "hidden": [0]}})
    assert validation_problems(info.value, tagged_unions={"model": ("mlp",)})[0].startswith("model.hidden.0:")
    assert validation_problems(info.value)[0].startswith("model.mlp.hidden.0:")


def test_named_items_short_form():
    assert named_items(["a", {"name": "b", "x": 1}, 3]) == [{"name": "a"}, {"name": "b", "x": 1}, 3]
    assert named_items("a") == "a"  # not a list: the schema reports it


def test_ensemble_names_are_the_shared_score_maths():
    from smoothrank.experiments import combine, ensemble, results, runner

    assert ensemble.combine_scores is combine.combine_scores
    assert ensemble.normalize_scores is combine.normalize_scores
    assert ensemble.read_scores is results.read_scores and runner.write_json is results.write_json
    scores = np.array([3.0, 1.0, 2.0, 5.0, 5.0])
    assert combine.normalize_scores(scores, [0, 3, 5], normalize="rank").tolist() == [1.0, 0.0, 0.5, 0.5, 0.5]


def _imports(module: Path) -> set[str]:
    """Every smoothrank module ``module`` imports, inside functions too."""
    found = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("smoothrank"):
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


@pytest.mark.parametrize(("module", "never"), [
    ("training/artifact.py", "smoothrank.training.trainer"),
    ("training/inference.py", "smoothrank.training.artifact"),
    ("training/inference.py", "smoothrank.training.trainer"),
    ("training/checkpoint.py", "smoothrank.training.trainer"),
    ("training/config.py", "smoothrank.experiments"),
    ("_config.py", "smoothrank.training"),
    ("experiments/ensemble.py", "smoothrank.experiments.runner"),
    ("experiments/stacking.py", "smoothrank.experiments.ensemble"),
    ("experiments/results.py", "smoothrank.experiments.runner"),
    ("experiments/combine.py", "smoothrank.experiments.ensemble"),
])
def test_the_layers_import_downwards_only(module, never):
    assert not any(name == never or name.startswith(never + ".") for name in _imports(PACKAGE / module))
