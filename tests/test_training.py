"""The trainer on small real data (MQ2008 Fold1 slices): determinism, resume, selection, protocols."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import write_fold1_slices

from smoothrank.errors import ConfigError
from smoothrank.training.artifact import load_model
from smoothrank.training.config import config_from_dict
from smoothrank.training.trainer import (
    CHECKPOINT,
    CONFIG_FILE,
    METRICS_LOG,
    MODEL_FILE,
    SUMMARY_FILE,
    TrainingError,
    evaluate_model,
    predict_scores,
    train,
)


@pytest.fixture(scope="module")
def small_letor(tmp_path_factory, shared_dir) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("letor")
    return write_fold1_slices(shared_dir, folder, train=(0, 40), valid=20, test=20)


def make_config(small_letor, run_dir, **sections):
    base = {
        "seed": 3,
        "data": {k: str(v) for k, v in small_letor.items()},
        "model": {"kind": "mlp", "hidden": [8], "dropout": 0.1},
        "loss": {"name": "list_net"},
        "optimizer": {"lr": 0.01},
        "training": {"epochs": 4, "batch_size": 8, "list_size": 16, "num_threads": 1},
        "evaluation": {"metrics": ["ndcg@3", "ndcg@10", "map"], "select_by": "ndcg@10"},
        "output": {"run_dir": str(run_dir)},
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return config_from_dict(base)


def _strip_time(history):
    return [{k: v for k, v in row.items() if k != "seconds"} for row in history]


def _weights_equal(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_run_directory_and_determinism(small_letor, tmp_path):
    config = make_config(small_letor, tmp_path / "a")
    first = train(config, quiet=True)
    second = train(config, run_dir=tmp_path / "b", quiet=True)
    assert _strip_time(first.history) == _strip_time(second.history)
    assert _weights_equal(first.model.state_dict(), second.model.state_dict())
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted([CHECKPOINT, CONFIG_FILE, METRICS_LOG, MODEL_FILE, SUMMARY_FILE])
    log = [json.loads(line) for line in (tmp_path / "a" / METRICS_LOG).read_text().splitlines()]
    assert [row["epoch"] for row in log] == [1, 2, 3, 4] and all(math.isfinite(r["loss"]) for r in log)
    # The saved config is the resolved one: loading it gives the same config.
    from smoothrank.training.config import load_config

    assert load_config(tmp_path / "a" / CONFIG_FILE) == config
    # A different seed gives a different run.
    other = train(make_config(small_letor, tmp_path / "c", seed=4), quiet=True)
    assert not _weights_equal(first.model.state_dict(), other.model.state_dict())


@pytest.mark.parametrize("kind", ["linear", "mlp", "context_aware"])
def test_a_float64_model_reloads_in_float64(kind, tmp_path):
    # An audit (2026-11-25): the artifact was rebuilt in float32 and load_state_dict rounded the
    # float64 weights into it, so the reloaded model scored differently (by 2e-8 to 1e-7).
    from smoothrank.models import build_model
    from smoothrank.training.artifact import save_model

    torch.manual_seed(5)
    config = config_from_dict({"model": {"kind": kind}, "data": {"train": "unused.txt"}})
    model = build_model(config.model, 6).double().eval()
    save_model(tmp_path / "model.pt", model, config=config, n_features=6)
    loaded = load_model(tmp_path / "model.pt").model
    assert all(p.dtype == torch.float64 for p in loaded.parameters())
    x, mask = torch.randn(3, 5, 6, dtype=torch.float64), torch.rand(3, 5) < 0.7
    with torch.no_grad():
        assert torch.equal(loaded(x, mask), model(x, mask))


def test_summary_json_is_strict_with_an_infinite_metric(tmp_path):
    # A review (2026-11-25): three labels of 1023 overflow the DCG under lightgbm's 2^y - 1 gains, and
    # summary.json held "Infinity", which is not JSON.
    from smoothrank.training.trainer import train

    def letor(first_query: list[int]) -> str:
        grades = [first_query, [2, 1, 0, 0], [1, 0, 2, 0], [0, 1, 1, 2]]
        return "".join(f"{label} qid:{q} 1:{(7 * i + q) % 5} 2:{i % 3}\n"
                       for q, labels in enumerate(grades) for i, label in enumerate(labels))

    (tmp_path / "train.txt").write_text(letor([0, 1, 2, 0]))
    (tmp_path / "valid.txt").write_text(letor([1023, 1023, 1023, 0]))
    config = config_from_dict({"data": {"train": str(tmp_path / "train.txt"),
                                        "valid": str(tmp_path / "valid.txt")},
                               "model": {"kind": "linear"}, "loss": {"name": "list_net"},
                               "training": {"epochs": 1, "num_threads": 1},
                               "evaluation": {"metrics": ["dcg@3", "ndcg@3"], "select_by": "ndcg@3",
                                              "convention": "lightgbm"},
                               "output": {"run_dir": str(tmp_path / "run")}})
    train(config, quiet=True)

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in summary.json")

    summary = json.loads((tmp_path / "run" / "summary.json").read_text(), parse_constant=refuse)
    assert summary["valid"]["dcg@3"] is None and 0.0 <= summary["valid"]["ndcg@3"] <= 1.0


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_a_half_precision_model_reloads_in_float32(half, tmp_path):
    # A review (2026-11-25) of the float64 fix: a half-precision file then reloaded in half precision,
    # and scoring rounded the features to it (-inf scores on MSLR's features up to 1.6e8).
    from smoothrank.models import build_model
    from smoothrank.training.artifact import save_model

    config = config_from_dict({"model": {"kind": "linear"}, "data": {"train": "unused.txt"}})
    model = build_model(config.model, 3).to(half).eval()
    save_model(tmp_path / "model.pt", model, config=config, n_features=3)
    loaded = load_model(tmp_path / "model.pt")
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())
    features = np.array([[1.6e8, 0.0, 1.0], [1.0, 2.0, 3.0]], dtype=np.float32)
    from smoothrank.data import Dataset

    scores = predict_scores(loaded, Dataset.from_arrays(features, np.zeros(2), ["q", "q"]))
    assert np.isfinite(scores).all()


def test_selection_on_validation_and_artifact(small_letor, tmp_path):
    config = make_config(small_letor, tmp_path / "run", transforms=["standardize"],
                         training={"epochs": 5})
    result = train(config, quiet=True)
    valid = [row["valid_ndcg@10"] for row in result.history]
    best = max(range(len(valid)), key=lambda i: (valid[i], -i))
    assert result.best_epoch == best + 1 and result.best_value == valid[best]
    assert not any(key.startswith("test") for row in result.history for key in row)  # never peeks at test
    summary = json.loads((tmp_path / "run" / SUMMARY_FILE).read_text())
    assert summary["best_epoch"] == best + 1 and summary["convention"] == "letor4"
    # The artifact alone reproduces the selected model, transforms included.
    loaded = load_model(tmp_path / "run" / MODEL_FILE)
    from smoothrank.data import load_letor

    test = load_letor(small_letor["test"], n_features=46)
    assert loaded.n_features == 46 and loaded.transform_state is not None
    from smoothrank.data.transforms import transform_from_state

    direct = predict_scores(result.model, transform_from_state(loaded.transform_state).transform(test))
    assert (loaded.score(test) == direct).all()
    assert summary["valid"]["ndcg@10"] == pytest.approx(valid[best], abs=1e-12)
    # predict_scores and evaluate_model take the loaded artifact too (they failed on its missing
    # .training), applying its transforms: the validation figure of the selected epoch again.
    assert (predict_scores(loaded, test) == direct).all()
    valid_set = load_letor(small_letor["valid"], n_features=46)
    assert evaluate_model(loaded, valid_set, metrics=["ndcg@10"])["ndcg@10"] == pytest.approx(valid[best],
                                                                                               abs=1e-12)


def test_resume_after_injected_stop_matches_uninterrupted(small_letor, tmp_path):
    config = make_config(small_letor, tmp_path / "full", schedule={"name": "step", "step_size": 2})
    full = train(config, quiet=True)
    partial = make_config(small_letor, tmp_path / "part", schedule={"name": "step", "step_size": 2})
    train(partial, quiet=True, stop_after_epoch=2)
    assert not (tmp_path / "part" / MODEL_FILE).exists()
    with pytest.raises(ConfigError, match="--resume"):
        train(partial, quiet=True)  # refuses to overwrite a run
    resumed = train(partial, quiet=True, resume=True)
    assert _strip_time(resumed.history) == _strip_time(full.history)
    assert _weights_equal(resumed.model.state_dict(), full.model.state_dict())
    assert resumed.test_metrics == full.test_metrics
    # Resuming with a changed config is refused, naming what changed (and the step schedule
    # that `changed` leaves out).
    changed = make_config(small_letor, tmp_path / "part", optimizer={"lr": 0.5})
    with pytest.raises(ConfigError, match="differs") as info:
        train(changed, quiet=True, resume=True)
    assert ('(optimizer.lr: 0.01 in the run, 0.5 now; schedule.name: "step" in the run, "none" now; '
            "schedule.step_size: 2 in the run, 50 now)") in str(info.value)


def test_transform_columns_beyond_the_data_name_their_key_before_the_run_starts(small_letor, tmp_path):
    steps = [{"name": "signed_log1p", "features": [3, 46]}]
    config = make_config(small_letor, tmp_path / "wide", transforms=steps)
    with pytest.raises(ConfigError, match=r"^transforms\.0\.features: column\(s\) \[46\] out of range for "
                                          r"the training data's 46 features"):
        train(config, quiet=True)
    assert not (tmp_path / "wide").exists()


def test_early_stopping_without_a_validation_split_is_said_and_the_summary_is_honest(small_letor, tmp_path):
    from smoothrank.datasets import load_splits
    from smoothrank.training.trainer import TrainingWarning

    config = make_config(small_letor, tmp_path / "nv", training={"epochs": 3, "early_stopping_patience": 1})
    splits = load_splits({"train": str(small_letor["train"])})
    with pytest.warns(TrainingWarning, match=r"training\.early_stopping_patience: there is no validation"):
        result = train(config, quiet=True, splits=splits)
    assert len(result.history) == 3 and result.best_epoch == 3
    summary = json.loads((tmp_path / "nv" / SUMMARY_FILE).read_text())
    assert summary["selected_by"] == "last epoch (no validation split)"


def test_resume_of_a_run_interrupted_before_its_first_checkpoint_starts_it(small_letor, tmp_path):
    # Interrupted in epoch 1, a run directory holds config.yaml only; the CLI's advice after an
    # interruption is "--resume", which used to fail with "no checkpoint".
    import shutil

    full = train(make_config(small_letor, tmp_path / "full"), quiet=True)
    early = make_config(small_letor, tmp_path / "early")
    (tmp_path / "early").mkdir()
    shutil.copy(tmp_path / "full" / CONFIG_FILE, tmp_path / "early" / CONFIG_FILE)
    resumed = train(early, quiet=True, resume=True)
    assert _strip_time(resumed.history) == _strip_time(full.history)
    with pytest.raises(ConfigError, match="--resume: no checkpoint in"):  # nothing there at all
        train(make_config(small_letor, tmp_path / "typo"), quiet=True, resume=True)


def test_early_stopping_and_softrank_protocol(small_letor, tmp_path):
    # A learning rate of 1e-12 leaves the model unchanged: no epoch after the first improves.
    config = make_config(small_letor, tmp_path / "es", optimizer={"lr": 1e-12},
                         model={"dropout": 0.0}, training={"epochs": 10, "early_stopping_patience": 2})
    result = train(config, quiet=True)
    assert len(result.history) == 3 and result.history[-1]["early_stopped"] and result.best_epoch == 1
    config = make_config(small_letor, tmp_path / "sr", optimizer={"lr": 1e-12}, model={"dropout": 0.0},
                         schedule={"name": "softrank", "factor": 0.5, "reinit_patience": 2},
                         training={"epochs": 4, "sampling": "softrank"})
    rows = train(config, quiet=True).history
    assert [row["lr"] for row in rows] == pytest.approx([1e-12, 1e-12, 5e-13, 2.5e-13])
    assert [row["reinitialized"] for row in rows] == [False, False, True, False]
    assert all("train_ndcg@10" in row for row in rows)
    # After re-initialisation the weights (hence the training metric) change.
    assert rows[3]["train_ndcg@10"] != rows[2]["train_ndcg@10"]


def test_nan_loss_is_a_clear_error(small_letor, tmp_path):
    config = make_config(small_letor, tmp_path / "nan")

    def broken(scores, labels, *, mask=None):
        return (scores * float("nan")).sum()

    with pytest.raises(TrainingError, match="the loss 'broken' became nan at epoch 1, step 1"):
        train(config, quiet=True, loss_fn=broken)  # named as itself, not as loss.name (list_net)


def test_bad_loss_options_fail_before_anything_is_written(small_letor, tmp_path):
    with pytest.raises(ConfigError, match="bogus"):
        make_config(small_letor, tmp_path / "bad", loss={"name": "list_net", "options": {"bogus": 1}})
    with pytest.raises(ConfigError, match="no_such_loss"):
        make_config(small_letor, tmp_path / "bad", loss={"name": "no_such_loss"})
    # A Config built without config_from_dict is still checked by the trainer before any write.
    from smoothrank.training.config import Config

    config = make_config(small_letor, tmp_path / "bad")
    unchecked = Config.model_validate({**config.model_dump(), "loss": {"name": "list_net",
                                                                       "options": {"bogus": 1}}})
    with pytest.raises(ConfigError, match="bogus"):
        train(unchecked, quiet=True)
    assert not (tmp_path / "bad").exists()


def test_a_non_finite_score_names_the_file_and_line_of_its_document(small_letor):
    # A review found features too large for a model's arithmetic ending in "scores: NaN among the
    # real items" from the metrics, naming neither the split nor the document.
    from smoothrank.data import load_letor
    from smoothrank.models import LinearScorer

    dataset = load_letor(small_letor["valid"])
    model = LinearScorer(dataset.n_features)
    big = dataset.features.copy()
    big[5] = 3e38  # each legal float32; their weighted sum overflows
    with torch.no_grad():
        model.net.weight.fill_(1.0)
    bad = dataset.with_features(big)
    line = int(dataset.line_numbers[5])
    for call in (lambda: predict_scores(model, bad), lambda: evaluate_model(model, bad, metrics=["ndcg@10"])):
        with pytest.raises(TrainingError, match=rf"^{re.escape(str(small_letor['valid']))}:{line}: the model "
                                                rf"scored this document inf"):
            call()


def test_evaluate_model_matches_metrics_on_full_lists(small_letor):
    from smoothrank.data import load_letor
    from smoothrank.metrics import evaluate, mean_metrics, pad_groups

    dataset = load_letor(small_letor["valid"])
    torch.manual_seed(0)
    from smoothrank.models import MLPScorer

    model = MLPScorer(dataset.n_features, hidden=(4,), dropout=0.5).train()
    scores = predict_scores(model, dataset, batch_size=3)
    # Dropout is off while scoring (PITFALLS 16), and the model's mode is restored.
    assert (predict_scores(model, dataset, batch_size=3) == scores).all() and model.training
    padded_scores, mask = pad_groups(scores, dataset.offsets)
    padded_labels, _ = pad_groups(dataset.labels.astype("float64"), dataset.offsets)
    expected = mean_metrics(evaluate(padded_scores, padded_labels, mask=mask, metrics=("ndcg@10", "map")))
    got = evaluate_model(model, dataset, metrics=["ndcg@10", "map"], batch_size=3)
    assert got == pytest.approx(expected, abs=1e-12)


def test_the_seed_sets_the_initial_weights_and_the_batch_order_each(small_letor, tmp_path):
    # PITFALLS 17, separately for each use of the seed (a mutation review found a seed ignored by either
    # one still passing): a loss of zero gradient leaves the initial weights, and records the batches.
    def run(seed: int) -> tuple[dict, list[torch.Tensor]]:
        seen: list[torch.Tensor] = []
        folder = tmp_path / f"run{len(list(tmp_path.iterdir()))}"

        def recording(scores, labels, *, mask=None):
            seen.append(labels.clone())
            return scores.sum() * 0.0

        config = make_config(small_letor, folder, seed=seed, training={"epochs": 1},
                             model={"dropout": 0.0})
        return train(config, quiet=True, loss_fn=recording).model.state_dict(), seen

    (weights, batches), (again, batches_again), (other, other_batches) = run(3), run(3), run(4)
    assert _weights_equal(weights, again)
    assert all(torch.equal(a, b) for a, b in zip(batches, batches_again, strict=True))
    assert not any(torch.equal(weights[k], other[k]) for k in weights)
    assert not all(torch.equal(a, b) for a, b in zip(batches, other_batches, strict=True))


def test_metric_names_are_read_as_evaluate_keys_them(small_letor, tmp_path):
    # Found by a review on 2026-11-24: "NDCG@3" passed the config check (evaluate lower-cases its
    # names), then the trainer looked the result up as "NDCG@3" and failed after the first epoch.
    config = make_config(small_letor, tmp_path / "run", training={"epochs": 1},
                         evaluation={"metrics": [" NDCG@3", "MAP"], "select_by": "NDCG@3"},
                         schedule={"name": "softrank", "metric": "NDCG@10"})
    assert config.evaluation.metrics == ["ndcg@3", "map"] and config.evaluation.select_by == "ndcg@3"
    assert config.schedule.metric == "ndcg@10"
    row = train(config, quiet=True).history[0]
    assert {"valid_ndcg@3", "valid_map"} <= set(row)
    from smoothrank.data import load_letor
    from smoothrank.models import MLPScorer

    dataset = load_letor(small_letor["valid"])
    model = MLPScorer(dataset.n_features, hidden=(4,))
    both = evaluate_model(model, dataset, metrics=["ndcg@3", "map"])
    assert evaluate_model(model, dataset, metrics="NDCG@3, MAP") == both


def test_progress_bar_only_on_a_terminal(small_letor, tmp_path, monkeypatch):
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    train(make_config(small_letor, tmp_path / "tty", training={"epochs": 2}), quiet=False)
    shown = terminal.getvalue()
    assert "loss=" in shown and "valid_ndcg@10=" in shown and "epoch=2" in shown
    quiet = Terminal()
    monkeypatch.setattr(sys, "stderr", quiet)
    train(make_config(small_letor, tmp_path / "quiet", training={"epochs": 2}), quiet=True)
    assert quiet.getvalue() == ""
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    train(make_config(small_letor, tmp_path / "piped", training={"epochs": 2}), quiet=False)
    assert piped.getvalue() == ""


def _distance(a, b):
    pairs = zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    return torch.sqrt(sum(((x - y) ** 2).sum() for x, y in pairs))


def test_gradient_clipping_bounds_the_sgd_step(small_letor, tmp_path):
    from smoothrank.models import build_model

    # One SGD step (batch larger than the 40 training queries) with lr 1: the step is the clipped gradient.
    config = make_config(small_letor, tmp_path / "clip", optimizer={"name": "sgd", "lr": 1.0},
                         model={"dropout": 0.0}, training={"epochs": 1, "batch_size": 64, "grad_clip": 1e-3},
                         evaluation={"metrics": ["ndcg@10"], "select_by": "ndcg@10"})
    trained = train(config, quiet=True).model
    torch.manual_seed(config.seed)
    initial = build_model(config.model, 46)
    step = _distance(trained, initial)
    assert 0 < float(step) <= 1e-3 * (1 + 1e-4)
    unclipped = train(make_config(small_letor, tmp_path / "noclip", optimizer={"name": "sgd", "lr": 1.0},
                                  model={"dropout": 0.0}, training={"epochs": 1, "batch_size": 64}),
                      quiet=True).model
    step = _distance(unclipped, initial)
    assert float(step) > 1e-2


def test_tensorboard_is_optional(small_letor, tmp_path):
    config = make_config(small_letor, tmp_path / "tb", output={"tensorboard": True}, training={"epochs": 1})
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match="tensorboard"):
            train(config, quiet=True)
        assert not (tmp_path / "tb").exists()
    else:
        train(config, quiet=True)
        assert any((tmp_path / "tb" / "tensorboard").iterdir())


def test_bad_device_is_a_config_error(small_letor, tmp_path):
    with pytest.raises(ConfigError, match=r"training\.device"):
        train(make_config(small_letor, tmp_path / "dev", training={"device": "warp9"}), quiet=True)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            train(make_config(small_letor, tmp_path / "dev", training={"device": "cuda"}), quiet=True)
    assert not (tmp_path / "dev").exists()


def test_without_validation_the_last_epoch_is_kept(small_letor, tmp_path):
    letor = {"train": small_letor["train"], "test": small_letor["test"]}
    config = make_config(letor, tmp_path / "noval", training={"epochs": 3, "early_stopping_patience": 1})
    from smoothrank.training.trainer import TrainingWarning

    with pytest.warns(TrainingWarning, match="early_stopping_patience"):  # nothing to stop on
        result = train(config, quiet=True)
    assert result.best_epoch == 3 and len(result.history) == 3 and result.valid_metrics == {}
    assert set(result.test_metrics) == {"ndcg@3", "ndcg@10", "map"}
    assert not any(key.startswith("valid") for row in result.history for key in row)


def test_pad_longest_and_length_groups_train_the_same_model(small_letor, tmp_path):
    # Same slates, same maths: only the padding the model and the loss see differs. (SGD: Adam's
    # normalisation would blow float rounding of near-zero gradients up to whole steps.)
    model = {"kind": "context_aware", "input_dim": 8, "n_blocks": 1, "hidden": 16, "dropout": 0.0}
    sgd = {"name": "sgd", "lr": 0.05}
    plain = train(make_config(small_letor, tmp_path / "a", model=model, optimizer=sgd), quiet=True)
    fast = train(make_config(small_letor, tmp_path / "b", model=model, optimizer=sgd,
                             training={"pad": "longest", "length_groups": 3}), quiet=True)
    for a, b in zip(plain.history, fast.history, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)
    for key, value in plain.model.state_dict().items():
        torch.testing.assert_close(fast.model.state_dict()[key], value, atol=1e-4, rtol=1e-4)


def test_the_best_validation_epoch_is_kept_not_the_last(small_letor, tmp_path):
    """PITFALLS 16: only the last epoch saved instead of the best on validation.

    Two epochs of ListNet, then the loss is turned upside down so that the later epochs unlearn
    the ranking: the selected epoch is an early one, and both the returned model and model.pt
    score the validation split exactly as that epoch did (not as the last one)."""
    from smoothrank import losses
    from smoothrank.data import load_letor

    calls = {"n": 0}
    steps_per_epoch = 5  # 40 training queries, batches of 8

    def helpful_then_harmful(scores, labels, *, mask=None):
        calls["n"] += 1
        sign = 1.0 if calls["n"] <= 2 * steps_per_epoch else -10.0
        return sign * losses.list_net(scores, labels, mask=mask)

    config = make_config(small_letor, tmp_path / "best", model={"dropout": 0.0}, optimizer={"lr": 0.05},
                         training={"epochs": 5})
    result = train(config, quiet=True, loss_fn=helpful_then_harmful)
    valid = [row["valid_ndcg@10"] for row in result.history]
    assert result.best_epoch <= 2 and valid[result.best_epoch - 1] > valid[-1] + 0.1, valid
    valid_set = load_letor(small_letor["valid"], n_features=46)
    kwargs = {"metrics": ["ndcg@10"], "convention": "letor4"}
    assert evaluate_model(result.model, valid_set, **kwargs)["ndcg@10"] == valid[result.best_epoch - 1]
    saved = load_model(tmp_path / "best" / MODEL_FILE).model
    assert evaluate_model(saved, valid_set, **kwargs)["ndcg@10"] == valid[result.best_epoch - 1]


def test_the_test_split_never_influences_training_or_selection(small_letor, tmp_path):
    """PITFALLS 16 (hyper-parameters or epochs selected on the test split) and 17 (configs mutated
    in place): the same run with and without a test split has the same history, selected epoch
    and weights; train() leaves its config untouched."""
    with_test = make_config(small_letor, tmp_path / "with", training={"epochs": 3})
    before = with_test.model_dump()
    a = train(with_test, quiet=True)
    assert with_test.model_dump() == before
    no_test = {name: path for name, path in small_letor.items() if name != "test"}
    b = train(make_config(no_test, tmp_path / "without", training={"epochs": 3}), quiet=True)
    assert _strip_time(a.history) == _strip_time(b.history) and a.best_epoch == b.best_epoch
    assert _weights_equal(a.model.state_dict(), b.model.state_dict())
    assert a.test_metrics and not b.test_metrics


def test_scores_need_no_labels_at_inference(small_letor):
    """PITFALLS 14: padding marked by a sentinel label forces fake labels at inference. Here the
    model sees features and the mask only: any labels give the same scores."""
    from smoothrank.data import load_letor
    from smoothrank.models import MLPScorer

    dataset = load_letor(small_letor["valid"])
    torch.manual_seed(0)
    model = MLPScorer(dataset.n_features, hidden=(4,))
    garbage = np.full(dataset.n_docs, -7.0, dtype=np.float32)
    relabelled = type(dataset)(dataset.features, garbage, dataset.qids, dataset.doc_ids, dataset.offsets,
                               dataset.line_numbers)
    assert (predict_scores(model, dataset) == predict_scores(model, relabelled)).all()


def test_context_aware_ranker_scores_a_list_alike_in_a_training_slate_and_at_inference(small_letor):
    """PITFALLS 18: positional indices that differ between training and inference. The Context-Aware
    Ranker has no positional encoding: a list shuffled and padded inside a training batch (train
    mode, as the trainer calls it) gets the scores it gets alone at inference (eval mode, full lists
    in length buckets), item by item."""
    from smoothrank.data import load_letor, training_batches
    from smoothrank.models import ContextAwareRanker, score_in_length_groups

    dataset = load_letor(small_letor["valid"])
    torch.manual_seed(0)
    model = ContextAwareRanker(dataset.n_features, input_dim=8, n_blocks=2, n_heads=2, hidden=16, dropout=0.0)
    at_inference = predict_scores(model, dataset, batch_size=3)
    longest = int(dataset.list_sizes.max())
    model.train()
    seen = 0
    for groups in (1, 2):
        for batch in training_batches(dataset, list_size=longest + 5, batch_size=4, shuffle=True,
                                      seed_or_generator=groups):
            scores = score_in_length_groups(model, batch.features, batch.mask, groups=groups)
            rows = batch.rows[batch.mask].numpy()
            np.testing.assert_allclose(scores[batch.mask].detach().double().numpy(), at_inference[rows],
                                       rtol=1e-5, atol=1e-5)
            seen += rows.shape[0]
    assert seen == 2 * dataset.n_docs


def test_a_run_saved_with_an_unread_schedule_option_resumes(small_letor, tmp_path):
    # A review (2026-11-25): a run interrupted before the schedule check, whose checkpoint holds an
    # option its schedule does not read (inherited step_size: 10 under name: none), could not be
    # resumed: the resolved config now resets it to 50 ("schedule.step_size: 10 in the run, 50 now"),
    # and no config could give the run's value back.
    import torch

    from smoothrank.training.trainer import CHECKPOINT

    config = make_config(small_letor, tmp_path / "old", training={"epochs": 2})
    train(config, quiet=True, stop_after_epoch=1)
    path = tmp_path / "old" / CHECKPOINT
    state = torch.load(path, weights_only=False)
    state["config"]["schedule"]["step_size"] = 10  # as the code before the check saved it
    torch.save(state, path)
    assert len(train(config, quiet=True, resume=True).history) == 2


# --- found by an audit of the training layer (2026-11-25) --------------------------------------------


def test_resume_on_data_of_another_shape_is_refused_naming_the_split(small_letor, tmp_path):
    # Used to end in load_state_dict's size-mismatch traceback (feature count changed) or to resume
    # silently on other queries (same feature count).
    from smoothrank.datasets import load_splits

    splits = load_splits({k: str(v) for k, v in small_letor.items()})
    config = make_config(small_letor, tmp_path / "r")
    train(config, quiet=True, stop_after_epoch=1, splits=splits)
    narrow = {name: ds.with_features(ds.features[:, :40]) for name, ds in splits.items()}
    with pytest.raises(ConfigError, match=r"^--resume: data\.test has changed since the run in .* "
                                          r"started \(\d+ documents, \d+ queries, 46 features then; "
                                          r"\d+, \d+, 40 now\)"):
        train(config, quiet=True, resume=True, splits=narrow)
    fewer = {**splits, "valid": splits["valid"].subset(np.arange(splits["valid"].n_queries - 1))}
    with pytest.raises(ConfigError, match=r"^--resume: data\.valid has changed"):
        train(config, quiet=True, resume=True, splits=fewer)
    with pytest.raises(ConfigError, match=r"the data no longer has a test split"):
        train(config, quiet=True, resume=True, splits={k: v for k, v in splits.items() if k != "test"})
    assert len(train(config, quiet=True, resume=True, splits=splits).history) == 4


def test_resume_before_the_first_checkpoint_still_compares_the_configuration(small_letor, tmp_path):
    # With config.yaml alone in the folder, --resume used to start afresh with any settings and
    # rewrite config.yaml without a word.
    first = make_config(small_letor, tmp_path / "early")
    (tmp_path / "early").mkdir()
    (tmp_path / "early" / CONFIG_FILE).write_text(
        (Path(train(make_config(small_letor, tmp_path / "full"), quiet=True).run_dir) / CONFIG_FILE)
        .read_text().replace(str(tmp_path / "full"), str(tmp_path / "early")))
    changed = make_config(small_letor, tmp_path / "early", optimizer={"lr": 0.05})
    with pytest.raises(ConfigError, match=r"differs .*\(optimizer\.lr: 0\.01 in the run, 0\.05 now\)"):
        train(changed, quiet=True, resume=True)
    assert not (tmp_path / "early" / CHECKPOINT).exists()
    assert len(train(first, quiet=True, resume=True).history) == 4


def test_resume_removes_only_its_own_temporary_files(small_letor, tmp_path):
    config = make_config(small_letor, tmp_path / "r")
    train(config, quiet=True, stop_after_epoch=1)
    ours = tmp_path / "r" / f".{CHECKPOINT}.0123456789abcdef.tmp"
    ours.write_bytes(b"half")
    mine = tmp_path / "r" / ".my-notes.tmp"
    mine.write_text("keep me")
    (tmp_path / "r" / ".cache.tmp").mkdir()
    train(config, quiet=True, resume=True)
    assert not ours.exists() and mine.read_text() == "keep me" and (tmp_path / "r" / ".cache.tmp").is_dir()


def test_a_diverged_run_is_not_blamed_on_the_validation_file(small_letor, tmp_path):
    # Weights that grew huge but finite scored the validation split -inf: the error named a line of
    # the (healthy) validation file and said nothing of the epoch or the learning rate.
    # One step per epoch (a batch of 64 > 40 queries): the first step's weights are finite.
    config = make_config(small_letor, tmp_path / "d", loss={"name": "rmse"}, model={"dropout": 0.0},
                         optimizer={"name": "sgd", "lr": 1e30}, training={"batch_size": 64})
    with pytest.raises(TrainingError, match=r"^the weights of epoch 1 scored .*vali\.txt:\d+ -?inf: the run "
                                            r"diverged \(optimizer\.lr=1e\+30; try a smaller optimizer\.lr"):
        train(config, quiet=True)


@pytest.mark.parametrize(("loss", "warned"), [("list_net", True), ("lambda_rank", True), ("rmse", False)])
def test_one_document_slates_are_warned_of(small_letor, tmp_path, loss, warned):
    import warnings

    from smoothrank.training.trainer import TrainingWarning

    config = make_config(small_letor, tmp_path / loss, loss={"name": loss},
                         training={"epochs": 1, "list_size": 1})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(config, quiet=True)
    said = [w for w in caught if issubclass(w.category, TrainingWarning) and "list_size=1" in str(w.message)]
    assert bool(said) is warned


def test_one_document_slates_are_not_warned_of_for_a_custom_loss(small_letor, tmp_path):
    # A custom loss_fn may be pointwise (it learns from one document): warning of it was a false alarm.
    import warnings

    from smoothrank.losses import rmse
    from smoothrank.training.trainer import TrainingWarning

    config = make_config(small_letor, tmp_path / "custom", loss={"name": "list_net"},
                         training={"epochs": 1, "list_size": 1})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(config, quiet=True, loss_fn=rmse)
    said = [w for w in caught if issubclass(w.category, TrainingWarning) and "list_size=1" in str(w.message)]
    assert not said


def test_train_result_keeps_its_field_order():
    # run_dir was moved before valid_metrics once: a positional TrainResult put the metrics in run_dir.
    from smoothrank.training.trainer import TrainResult

    result = TrainResult(None, 1, 0.5, [], {"ndcg@10": 0.4}, {"ndcg@10": 0.3})
    assert result.valid_metrics == {"ndcg@10": 0.4} and result.test_metrics == {"ndcg@10": 0.3}
    assert result.run_dir is None


def test_train_restores_the_callers_deterministic_warn_only_setting(small_letor, tmp_path):
    before = (torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        train(make_config(small_letor, tmp_path / "w", training={"epochs": 1}), quiet=True)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@pytest.mark.parametrize(("section", "key", "value"), [
    ("training", "epochs", "3"), ("optimizer", "lr", "0.01"), ("training", "deterministic", "off"),
    ("training", "deterministic", 0), ("output", "tensorboard", "no")])
def test_quoted_numbers_and_non_boolean_switches_are_refused(small_letor, tmp_path, section, key, value):
    # Pydantic's lax mode read "3" as 3 and "off" or 0 as False; the docs say a wrong type is an error.
    with pytest.raises(ConfigError, match=rf"{section}\.{key}"):
        make_config(small_letor, tmp_path / "q", **{section: {key: value}})


def test_resume_before_the_first_checkpoint_takes_the_runs_own_resolved_config(small_letor, tmp_path):
    # A review: config.yaml was validated again as a new document, and a resolved gain mapping (its
    # labels written as strings) failed it, so the run's own unchanged config refused to resume.
    from smoothrank.training.config import dump_config

    gain = {"gain": {0: 0.0, 1: 1.0, 2: 3.0}}
    config = make_config(small_letor, tmp_path / "g", loss={"name": "lambda_rank", "options": gain},
                         training={"epochs": 1})
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / CONFIG_FILE).write_text(dump_config(config))  # what train() writes first
    assert len(train(config, quiet=True, resume=True).history) == 1
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / CONFIG_FILE).write_text("seed: [unclosed\n")
    damaged = make_config(small_letor, tmp_path / "h")
    with pytest.raises(ConfigError, match=r"(?s)^--resume: the run's configuration cannot be read: .*"
                                          r"config\.yaml: not valid YAML.*delete its folder"):
        train(damaged, quiet=True, resume=True)


def test_a_runs_config_yaml_with_a_gain_mapping_trains_again(small_letor, tmp_path):
    # An audit: config.yaml wrote a gain mapping's labels as strings ('0': 0.0), which the gain check
    # refuses, so `smoothrank train RUN/config.yaml` failed on the run's own resolved config.
    from smoothrank.training.config import dump_config, load_config

    gain = {"gain": {0: 0.0, 1: 1.0, 2: 3.0}}
    config = make_config(small_letor, tmp_path / "g", loss={"name": "lambda_rank", "options": gain},
                         training={"epochs": 1})
    train(config, quiet=True)
    again = load_config(tmp_path / "g" / CONFIG_FILE)
    assert again == config and again.loss.options["gain"] == gain["gain"]
    # A file written before that fix (string labels) still resumes a run with no checkpoint yet.
    (tmp_path / "old").mkdir()
    old_text = dump_config(config).replace("0: 0.0", "'0': 0.0").replace("1: 1.0", "'1': 1.0")
    assert "'0': 0.0" in old_text
    (tmp_path / "old" / CONFIG_FILE).write_text(old_text)
    resumed = make_config(small_letor, tmp_path / "old", loss={"name": "lambda_rank", "options": gain},
                          training={"epochs": 1})
    assert len(train(resumed, quiet=True, resume=True).history) == 1


# ------------------------------------------------------------------------------ mixed precision
def test_bfloat16_on_the_cpu_trains_under_autocast_with_close_metrics(small_letor, tmp_path):
    from smoothrank import losses

    seen = []
    list_net = losses.get("list_net")

    def recorded(scores, labels, *, mask):
        seen.append(scores.dtype)  # the model's output, computed under autocast
        return list_net(scores, labels, mask=mask)

    full = train(make_config(small_letor, tmp_path / "f32"), quiet=True)
    half = train(make_config(small_letor, tmp_path / "bf16", training={"precision": "bfloat16"}),
                 loss_fn=recorded, quiet=True)
    assert seen and set(seen) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in half.model.parameters())  # the weights stay float32
    assert all(math.isfinite(row["loss"]) for row in half.history)
    for split in ("valid_metrics", "test_metrics"):
        a, b = getattr(full, split), getattr(half, split)
        assert a.keys() == b.keys() and all(math.isfinite(v) for v in b.values())
        assert max(abs(a[k] - b[k]) for k in a) < 0.05, (split, a, b)
    # the run is bfloat16's, not float32's: another rounding, other weights
    assert not _weights_equal(full.model.state_dict(), half.model.state_dict())


def test_float16_on_the_cpu_is_a_config_error(small_letor, tmp_path):
    config = make_config(small_letor, tmp_path / "f16", training={"precision": "float16"})
    with pytest.raises(ConfigError, match=r"training\.precision: float16 needs a CUDA device"):
        train(config, quiet=True)
    assert not (tmp_path / "f16").exists()
    with pytest.raises(ConfigError, match="precision"):
        make_config(small_letor, tmp_path / "x", training={"precision": "float64"})


@pytest.mark.parametrize("steps", [
    ["signed_log1p", "standardize"],
    [{"name": "signed_log1p", "features": [0, 2]}, "query_minmax", "standardize"],
])
def test_transforms_applied_per_batch_train_the_model_of_transformed_splits(small_letor, tmp_path, steps):
    # The trainer applies the fitted transforms to each batch's rows (no transformed copy of a split);
    # the model must be the one trained on the splits transformed whole beforehand, bit for bit.
    from smoothrank.data import load_letor
    from smoothrank.data.transforms import TransformedDataset
    from smoothrank.training.blocks import build_transform
    from smoothrank.training.inference import predict_scores

    sgd = {"name": "sgd", "lr": 0.05}
    per_batch = train(make_config(small_letor, tmp_path / "a", transforms=steps, optimizer=sgd), quiet=True)
    raw = {name: load_letor(path, cache=True) for name, path in small_letor.items()}  # memory maps
    whole = build_transform(make_config(small_letor, tmp_path / "x", transforms=steps))
    whole.fit(raw["train"])
    splits = {name: whole.transform(ds) for name, ds in raw.items()}
    before = train(make_config(small_letor, tmp_path / "b", optimizer=sgd), quiet=True, splits=splits)
    assert _strip_time(per_batch.history) == _strip_time(before.history)
    assert _weights_equal(per_batch.model.state_dict(), before.model.state_dict())
    assert per_batch.test_metrics == before.test_metrics
    loaded = load_model(tmp_path / "a" / MODEL_FILE)
    assert isinstance(loaded.prepared(raw["test"]), TransformedDataset)
    np.testing.assert_array_equal(loaded.score(raw["test"]), predict_scores(before.model, splits["test"]))
